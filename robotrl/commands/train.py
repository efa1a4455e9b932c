"""`robotrl train`: train a fast/slow flow-matching policy on a local LeRobotDataset."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from robotrl.commands.flags import add_device_arguments, add_field, resolve_device
from robotrl.core.errors import UserError
from robotrl.policies.fastslow.config import ACTION_MODES, FastSlowConfig
from robotrl.record import features as F
from robotrl.sim.tasks import TASKS
from robotrl.train.trainer import TrainConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", type=Path, required=True, help="local LeRobotDataset folder")
    parser.add_argument("--out", type=Path, required=True, help="checkpoint folder to write (and resume from)")
    _add_policy_arguments(parser)
    _add_augmentation_arguments(parser)
    _add_run_arguments(parser)


def _add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """The policy's shape and inputs (`FastSlowConfig`)."""
    add_field(parser, "--horizon", FastSlowConfig, "H, rows per chunk")
    add_field(
        parser, "--execute-steps", FastSlowConfig, "s, rows executed per chunk in evaluation and bench, and RTC's s"
    )
    add_field(parser, "--image-size", FastSlowConfig, "training image size in pixels", field="image_size_px")
    parser.add_argument("--cameras", default="front,wrist", help="comma-separated cameras (default: front,wrist)")
    add_field(
        parser,
        "--past-frame-ticks",
        FastSlowConfig,
        "G > 0: each camera's encoder also reads that camera's frame from G ticks earlier, so the policy can "
        "see motion (a moving ball's velocity); 0: the newest frame only",
    )
    add_field(
        parser,
        "--past-frames",
        FastSlowConfig,
        "P, frames each camera gives from G, 2 G, .. P G ticks earlier with --past-frame-ticks G",
    )
    add_field(
        parser,
        "--action-mode",
        FastSlowConfig,
        "expert output parameterisation, normalised: delta = rows minus "
        "the state; ee_delta / ee_absolute = gripper positions (minus the state's), IK back to joints, needs "
        "--ee-features",
        choices=ACTION_MODES,
    )
    _add_privileged_arguments(parser)


def _add_privileged_arguments(parser: argparse.ArgumentParser) -> None:
    """What the fast pathway may read beyond joints and cameras: the environment's state
    (privileged from a simulated dataset, or estimated), end-effector features."""
    parser.add_argument(
        "--env-state",
        action="store_true",
        help="give the fast pathway the privileged sim.environment_state (sim datasets)",
    )
    _add_estimate_arguments(parser)
    parser.add_argument(
        "--env-objects",
        type=int,
        default=0,
        metavar="D",
        help="with --env-state: read it as objects of D numbers (pick_place: 3 = xyz per cube and "
        "bin) that the instruction attends over (default: 0 = off)",
    )
    parser.add_argument(
        "--relative-objects",
        action="store_true",
        help="with --env-objects and --ee-features: every "
        "object slot also gets its offset from the gripper (decimetres)",
    )
    parser.add_argument(
        "--ee-features",
        metavar="ARM",
        default="",
        help="give the fast pathway end-effector features "
        "of the state from ARM's forward kinematics (e.g. so101; default: off)",
    )


def _add_estimate_arguments(parser: argparse.ArgumentParser) -> None:
    """An env_state the slow pathway estimates from the cameras: the simulator's, or one any
    recording gives (a red object's image track, or its base-frame position from calibrated
    cameras)."""
    parser.add_argument(
        "--estimate-env-state",
        action="store_true",
        help="with --env-state: the slow pathway learns to estimate it from the cameras (an auxiliary "
        "loss) and the fast pathway gets the estimate, so the policy reads only cameras and joints "
        "(in training it reads the env state plus noise of 0.005 in its units: m, m/s)",
    )
    parser.add_argument(
        "--blob-target",
        metavar="CAMERAS",
        default="",
        help="instead of --env-state --estimate-env-state's simulator state: the slow pathway learns to "
        "estimate the red object's track in these cameras' recorded frames (image position, size, "
        "velocities; e.g. front,wrist), which a real arm's recording gives",
    )
    parser.add_argument(
        "--ball-target",
        metavar="CALIBRATION",
        nargs="?",
        const="",
        help="instead of --env-state --estimate-env-state's simulator state: the slow pathway learns to "
        "estimate the red ball's position and velocity in the base frame, triangulated in the recorded "
        "frames of the cameras this calibration file describes (without a value: the dataset's "
        f"{F.CAMERA_CALIBRATION}, which `robotrl record` writes for the simulated arm's cameras)",
    )


