"""`robotrl` command line.

Subcommands live in `robotrl/commands/<name>.py` (`-` in a name is `_` there), each with
`add_arguments(parser)` and `run(args) -> int`; they are imported only when chosen, so
`robotrl --help` stays fast.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import logging
import sys
from types import ModuleType

from robotrl.core.errors import USER_ERRORS

COMMANDS: dict[str, str] = {
    "devices": "list serial motor buses, cameras, simulated robots, GPUs and CPUs; validate a fleet file",
    "sim": "run a simulated task with a policy (expert or random), optionally saving video/PNG",
    "record": "teleoperate an arm (simulated or real) into a LeRobot dataset",
    "serve": "run the asynchronous inference server for a policy checkpoint",
    "deploy": "run a policy on an arm (sim or real) through the inference server",
    "actor": "the robot side of online learning: deploy, stream transitions to a learner, let a human take over",
    "learn": "a whole online-learning run here: learner + server taking its weights + simulated actors",
    "up": "start and supervise every role of a fleet file here (server, learner, an actor or deploy client per arm)",
    "learner": "the online learner process: pull transitions, update (sac, hil-flow, dsrl), publish weights",
    "demo": "the end-to-end demo on the embedded default (MuJoCo SO-101, no hardware)",
    "bench": "benchmarks, each with its own options: sim, record, transport, serve, policy, buffer, learner, "
    "latency, sim2sim, hostile (`robotrl bench NAME --help`)",
    "train": "train a fast/slow flow-matching chunk policy on a LeRobot dataset",
    "health": "ask a running inference server how it is (threads, errors, queue, batches/s, learner)",
    "twin": "the MuJoCo SO-101 behind simulated Feetech buses (follower + expert-driven leader) and cameras, "
    "for the real-arm commands",
    "calibrate-cameras": "fit the camera calibration file (lenses, the gripper camera's place on the hand, the "
    "fixed cameras' on the table) from a recording of a chessboard",
    "keys": "write a CURVE keypair (server or client) for encrypted, allow-listed transport",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="robotrl",
        description="robotrl: asynchronous learning stack for robot arms. "
        "Run `robotrl COMMAND --help` for a command's options.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, help_text in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def command_module(name: str) -> ModuleType:
    """The module of command `name` (`add_arguments`, `run`)."""
    return importlib.import_module(f"robotrl.commands.{name.replace('-', '_')}")


def report_crashes() -> None:
    """A crash in native code (MuJoCo, its renderer, a driver) prints every thread's Python
    stack to stderr before the process dies (`faulthandler`), so a segfault leaves a trace:
    a twin that died of one mid-run had left none (docs/results.md section 46)."""
    if not faulthandler.is_enabled() and sys.__stderr__ is not None:
        faulthandler.enable(file=sys.__stderr__, all_threads=True)


def main(argv: list[str] | None = None) -> int:
    report_crashes()
    argv = sys.argv[1:] if argv is None else argv
    top = build_parser()
    known, rest = top.parse_known_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if known.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("OpenGL", "lerobot"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    module = command_module(known.command)
    parser = argparse.ArgumentParser(prog=f"robotrl {known.command}", description=COMMANDS[known.command])
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    try:
        return int(module.run(args) or 0)
    except USER_ERRORS as exc:
        print(f"robotrl {known.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
