"""Flags that fill a config field: the default is read from the field (each default is
written once, in its frozen dataclass) and the help ends with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from robotrl.core.config import field_default

if TYPE_CHECKING:
    from robotrl.inference.delayed import DelaySpec


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
        help="the [robots.NAME] of --fleet: sets --robot, --port, --robot-id and a real arm's --cameras (its "
        "[cameras.*])",
    )


def apply_fleet(args: Any) -> None:
    """Replace `args.robot`, `.port`, `.robot_id` and a real arm's `.cameras` by the fleet
    file's robot (a simulated arm renders the cameras the command asks for)."""
    from robotrl.core.errors import UserError

    if (args.fleet is None) != (args.fleet_robot is None):
        raise UserError("--fleet and --fleet-robot go together")
    if args.fleet is None:
        return
    from robotrl.fleet import load_fleet

    arm = load_fleet(args.fleet).arm(args.fleet_robot)
    args.robot, args.port = arm["robot"], arm["port"]
    if arm["robot"] != "sim":
        args.cameras = arm["cameras"]
    args.robot_id = arm["robot_id"] or args.robot_id


DEVICE_HELP = (
    "where the model runs: auto (the GPU a --fleet file gives this role, else the GPU with the most free "
    "memory, else the CPU), cpu, cuda (= cuda:0) or cuda:N"
)


def add_device_arguments(parser: Any, *, role: str | None = None, config: type | None = None) -> None:
    """`--device` (default from `config.device`, else auto) and, for a command with a
    fleet `role` (inference_server, learner), `--fleet FILE` to look its GPU up."""
    from robotrl.core.devices import DEFAULT_DEVICE

    if config is not None:
        add_field(parser, "--device", config, DEVICE_HELP)
    else:
        parser.add_argument("--device", default=DEFAULT_DEVICE, help=f"{DEVICE_HELP} (default: %(default)s)")
    if role is not None:
        parser.add_argument(
            "--fleet",
            metavar="FILE",
            help=f"fleet file (TOML): --device auto takes the GPU its [gpus.*] entries give the {role} role here",
        )


def resolve_device(requested: str, *, role: str | None = None, fleet: str | None = None) -> str:
    """The device for `--device requested` ("cpu" or "cuda:N"); prints the chosen device
    and its free memory. A bad value or a GPU this machine lacks is a `UserError`."""
    from robotrl.policies.device import select_device

    gpu = None
    if fleet is not None and role is not None and requested == "auto":
        from robotrl.fleet import load_fleet

        gpu = load_fleet(fleet).local_gpu(role)
    choice = select_device(requested, gpu)
    print(choice.line(role), flush=True)
    return choice.device


SCENARIO_HELP = "sim: nominal or shifted physics, or camera_lag (frames a tick old) (default: %(default)s)"
"""`--scenario`'s help, for every command that runs the simulated arm."""


def add_noise_argument(parser: Any) -> None:
    """`--noise-scale S`: a flow-matching policy's initial noise, scaled."""
    parser.add_argument(
        "--noise-scale",
        type=float,
        default=1.0,
        metavar="S",
        help="scale of a flow-matching policy's initial noise: 1 samples the learned distribution, 0 gives its "
        "deterministic central chunk, the same from one request to the next (default: 1)",
    )


def noise_option(value: float) -> float:
    """`--noise-scale` checked: one line for a negative scale."""
    from robotrl.core.errors import UserError

    if not value >= 0:
        raise UserError(f"--noise-scale must be >= 0, got {value}")
    return value


def add_delay_argument(parser: Any) -> None:
    """`--delay-ticks D|LOW-HIGH`: the served policy's replies held to D control ticks."""
    parser.add_argument(
        "--delay-ticks",
        metavar="D|LOW-HIGH",
        help="hold each reply until D control ticks (at the policy's rate) after its request, or D drawn from "
        "LOW..HIGH per model call: the arm runs as under a slower model or a farther GPU, on the deploy path "
        "itself (default: the model's own time)",
    )


def delay_option(text: str | None) -> DelaySpec | None:
    """`--delay-ticks` as a `DelaySpec` (None when not given); a bad value is one line."""
    from robotrl.core.errors import UserError
    from robotrl.inference.delayed import DelaySpec

    if text is None:
        return None
    try:
        return DelaySpec.parse(text)
    except ValueError as exc:
        raise UserError(f"--delay-ticks {text!r}: give ticks like 8 or 6-10 ({exc})") from None
