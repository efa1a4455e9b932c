"""`robotrl deploy`: run a policy on an arm (simulated or real) through the asynchronous
inference server; a table of the episodes. Online learning is `robotrl actor` (the robot
side) and `robotrl learn` (a whole run on this machine)."""

from __future__ import annotations

import argparse

from robotrl.commands.arm_options import (
    add_arm_arguments,
    add_server_arguments,
    arm_config,
    executor_config,
    server_endpoint,
)
from robotrl.commands.flags import add_delay_argument, add_noise_argument, delay_option, noise_option
from robotrl.core.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_arm_arguments(parser)
    add_server_arguments(parser)
    parser.add_argument(
        "--in-flight",
        type=int,
        default=1,
        help="naive and vlash modes: requests in flight at once (one more per tick): the arm reacts within the "
        "inference delay, for N times the model calls; the local server runs N model workers (a remote "
        "`robotrl serve` needs --workers N) (default: 1)",
    )
    add_delay_argument(parser)
    add_noise_argument(parser)


def run(args: argparse.Namespace) -> int:
    from robotrl.learn.launch import stop

    if args.episodes < 1 or args.max_seconds <= 0:
        raise UserError("--episodes must be >= 1 and --max-seconds > 0")
    if args.in_flight < 1:
        raise UserError(f"--in-flight must be >= 1, got {args.in_flight}")
    arm, executor = arm_config(args), executor_config(args, args.in_flight)  # bad options fail before a server starts
    delay, noise = delay_option(args.delay_ticks), noise_option(args.noise_scale)
    endpoint, server = server_endpoint(args, model_workers=args.in_flight, delay=delay, noise_scale=noise)
    try:
        episodes = _episodes(args, arm, executor, endpoint)
    finally:
        stop(server, timeout_s=10.0)
    _report(episodes, judged=arm.robot == "sim")
    return 0


def _episodes(args: argparse.Namespace, arm, config, endpoint: str) -> list:
    from robotrl.inference.arm import open_arm
    from robotrl.inference.remote import remote_executor
    from robotrl.inference.runner import EpisodeRunner, StatusLine
    from robotrl.learn.launch import curve_keys
    from robotrl.wire.client import CONNECT_TIMEOUT_S, ClientSocket

    with ClientSocket(endpoint, robot_id=arm.name, curve=curve_keys(args.curve_keys)) as client:
        info = client.connect(timeout_s=CONNECT_TIMEOUT_S)
        opened = open_arm(arm, info)
        try:
            executor = remote_executor(opened.robot, client, info, config, robot_id=arm.name)
            runner = EpisodeRunner(opened.robot, opened.task, executor, opened.clock, observers=[StatusLine(executor)])
            max_ticks = int(args.max_seconds * opened.robot.spec.control_rate_hz)
            episodes = []
            for i in range(args.episodes):
                print(f"episode {i + 1}/{args.episodes}: {config.mode} on {endpoint}")
                episodes.append(runner.run(args.seed + i, max_ticks))
            return episodes
        finally:
            opened.close()


def _report(episodes: list, judged: bool) -> None:
    """The per-episode table and the arm's timing. `judged`: the task scored each episode
    (the simulated arm); a real arm has no judge, so its success column says "-"."""
    import numpy as np

    from robotrl.inference.runner import latency_summary
    from robotrl.report.table import format_table

    rows = [
        (
            e.seed,
            ("yes" if e.success else "no") if judged else "-",
            e.ticks,
            e.missed_ticks,
            e.pauses,
            e.step_clamps,
            ",".join(map(str, e.versions)),
        )
        for e in episodes
    ]
    print(format_table(("seed", "success", "ticks", "missed ticks", "pauses", "step clamps", "versions"), rows))
    if not judged:
        print("success: a real arm has no judge (a twin logs each scene's outcome)")
    read_ms = np.concatenate([e.read_ms for e in episodes])
    if len(read_ms):
        p50, p99 = np.percentile(read_ms, [50, 99])
        print(f"arm read (motors and cameras, ms): p50 {p50:.1f}  p99 {p99:.1f}")
    ages_ms = np.concatenate([e.frame_ages_ms for e in episodes])
    if len(ages_ms):  # the image is older than the joints by this much, on top of the inference delay
        p50, p95 = np.percentile(ages_ms, [50, 95])
        print(f"camera frame age (ms): p50 {p50:.1f}  p95 {p95:.1f}  max {ages_ms.max():.1f}")
    for name, q in latency_summary(episodes).items():  # row age: d .. 2d - 1 with one request in flight
        print(f"{name} (ticks): p50 {q['p50']:g}  p95 {q['p95']:g}  max {q['max']:g}")
