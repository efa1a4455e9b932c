"""`robotrl demo`: the README's main job on the embedded default (MuJoCo SO-101 arm,
no hardware, no network). Each stage builds on the one before:

1. scripted-expert rollouts of every task through the full safety layer;
2. recording an expert dataset (LeRobotDataset v3) of the `reach` task;
3. training a fast/slow flow-matching chunk policy on it (a few CPU minutes; the fast
   pathway also reads the privileged target position, since a 64 px ball is hard to
   learn from pixels in minutes);
4. deploying that policy asynchronously (local inference server, VLASH execution) to the
   shifted-physics scenario at 30 Hz on the wall clock;
5. a short latency benchmark on the dynamic task `track` (stepped, injected delay): sync
   vs naive async vs VLASH following a moving ball, with report.md and plots;
6. online fine-tuning of a weak policy in the shifted scenario (`robotrl learn`: learner,
   server taking its weights, simulated arm streaming transitions, scripted expert
   intervening with a tapering budget), with the success and intervention curve and the
   policy's unassisted success before and after.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from robotrl.core.errors import UserError

STAGES = 6


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("outputs/demo"),
        help="folder for the demo's files, replaced on every run (default: outputs/demo)",
    )
    parser.add_argument("--episodes", type=int, default=4, help="stage 1: expert episodes per task (default: 4)")
    parser.add_argument(
        "--record-episodes",
        type=int,
        default=40,
        help="stage 2: reach episodes recorded into the dataset (default: 40)",
    )
    parser.add_argument("--image-size", type=int, default=64, help="stages 2-4: camera size in pixels (default: 64)")
    parser.add_argument("--train-minutes", type=float, default=4.0, help="stage 3: training time budget (default: 4)")
    parser.add_argument("--deploy-episodes", type=int, default=5, help="stage 4: deployed episodes (default: 5)")
    parser.add_argument(
        "--latency-episodes",
        type=int,
        default=10,
        help="stage 5: episodes per mode and delay in the latency benchmark (default: 10)",
    )
    parser.add_argument(
        "--online-episodes", type=int, default=40, help="stage 6: episodes of online fine-tuning (default: 40)"
    )
    parser.add_argument(
        "--eval-episodes",
        type=int,
        default=10,
        help="stages 3 and 6: evaluation episodes of each policy measured (default: 10)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode")


def run(args: argparse.Namespace) -> int:
    counts = ("episodes", "record_episodes", "deploy_episodes", "latency_episodes", "online_episodes", "eval_episodes")
    for name in counts:
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.train_minutes <= 0:
        raise UserError(f"--train-minutes must be positive, got {args.train_minutes:g}")
    args.out.mkdir(parents=True, exist_ok=True)
    stage_rollouts(args)
    dataset = stage_record(args)
    policy = stage_train(args, dataset)
    stage_deploy(args, policy)
    stage_latency(args)
    stage_online(args, dataset)
    return 0


def _banner(stage: int, text: str) -> None:
    print(f"\n== stage {stage}/{STAGES}: {text}", flush=True)


def _cli(command: str, **flags: object) -> None:
    """`robotrl COMMAND --flag value ...` in this process; a flag set to True is a switch,
    `dataset_path=X` becomes `--dataset-path X`."""
    from robotrl.cli import main as cli_main

    argv = command.split()
    for name, value in flags.items():
        argv += [f"--{name.replace('_', '-')}"] + ([] if value is True else [str(value)])
    rc = cli_main(argv)
    if rc != 0:
        raise SystemExit(rc)


def stage_rollouts(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from robotrl.core.robot import CameraSpec
    from robotrl.inference.stepped import run_closed_loop
    from robotrl.report.table import format_table
    from robotrl.sim.env import TaskEnv
    from robotrl.sim.rollout import expert_policy, wilson_interval
    from robotrl.sim.video import FrameSink

    _banner(1, "scripted expert rollouts on the simulated SO-101 (SafeRobot, MuJoCo)")
    frames_dir = args.out / "frames"
    rows = []
    for task in ("reach", "pick_place", "track"):  # the manipulation tasks (not the camera calibration rehearsal)
        env = TaskEnv(task, cameras=(CameraSpec("front"), CameraSpec("wrist")))
        sink = FrameSink(None, frames_dir, fps=env.spec.control_rate_hz, prefix=task)
        results = []
        try:
            for i in tqdm(range(args.episodes), desc=f"{task:>10}", unit="ep"):
                results.append(run_closed_loop(env, expert_policy, args.seed + i, [sink]))
        finally:
            env.close()
        wins = sum(r.success for r in results)
        lo, hi = wilson_interval(wins, len(results))
        rows.append(
            (
                task,
                f"{wins}/{len(results)}",
                f"{lo:.2f}-{hi:.2f}",
                sum(r.ticks for r in results) / len(results),
                sum(r.safety_clamps for r in results),
            )
        )
    print(format_table(("task", "success", "95% CI", "mean ticks", "safety clamps"), rows))
    print(f"last camera frame of each episode: {frames_dir}/")


def stage_record(args: argparse.Namespace) -> Path:
    _banner(2, f"recording {args.record_episodes} expert reach episodes into a LeRobot dataset")
    root = args.out / "dataset"
    shutil.rmtree(root, ignore_errors=True)
    _cli(
        "record",
        robot="sim",
        task="reach",
        teleop="expert",
        episodes=args.record_episodes,
        root=root,
        image_size=args.image_size,
        seed=args.seed,
    )
    print(f"dataset: {root} (lerobot: LeRobotDataset('local/dataset', root='{root}'))")
    return root


def stage_train(args: argparse.Namespace, dataset: Path) -> Path:
    _banner(3, f"training the fast/slow flow-matching policy ({args.train_minutes:g} min budget, CPU)")
    out = args.out / "policy"
    shutil.rmtree(out, ignore_errors=True)
    _cli(
        "train",
        dataset=dataset,
        out=out,
        minutes=args.train_minutes,
        image_size=args.image_size,
        task="reach",
        eval_episodes=args.eval_episodes,
        env_state=True,
    )
    return out


def stage_deploy(args: argparse.Namespace, policy: Path) -> None:
    _banner(4, "asynchronous deploy (local inference server, VLASH) to the shifted scenario at 30 Hz")
    _cli(
        "deploy",
        robot="sim",
        task="reach",
        policy=policy,
        scenario="shifted",
        mode="vlash",
        episodes=args.deploy_episodes,
        seed=args.seed + 1000,
    )


LATENCY_DELAY = 4
"""Stage 5's injected delay in ticks (0.13 s at 30 Hz): the ball of `track` moves up to 2.7
cm meanwhile, more than the 2 cm the fingertip must stay within."""
LATENCY_HORIZON = 8
"""Stage 5's chunk length H (0.27 s), a reactive policy's: twice the delay, so naive async
keeps only the rows the delay left of each chunk (docs/algorithms.md section 1)."""


def stage_latency(args: argparse.Namespace) -> None:
    from robotrl.bench import latency
    from robotrl.bench.cells import BenchSetup
    from robotrl.inference.delayed import DelaySpec
    from robotrl.inference.evaluation import EVAL_SEED0

    _banner(
        5,
        f"following a moving ball despite slow inference (`track`): sync vs naive async vs VLASH at d = 0 "
        f"and {LATENCY_DELAY} ticks (the scripted expert's {LATENCY_HORIZON}-row chunks, stepped)",
    )
    out = args.out / "bench" / "latency"
    shutil.rmtree(out, ignore_errors=True)
    delays = [DelaySpec(0, 0), DelaySpec(LATENCY_DELAY, LATENCY_DELAY)]
    results = latency.run(
        BenchSetup(task="track", horizon=LATENCY_HORIZON),
        delays=delays,
        modes=["sync", "naive", "vlash"],
        episodes=args.latency_episodes,
        seed0=EVAL_SEED0,
        out_dir=out,
    )
    _latency_report(results["rows"])
    print(f"report and plots: {out}/ (report.md, *.png); `robotrl bench latency` measures every mode and delay")


def _latency_report(rows: list[dict]) -> None:
    """The table of stage 5 and what it shows, in a sentence."""
    from robotrl.bench.summary import find_row
    from robotrl.report.table import format_table

    def jump(r: dict) -> object:
        return "-" if r["disc_ratio_requested"] is None else round(r["disc_ratio_requested"], 2)

    columns = ("mode", "delay (ticks)", "success", "mean ticks", "boundary jump ratio", "safety clamps")
    cells = [
        (
            r["mode"],
            r["delay"],
            f"{r['successes']}/{r['episodes']}",
            round(r["mean_ticks"], 1),
            jump(r),
            r["step_clamps"],
        )
        for r in rows
    ]
    print(format_table(columns, cells))
    sync, naive, vlash = (find_row(rows, mode, str(LATENCY_DELAY)) for mode in ("sync", "naive", "vlash"))
    assert sync is not None and naive is not None and vlash is not None  # every mode ran at d
    print(
        f"with {LATENCY_DELAY / 30:.2f} s of inference: sync stops for every chunk and loses the ball "
        f"({sync['successes']}/{sync['episodes']}); naive async keeps moving but each new chunk starts where the "
        f"arm was when it was asked for, a {naive['disc_ratio_requested']:.1f}x jump that the safety layer clamped "
        f"{naive['step_clamps']} times ({naive['successes']}/{naive['episodes']}); VLASH plans each chunk from the "
        f"state the in-flight actions will reach: {vlash['disc_ratio_requested']:.1f}x, {vlash['step_clamps']} "
        f"clamps ({vlash['successes']}/{vlash['episodes']})"
    )


WEAK_TRAIN_STEPS = 150
"""Stage 6 starts from a policy trained this many steps (about 20 s): weak in the shifted
scenario, so what online learning adds shows; steps, not minutes, so every run starts
from the same policy."""


def stage_online(args: argparse.Namespace, dataset: Path) -> None:
    _banner(
        6,
        f"online fine-tuning of a weak policy ({WEAK_TRAIN_STEPS} training steps) in the shifted "
        "scenario: hil-flow learner, demos, scripted interventions tapering to 0 (stepped)",
    )
    weak, out = args.out / "policy_weak", args.out / "online"
    for folder in (weak, out):
        shutil.rmtree(folder, ignore_errors=True)
    _cli("train", dataset=dataset, out=weak, steps=WEAK_TRAIN_STEPS, image_size=args.image_size, env_state=True)
    before = _shifted_success(weak, args.eval_episodes)
    _cli(
        "learn",
        robot="sim",
        task="reach",
        policy=weak,
        scenario="shifted",
        algo="hil-flow",
        demo_dataset=dataset,
        out=out,
        episodes=args.online_episodes,
        seed=args.seed + 2000,
        stepped_delay="2",
        budget_ticks="40",
        taper_episodes=max(1, args.online_episodes // 2),
        min_transitions="200",
        publish_every="10",
        checkpoint_every="50",
    )
    after = _shifted_success(out / "learner" / "served", args.eval_episodes)
    print(
        f"unassisted success in the shifted scenario on {args.eval_episodes} evaluation seeds: {before} before "
        f"online learning, {after} after {args.online_episodes} episodes"
    )


def _shifted_success(policy: Path, episodes: int) -> str:
    from robotrl.inference.evaluation import evaluate
    from robotrl.policies.loading import load_policy

    result = evaluate(load_policy(policy), "reach", episodes, scenario="shifted", progress=False)
    return f"{result['successes']}/{episodes}"