def _add_augmentation_arguments(parser: argparse.ArgumentParser) -> None:
    """What each example shows the policy (`TrainConfig`): targets, offsets, delays, shifts."""
    add_field(
        parser,
        "--action-key",
        TrainConfig,
        "targets: executed actions, or the teleop's (clean labels of a `record --perturb` dataset)",
        choices=("action", "teleop.action"),
    )
    add_field(
        parser, "--k-max", TrainConfig, "VLASH offset augmentation: state/chunk k ~ U{0..K} ticks after the image"
    )
    add_field(
        parser,
        "--k-zero-prob",
        TrainConfig,
        "probability of offset k = 0 on top of the uniform draw; keeps "
        "delay-0 success (measured on reach: 84%% with 0, 98%% with 0.5, 98%% without offsets)",
    )
    add_field(
        parser,
        "--forward-noise",
        TrainConfig,
        "noise on the forwarded state of offset-k examples: std k x this x the joint's motion in one tick",
    )
    add_field(
        parser,
        "--latent-delay-max",
        TrainConfig,
        "delayed-latent augmentation: slow latent from a frame j ~ U{0..J} ticks older",
    )
    parser.add_argument(
        "--rtc-train", action="store_true", help="training-time RTC: clean prefix of random length, loss on the postfix"
    )
    add_field(parser, "--shift-px", TrainConfig, "random image shift augmentation in pixels")


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Optimisation, seed, threads, device, checkpoints, evaluation, budget (`TrainConfig`)."""
    add_field(parser, "--steps", TrainConfig, "optimizer steps")
    add_field(parser, "--batch-size", TrainConfig, "examples per step")
    add_field(parser, "--lr", TrainConfig, "peak learning rate")
    add_field(parser, "--seed", TrainConfig, "training seed")
    add_field(
        parser,
        "--threads",
        TrainConfig,
        "torch CPU threads, on the CPU at most 2 (use 2 only on an otherwise idle machine)",
    )
    add_device_arguments(parser, config=TrainConfig)
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast of the forward pass (CUDA only)")
    add_field(parser, "--save-every", TrainConfig, "checkpoint period in steps")
    add_field(parser, "--eval-every", TrainConfig, "evaluation period in steps (0: at the end only)")
    add_field(parser, "--eval-episodes", TrainConfig, "simulated episodes per evaluation")
    parser.add_argument("--task", choices=tuple(TASKS), help="simulated task for evaluation")
    parser.add_argument("--minutes", type=float, help="wall-time budget; stops and saves when reached")
    parser.add_argument("--resume", action="store_true", help="continue the run saved in --out")


def run(args: argparse.Namespace) -> int:
    from robotrl.train.trainer import train

    if args.eval_episodes and not args.task:
        raise UserError("--eval-episodes needs --task reach|pick_place")
    result = train(train_config(args), resume=args.resume)
    _report(args.out, result)
    return 0


def train_config(args: argparse.Namespace) -> TrainConfig:
    blob_cameras = tuple(c for c in args.blob_target.split(",") if c)
    ball = None if args.ball_target is None else Path(args.ball_target or args.dataset / F.CAMERA_CALIBRATION)
    if sum((bool(blob_cameras), ball is not None, args.env_state)) > 1:
        raise UserError("--blob-target, --ball-target and --env-state (the simulator's state) exclude each other")
    policy = {
        "horizon": args.horizon,
        "execute_steps": args.execute_steps,
        "image_size_px": args.image_size,
        "past_frame_ticks": args.past_frame_ticks,
        "past_frames": args.past_frames,
        "cameras": tuple(c for c in args.cameras.split(",") if c),
        "use_env_state": args.env_state or bool(blob_cameras) or ball is not None,
        "estimate_env_state": args.estimate_env_state or bool(blob_cameras) or ball is not None,
        "env_blob_cameras": blob_cameras,
        "env_object_dim": args.env_objects,
        "relative_objects": args.relative_objects,
        "action_mode": args.action_mode,
        "ee_features_arm": args.ee_features,
    }
    return TrainConfig(
        dataset=args.dataset,
        out=args.out,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        action_key=args.action_key,
        ball_calibration=ball,
        k_max=args.k_max,
        k_zero_prob=args.k_zero_prob,
        forward_noise=args.forward_noise,
        latent_delay_max=args.latent_delay_max,
        rtc_train=args.rtc_train,
        shift_px=args.shift_px,
        seed=args.seed,
        threads=args.threads,
        device=resolve_device(args.device),
        bf16=args.bf16,
        save_every=args.save_every,
        eval_every=args.eval_every,
        eval_episodes=args.eval_episodes,
        task=args.task,
        time_budget_s=args.minutes * 60 if args.minutes else None,
        policy=policy,
    )


def _report(out: Path, result) -> None:
    from robotrl.report.table import format_table

    losses = f"{result.losses[0][1]:.4f} / {result.losses[-1][1]:.4f}" if result.losses else "-"
    rows = [
        ("checkpoint", str(out)),
        ("steps", result.steps),
        ("train wall time (s)", round(result.wall_s, 1)),
        ("parameters", f"{result.num_parameters:,}"),
        ("loss first / last", losses),
    ]
    rows += [
        (f"eval @ step {e['step']}", f"{e['success_rate']:.0%} [{e['wilson95_low']:.0%}, {e['wilson95_high']:.0%}]")
        for e in result.evals
    ]
    print(format_table(("metric", "value"), rows))
    summary = {
        "steps": result.steps,
        "wall_s": result.wall_s,
        "parameters": result.num_parameters,
        "evals": result.evals,
    }
    (out / "train_summary.json").write_text(json.dumps(summary, indent=2))
