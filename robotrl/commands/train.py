"""`robotrl train`: train a fast/slow flow-matching policy on a local LeRobotDataset."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from robotrl.core.config import field_default
from robotrl.core.errors import UserError
from robotrl.policies.fastslow.config import ACTION_MODES, FastSlowConfig
from robotrl.train.trainer import TrainConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", type=Path, required=True, help="local LeRobotDataset folder")
    parser.add_argument("--out", type=Path, required=True, help="checkpoint folder to write (and resume from)")
    parser.add_argument(
        "--steps", type=int, default=field_default(TrainConfig, "steps"), help="optimizer steps (default: %(default)s)"
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=field_default(TrainConfig, "batch_size"),
        help="examples per step (default: %(default)s)",
    )
    parser.add_argument(
        "--lr", type=float, default=field_default(TrainConfig, "lr"), help="peak learning rate (default: %(default)s)"
    )
    parser.add_argument(
        "--k-max",
        type=int,
        default=field_default(TrainConfig, "k_max"),
        help="VLASH offset augmentation: state/chunk k ~ U{0..K} ticks after the image (default: %(default)s)",
    )
    parser.add_argument(
        "--k-zero-prob",
        type=float,
        default=field_default(TrainConfig, "k_zero_prob"),
        help="probability of offset k = 0 on top of the uniform draw; keeps delay-0 success "
        "(measured on reach: 84%% with 0, 98%% with 0.5, 98%% without offsets) (default: %(default)s)",
    )
    parser.add_argument(
        "--latent-delay-max",
        type=int,
        default=field_default(TrainConfig, "latent_delay_max"),
        help="delayed-latent augmentation: slow latent from a frame j ~ U{0..J} ticks older (default: %(default)s)",
    )
    parser.add_argument(
        "--rtc-train", action="store_true", help="training-time RTC: clean prefix of random length, loss on the postfix"
    )
    parser.add_argument(
        "--env-state",
        action="store_true",
        help="give the fast pathway the privileged observation.environment_state (sim datasets)",
    )
    parser.add_argument(
        "--env-objects",
        type=int,
        default=0,
        metavar="D",
        help="with --env-state: read it as objects of D numbers (pick_place: 3 = xyz per cube "
        "and bin) that the instruction attends over (default: 0 = off)",
    )
    parser.add_argument(
        "--relative-objects",
        action="store_true",
        help="with --env-objects and --ee-features: every object slot also gets its offset from "
        "the gripper (decimetres)",
    )
    parser.add_argument(
        "--ee-features",
        metavar="ARM",
        default="",
        help="give the fast pathway end-effector features of the state from ARM's forward "
        "kinematics (e.g. so101; default: off)",
    )
    _add_policy_arguments(parser)
    _add_run_arguments(parser)


def _add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """The policy's shape and inputs (`FastSlowConfig`)."""
    parser.add_argument(
        "--horizon",
        type=int,
        default=field_default(FastSlowConfig, "horizon"),
        help="H, rows per chunk (default: %(default)s)",
    )
    parser.add_argument(
        "--execute-steps",
        type=int,
        default=field_default(FastSlowConfig, "execute_steps"),
        help="s, rows executed per chunk in evaluation and bench, and RTC's s (default: %(default)s)",
    )
    parser.add_argument(
        "--image-size",
        type=int,
        default=field_default(FastSlowConfig, "image_size_px"),
        help="training image size in pixels (default: %(default)s)",
    )
    parser.add_argument("--cameras", default="front,wrist", help="comma-separated cameras (default: front,wrist)")
    parser.add_argument(
        "--action-mode",
        choices=ACTION_MODES,
        default=field_default(FastSlowConfig, "action_mode"),
        help="expert output parameterisation, normalised (default: delta = rows minus the state; "
        "ee_delta / ee_absolute = gripper positions (minus the state's), IK back to joints, "
        "needs --ee-features)",
    )
    parser.add_argument(
        "--action-key",
        default=field_default(TrainConfig, "action_key"),
        choices=("action", "action.teleop"),
        help="targets: executed actions, or the teleop's (clean labels of a `record --perturb` "
        "dataset) (default: %(default)s)",
    )


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Augmentation, seed, threads, checkpoints, evaluation, budget (`TrainConfig`)."""
    parser.add_argument(
        "--shift-px",
        type=int,
        default=field_default(TrainConfig, "shift_px"),
        help="random image shift augmentation in pixels (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=field_default(TrainConfig, "seed"), help="training seed (default: %(default)s)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=field_default(TrainConfig, "threads"),
        help="torch CPU threads, at most 2; use 2 only on an otherwise idle machine (default: %(default)s)",
    )
    parser.add_argument(
        "--save-every",
        type=int,
        default=field_default(TrainConfig, "save_every"),
        help="checkpoint period in steps (default: %(default)s)",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        default=field_default(TrainConfig, "eval_every"),
        help="evaluation period in steps (default: %(default)s)",
    )
    parser.add_argument(
        "--eval-episodes",
        type=int,
        default=field_default(TrainConfig, "eval_episodes"),
        help="simulated episodes per evaluation (default: %(default)s)",
    )
    parser.add_argument("--task", choices=("reach", "pick_place"), help="simulated task for evaluation")
    parser.add_argument("--minutes", type=float, help="wall-time budget; stops and saves when reached")
    parser.add_argument("--resume", action="store_true", help="continue the run saved in --out")


def run(args: argparse.Namespace) -> int:
    from robotrl.report.table import format_table
    from robotrl.train.trainer import TrainConfig, train

    if args.eval_episodes and not args.task:
        raise UserError("--eval-episodes needs --task reach|pick_place")
    policy = {
        "horizon": args.horizon,
        "execute_steps": args.execute_steps,
        "image_size_px": args.image_size,
        "cameras": tuple(c for c in args.cameras.split(",") if c),
        "use_env_state": args.env_state,
        "env_object_dim": args.env_objects,
        "relative_objects": args.relative_objects,
        "action_mode": args.action_mode,
        "ee_features_arm": args.ee_features,
    }
    cfg = TrainConfig(
        dataset=args.dataset,
        out=args.out,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        action_key=args.action_key,
        k_max=args.k_max,
        k_zero_prob=args.k_zero_prob,
        latent_delay_max=args.latent_delay_max,
        rtc_train=args.rtc_train,
        shift_px=args.shift_px,
        seed=args.seed,
        threads=args.threads,
        save_every=args.save_every,
        eval_every=args.eval_every,
        eval_episodes=args.eval_episodes,
        task=args.task,
        time_budget_s=args.minutes * 60 if args.minutes else None,
        policy=policy,
    )
    result = train(cfg, resume=args.resume)
    rows = [
        ("checkpoint", str(args.out)),
        ("steps", result.steps),
        ("train wall time (s)", round(result.wall_s, 1)),
        ("parameters", f"{result.num_parameters:,}"),
        ("loss first / last", f"{result.losses[0][1]:.4f} / {result.losses[-1][1]:.4f}" if result.losses else "-"),
    ]
    for e in result.evals:
        rows.append(
            (f"eval @ step {e['step']}", f"{e['success_rate']:.0%} [{e['wilson95_low']:.0%}, {e['wilson95_high']:.0%}]")
        )
    print(format_table(("metric", "value"), rows))
    (args.out / "train_summary.json").write_text(
        json.dumps(
            {
                "steps": result.steps,
                "wall_s": result.wall_s,
                "parameters": result.num_parameters,
                "evals": result.evals,
            },
            indent=2,
        )
    )
    return 0
