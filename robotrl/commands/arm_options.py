"""Options `robotrl deploy`, `robotrl actor` and `robotrl learn` share: the arm, the
executor and the server, turned into their frozen configs."""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

from robotrl.commands.flags import SCENARIO_HELP, add_fleet_arguments, apply_fleet
from robotrl.core.config import field_default
from robotrl.core.errors import UserError
from robotrl.inference.arm import ArmConfig
from robotrl.inference.delayed import DelaySpec
from robotrl.inference.executor import MODES, ExecutorConfig
from robotrl.learn.actor import ActorJob

CAMERAS_HELP = (
    "real arm: its cameras as lerobot's --robot.cameras map, e.g. "
    '"{front: {type: opencv, index_or_path: 0, width: 640, height: 480, fps: 30}}" '
    "(the names the policy was trained with)"
)


def add_arm_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--robot",
        default=field_default(ArmConfig, "robot"),
        help="sim (MuJoCo SO-101), so101 or so100 (real arm through lerobot)",
    )
    parser.add_argument(
        "--task",
        default=field_default(ArmConfig, "task"),
        help="sim: task name (reach, pick_place, track; default: reach); real arm: the instruction "
        "(default: the policy's, when it was trained on one)",
    )
    parser.add_argument(
        "--scenario",
        default=field_default(ArmConfig, "scenario"),
        help=SCENARIO_HELP,
    )
    _add_real_arm_arguments(parser)
    add_fleet_arguments(parser)
    parser.add_argument(
        "--mode",
        default=field_default(ExecutorConfig, "mode"),
        help=f"execution mode: {', '.join(MODES)} (default: %(default)s)",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        help="async modes request the next chunk at queued rows / H <= threshold, lerobot's chunk_size_threshold "
        "(default: the policy's, 1 - s/H for one trained to run s rows per request, else 0.5)",
    )
    parser.add_argument(
        "--episodes",
        type=int,
        default=field_default(ActorJob, "episodes"),
        help="episodes to run (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=field_default(ActorJob, "seed"), help="sim: seed of the first episode"
    )
    parser.add_argument(
        "--max-seconds", type=float, default=field_default(ActorJob, "max_seconds"), help="longest episode in seconds"
    )


def _add_real_arm_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", help="real arm: serial port of the follower")
    parser.add_argument("--cameras", default=field_default(ArmConfig, "cameras"), help=CAMERAS_HELP)
    parser.add_argument(
        "--robot-id",
        default=field_default(ArmConfig, "robot_id"),
        help="real arm: lerobot calibration id; also this robot's name for the server and learner",
    )
    parser.add_argument(
        "--twin",
        metavar="INFO",
        help="an so101 on a running `robotrl twin --info INFO`: its port, cameras and calibration from that "
        "file (instead of --port and --cameras), a new scene each episode",
    )
    parser.add_argument(
        "--reset-time-s",
        type=float,
        default=field_default(ArmConfig, "reset_time_s"),
        help="real arm: seconds it holds still before each episode, after the move to the policy's start pose, "
        "while you reset the scene (default: %(default)s)",
    )


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", type=Path, help="checkpoint to serve locally (needed without --server)")
    parser.add_argument(
        "--server",
        help="endpoint of a running `robotrl serve`, e.g. tcp://gpu-box:5555; "
        "without it a local server process is started on loopback",
    )
    parser.add_argument(
        "--curve-keys", type=Path, help="folder with this robot's client.key_secret and the server's server.key (CURVE)"
    )


def arm_config(args: argparse.Namespace) -> ArmConfig:
    apply_fleet(args)
    return ArmConfig(
        args.robot, args.task, args.scenario, args.port, args.robot_id, args.cameras, args.twin, args.reset_time_s
    )


def executor_config(args: argparse.Namespace, max_in_flight: int = 1) -> ExecutorConfig:
    try:
        return ExecutorConfig(args.mode, args.threshold, max_in_flight=max_in_flight)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def server_endpoint(
    args: argparse.Namespace, model_workers: int = 1, delay: DelaySpec | None = None, noise_scale: float = 1.0
) -> tuple[str, subprocess.Popen | None]:
    """--server, or a local `robotrl serve --policy` with `model_workers` (its replies held
    to `delay`, `--delay-ticks`; sampling with `noise_scale`, `--noise-scale`) started (and
    answering) now."""
    from robotrl.learn.launch import start_local_server, wait_for_server

    if args.server:
        if delay is not None or noise_scale != 1.0:
            raise UserError(
                "--delay-ticks and --noise-scale set a local server: give them to the `robotrl serve` at --server"
            )
        return args.server, None
    if args.policy is None:
        raise UserError("give --policy CKPT (a local server is started) or --server ENDPOINT")
    with tempfile.TemporaryDirectory(prefix="robotrl-serve-") as folder:  # read by the server at its start
        proc, endpoint = start_local_server(args.policy, Path(folder), model_workers, delay, noise_scale)
        try:
            wait_for_server(endpoint, proc)
        except BaseException:
            proc.terminate()
            raise
    return endpoint, proc
