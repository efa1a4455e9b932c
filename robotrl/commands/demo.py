"""`robotrl demo`: the README's main job on the embedded default (MuJoCo SO-101 arm,
no hardware, no network). Stage 1: scripted-expert rollouts of every task."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("outputs/demo"),
                        help="folder for the demo's files (default: outputs/demo)")
    parser.add_argument("--episodes", type=int, default=4, help="expert episodes per task (default: 4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode")


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from robotrl.hardware.robot import CameraSpec
    from robotrl.report.table import format_table
    from robotrl.sim.env import TaskEnv
    from robotrl.sim.rollout import expert_policy, run_episode, wilson_interval
    from robotrl.sim.tasks import TASKS
    from robotrl.sim.video import FrameSink

    args.out.mkdir(parents=True, exist_ok=True)
    print("stage 1/1: scripted expert rollouts on the simulated SO-101 (SafeRobot, MuJoCo)")
    rows = []
    for task in TASKS:
        env = TaskEnv(task, cameras=(CameraSpec("front"), CameraSpec("wrist")))
        sink = FrameSink(None, args.out, fps=env.sim.spec.control_rate_hz)
        results = []
        try:
            for i in tqdm(range(args.episodes), desc=f"{task:>10}", unit="ep"):
                results.append(run_episode(env, expert_policy, args.seed + i, sink.add))
                sink.end_episode(f"{task}_seed{args.seed + i}")
        finally:
            env.close()
        wins = sum(r.success for r in results)
        lo, hi = wilson_interval(wins, len(results))
        rows.append((task, f"{wins}/{len(results)}", f"{lo:.2f}-{hi:.2f}",
                     sum(r.ticks for r in results) / len(results),
                     sum(r.safety_clamps for r in results)))
    print(format_table(("task", "success", "95% CI", "mean ticks", "safety clamps"), rows))
    print(f"last frames of each episode: {args.out}/")
    return 0
