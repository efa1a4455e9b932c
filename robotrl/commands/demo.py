"""`robotrl demo`: the README's main job on the embedded default (MuJoCo SO-101 arm,
no hardware, no network). Each stage builds on the one before:

1. scripted-expert rollouts of every task through the full safety layer;
2. recording an expert dataset (LeRobotDataset v3) of `pick_place`.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("outputs/demo"),
                        help="folder for the demo's files, replaced on every run (default: outputs/demo)")
    parser.add_argument("--episodes", type=int, default=4, help="stage 1: expert episodes per task (default: 4)")
    parser.add_argument("--record-episodes", type=int, default=10,
                        help="stage 2: pick_place episodes recorded into the dataset (default: 10)")
    parser.add_argument("--image-size", type=int, default=96, help="stage 2: camera size in pixels (default: 96)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode")


def run(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    stage_rollouts(args)
    stage_record(args)
    return 0


def stage_rollouts(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from robotrl.hardware.robot import CameraSpec
    from robotrl.report.table import format_table
    from robotrl.sim.env import TaskEnv
    from robotrl.sim.rollout import expert_policy, run_episode, wilson_interval
    from robotrl.sim.tasks import TASKS
    from robotrl.sim.video import FrameSink

    print("stage 1/2: scripted expert rollouts on the simulated SO-101 (SafeRobot, MuJoCo)")
    frames_dir = args.out / "frames"
    rows = []
    for task in TASKS:
        env = TaskEnv(task, cameras=(CameraSpec("front"), CameraSpec("wrist")))
        sink = FrameSink(None, frames_dir, fps=env.spec.control_rate_hz)
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
                     sum(r.ticks for r in results) / len(results), sum(r.safety_clamps for r in results)))
    print(format_table(("task", "success", "95% CI", "mean ticks", "safety clamps"), rows))
    print(f"last camera frame of each episode: {frames_dir}/")


def stage_record(args: argparse.Namespace) -> None:
    from robotrl.cli import main as cli_main

    print(f"\nstage 2/2: recording {args.record_episodes} expert pick_place episodes into a LeRobot dataset")
    root = args.out / "dataset"
    shutil.rmtree(root, ignore_errors=True)
    rc = cli_main(["record", "--robot", "sim", "--task", "pick_place", "--teleop", "expert",
                   "--episodes", str(args.record_episodes), "--root", str(root),
                   "--image-size", str(args.image_size), "--seed", str(args.seed)])
    if rc != 0:
        raise SystemExit(rc)
    print(f"dataset: {root} (load it with lerobot's LeRobotDataset('local/dataset', root='{root}'))")
