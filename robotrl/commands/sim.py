"""`robotrl sim`: run a simulated task with a policy, optionally saving video and PNGs."""

from __future__ import annotations

import argparse
from pathlib import Path

from robotrl.core.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", default="reach", help="task: reach, pick_place, track or calibrate (default: reach)")
    parser.add_argument("--policy", default="expert", help="expert (scripted, IK-based) or random")
    parser.add_argument("--episodes", type=int, default=5, help="number of episodes (default: 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode; episode i uses seed+i")
    parser.add_argument("--scenario", default="nominal", help="nominal (A) or shifted (B) physics")
    parser.add_argument("--arm", default="so101", help="simulated arm model (so101, so100)")
    parser.add_argument(
        "--realtime",
        action="store_true",
        help="pace on the wall clock at 30 Hz instead of stepping as fast as possible",
    )
    parser.add_argument("--video", type=Path, help="write an MP4 of the front and wrist cameras to this path")
    parser.add_argument("--png", type=Path, help="write the last frame of each episode as PNG into this folder")
    parser.add_argument("--image-size", type=int, default=224, help="camera height and width in pixels (default: 224)")


def run(args: argparse.Namespace) -> int:
    from robotrl.core.clock import WallClock
    from robotrl.core.robot import CameraSpec
    from robotrl.sim.env import TaskEnv
    from robotrl.sim.rollout import POLICIES
    from robotrl.sim.video import FrameSink

    if args.policy not in POLICIES:
        raise UserError(f"unknown policy {args.policy!r}; choose from {', '.join(POLICIES)}")
    if args.episodes < 1:
        raise UserError("--episodes must be at least 1")
    want_images = args.video is not None or args.png is not None
    size = args.image_size
    cameras = (CameraSpec("front", size, size), CameraSpec("wrist", size, size)) if want_images else ()
    env = TaskEnv(args.task, args.scenario, arm=args.arm, cameras=cameras, clock=WallClock() if args.realtime else None)
    sink = FrameSink(args.video, args.png, fps=env.sim.spec.control_rate_hz, prefix=args.task) if want_images else None
    try:
        rows = _episodes(args, env, [sink] if sink else [])
    finally:
        env.close()
        if sink:
            sink.close()
    _report(rows)
    if sink:
        print(sink.summary())
    return 0


def _episodes(args: argparse.Namespace, env, observers: list) -> list[tuple]:
    from robotrl.inference.stepped import run_closed_loop
    from robotrl.sim.rollout import POLICIES

    rows = []
    for seed in range(args.seed, args.seed + args.episodes):
        r = run_closed_loop(env, POLICIES[args.policy], seed, observers)
        rows.append(
            (seed, env.instruction, "yes" if r.success else "no", round(r.episode_return, 2), r.ticks, r.safety_clamps)
        )
    return rows


def _report(rows: list[tuple]) -> None:
    from robotrl.report.table import format_table
    from robotrl.sim.rollout import wilson_interval

    print(format_table(("seed", "instruction", "success", "return", "ticks", "clamps"), rows))
    wins = sum(r[2] == "yes" for r in rows)
    lo, hi = wilson_interval(wins, len(rows))
    print(f"success {wins}/{len(rows)} (95% CI {lo:.2f}-{hi:.2f})")
