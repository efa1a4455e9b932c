"""Configs travel as data: frozen dataclasses to JSON files and back.

A parent process writes its child's config (`save_config`) and starts the child with
`--config FILE`; the child reads it back (`load_config`) into the same frozen dataclass,
validated by its `__post_init__`. Nested dataclasses, `Path`s, tuples and None round-trip.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any

from robotrl.core.errors import ConfigError


def config_to_dict(config: Any) -> dict:
    """A JSON-ready dict of the dataclass `config` (Paths as strings, tuples as lists)."""

    def plain(value: Any) -> Any:
        if hasattr(value, "to_dict") and not isinstance(value, type):
            return value.to_dict()
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        return value

    return plain(config)


def config_from_dict[T](cls: type[T], data: dict) -> T:
    """`cls(**data)` with nested dataclasses, Paths and tuples rebuilt from their field
    types; an unknown or invalid field is a `ConfigError` naming it."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{cls.__name__}: unknown field(s) {', '.join(unknown)}")
    try:
        return cls(**{k: _rebuild(hints[k], v) for k, v in data.items()})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{cls.__name__}: {exc}") from None


def _rebuild(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for option in options:
        origin = typing.get_origin(option) or option
        if hasattr(origin, "from_dict") and isinstance(value, dict):  # a type with its own JSON form
            return origin.from_dict(value)
        if isinstance(origin, type) and dataclasses.is_dataclass(origin) and isinstance(value, dict):
            return config_from_dict(origin, value)
        if origin is Path:
            return Path(value)
        if origin is tuple and isinstance(value, list):
            args = typing.get_args(option)
            item = args[0] if len(args) == 2 and args[1] is Ellipsis else Any
            return tuple(_rebuild(item, v) for v in value)
    return value


def save_config(config: Any, path: Path) -> Path:
    """Write `config` as JSON to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config_to_dict(config), indent=1))
    return path


def load_config[T](cls: type[T], path: Path) -> T:
    """The `cls` config saved at `path`; a missing or malformed file is a `ConfigError`."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a JSON object")
    return config_from_dict(cls, data)


def field_default(cls: type, name: str) -> Any:
    """The default of field `name` of the dataclass `cls`: command-line flags take their
    defaults from the config they fill, so each default is written once."""
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise ConfigError(f"{cls.__name__}.{name} has no default")
