"""Flags that fill a config field: the default is read from the field (each default is
written once, in its frozen dataclass) and the help ends with it."""

from __future__ import annotations

from typing import Any

from robotrl.core.config import field_default


def add_field(parser: Any, flag: str, config: type, help: str, *, field: str | None = None, **options: Any) -> None:
    """`parser.add_argument(flag)` for `config.field` (default: the flag's own name,
    `--min-transitions` -> `min_transitions`); `type` follows the default unless given."""
    name = field or flag.lstrip("-").replace("-", "_")
    default = field_default(config, name)
    if "type" not in options and isinstance(default, (int, float, str)) and not isinstance(default, bool):
        options["type"] = type(default)
    parser.add_argument(flag, default=default, help=f"{help} (default: %(default)s)", **options)
