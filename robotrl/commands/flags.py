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


def add_fleet_arguments(parser: Any) -> None:
    """`--fleet FILE --fleet-robot NAME`: take the arm's options from a fleet file."""
    parser.add_argument("--fleet", help="fleet file (TOML) to take the arm from; needs --fleet-robot")
    parser.add_argument(
        "--fleet-robot",
        metavar="NAME",
        help="the [robots.NAME] of --fleet: sets --robot, --port, --robot-id and --cameras (its [cameras.*])",
    )


def apply_fleet(args: Any) -> None:
    """Replace `args.robot`, `.port`, `.robot_id` and `.cameras` by the fleet file's robot."""
    from robotrl.core.errors import UserError

    if (args.fleet is None) != (args.fleet_robot is None):
        raise UserError("--fleet and --fleet-robot go together")
    if args.fleet is None:
        return
    from robotrl.fleet import load_fleet

    arm = load_fleet(args.fleet).arm(args.fleet_robot)
    args.robot, args.port, args.cameras = arm["robot"], arm["port"], arm["cameras"]
    args.robot_id = arm["robot_id"] or args.robot_id
