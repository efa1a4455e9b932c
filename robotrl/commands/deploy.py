"""`robotrl deploy`: run a policy on an arm through the asynchronous inference server."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
from pathlib import Path

from robotrl.errors import UserError

MODES = ("sync", "naive", "vlash", "vlash+rtc")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--robot", default="sim", help="sim (MuJoCo SO-101), so101 or so100 (real arm through lerobot)")
    parser.add_argument("--task", default="reach", help="sim: task name (reach, pick_place); real arm: the instruction")
    parser.add_argument("--policy", type=Path, help="checkpoint to serve locally (needed without --server)")
    parser.add_argument("--server", help="endpoint of a running `robotrl serve`, e.g. tcp://gpu-box:5555; "
                                         "without it a local server process is started on loopback")
    parser.add_argument("--mode", default="vlash", help=f"execution mode: {', '.join(MODES)} (default: vlash)")
    parser.add_argument("--episodes", type=int, default=3, help="episodes to run (default: 3)")
    parser.add_argument("--seed", type=int, default=0, help="sim: seed of the first episode")
    parser.add_argument("--scenario", default="shifted", help="sim: nominal or shifted physics (default: shifted)")
    parser.add_argument("--max-seconds", type=float, default=20.0, help="longest episode in seconds")
    parser.add_argument("--curve-keys", type=Path,
                        help="folder with this robot's client.key_secret and the server's server.key (CURVE)")
    parser.add_argument("--port", help="real arm: serial port of the follower")
    parser.add_argument("--robot-id", default="follower", help="real arm: lerobot calibration id")


def run(args: argparse.Namespace) -> int:
    from robotrl.inference.deploy import delay_summary, deploy_episode, print_status
    from robotrl.report.table import format_table
    from robotrl.wire.client import ClientSocket

    if args.mode not in MODES:
        raise UserError(f"unknown mode {args.mode!r}; choose from {', '.join(MODES)}")
    if args.robot != "sim":
        if args.robot not in ("so101", "so100"):
            raise UserError(f"unknown robot {args.robot!r}; choose sim, so101 or so100")
        if not args.port:
            raise UserError(f"--robot {args.robot} needs --port (see `robotrl devices`)")
    server_proc, endpoint = _server(args)
    client = ClientSocket(endpoint, robot_id=f"{args.robot}-{args.robot_id}", curve=_curve(args.curve_keys))
    try:
        info = _connect(client, server_proc)
        if info.get("env_state_dim") and args.robot != "sim":
            raise UserError("this policy reads privileged simulation state (trained with --env-state); "
                            "it cannot drive a real arm")
        session = _session(args, info)
        rows, episodes = [], []
        try:
            for i in range(args.episodes):
                print(f"episode {i + 1}/{args.episodes}: {args.mode} on {endpoint}")
                ep = deploy_episode(session, client, info, seed=args.seed + i, mode=args.mode,
                                    max_ticks=int(args.max_seconds * session.spec.control_rate_hz),
                                    status=print_status)
                print()
                episodes.append(ep)
                rows.append((ep.seed, "yes" if ep.success else "no", ep.ticks, ep.missed_ticks, ep.pauses,
                             ep.step_clamps, ",".join(map(str, ep.versions))))
        finally:
            session.close()
    finally:
        client.close()
        if server_proc is not None:
            server_proc.terminate()
            server_proc.wait(timeout=10)
    print(format_table(("seed", "success", "ticks", "missed ticks", "pauses", "step clamps", "versions"), rows))
    delays = delay_summary(episodes)
    if delays:
        print(f"inference delay (ticks): p50 {delays['p50']:g}  p95 {delays['p95']:g}  max {delays['max']:g}")
    return 0


def _connect(client, server_proc: subprocess.Popen | None) -> dict:
    """Wait for the server's hello; a local server gets 2 minutes to load its policy,
    and its death ends the wait at once."""
    from robotrl.wire.errors import TransportTimeout

    if server_proc is None:
        return client.connect(timeout_s=10.0)
    for _ in range(120):
        if server_proc.poll() is not None:
            raise UserError(f"the local inference server exited (code {server_proc.returncode}); "
                            "run `robotrl serve --policy ...` on its own to see why")
        try:
            return client.connect(timeout_s=1.0)
        except TransportTimeout:
            continue
    raise UserError("the local inference server did not answer within 2 minutes")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server(args: argparse.Namespace) -> tuple[subprocess.Popen | None, str]:
    """The endpoint to use, starting a local `robotrl serve` when none is given."""
    if args.server:
        return None, args.server
    if args.policy is None:
        raise UserError("give --policy CKPT (a local server is started) or --server ENDPOINT")
    if not args.policy.exists():
        raise UserError(f"policy checkpoint {args.policy} does not exist")
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    proc = subprocess.Popen([sys.executable, "-m", "robotrl.cli", "serve", "--policy", str(args.policy),
                             "--bind", endpoint], stdout=subprocess.DEVNULL)
    return proc, endpoint


def _session(args: argparse.Namespace, info: dict):
    from robotrl.clock import WallClock

    if args.robot == "sim":
        from robotrl.hardware.robot import CameraSpec
        from robotrl.sim.env import TaskEnv

        size = int(info.get("image_size_px") or 0)
        cameras = tuple(CameraSpec(name, size, size) for name in info.get("cameras", ()))
        return TaskEnv(args.task, args.scenario, cameras=cameras, clock=WallClock())
    from robotrl.hardware.lerobot_arm.robot import LerobotArm
    from robotrl.hardware.safety import SafeRobot
    from robotrl.record.session import RobotSession

    clock = WallClock()
    robot = SafeRobot(LerobotArm(args.robot, port=args.port, robot_id=args.robot_id), clock=clock)
    robot.connect(watchdog_thread=True)
    return RobotSession(robot, args.task, clock)


def _curve(folder: Path | None):
    if folder is None:
        return None
    from robotrl.wire.keys import ClientKeys

    return ClientKeys(secret_file=folder / "client.key_secret", server_public_file=folder / "server.key")
