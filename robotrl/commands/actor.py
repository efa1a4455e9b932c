"""`robotrl actor`: the robot side of online learning. Runs a policy on an arm through the
inference server like `robotrl deploy`, streams every tick to a learner
(`--transitions`), and lets a scripted expert (sim) or a person (keyboard, gamepad,
leader arm) take over; their success / failure keys end and label the episode."""

from __future__ import annotations

import argparse
from pathlib import Path

from robotrl.commands.arm_options import (
    add_arm_arguments,
    add_server_arguments,
    arm_config,
    executor_config,
    server_endpoint,
)
from robotrl.core.config import field_default
from robotrl.learn.actor import INTERVENERS, ActorJob, InterventionConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=Path, help="an ActorJob JSON file (written by `robotrl learn`); replaces every other option"
    )
    add_arm_arguments(parser)
    add_server_arguments(parser)
    parser.add_argument("--transitions", help="the learner's transitions endpoint, e.g. tcp://learner:5560")
    parser.add_argument(
        "--learner-keys",
        type=Path,
        help="folder with this robot's client.key_secret and the learner's server.key: encrypt the transitions (CURVE)",
    )
    add_stepped_arguments(parser)
    parser.add_argument("--actor-log", type=Path, help="CSV file: one row per episode (success, interventions, ...)")
    add_intervention_arguments(parser)


def add_stepped_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stepped-delay",
        type=int,
        metavar="D",
        help="sim: a simulated clock, each chunk taken in exactly D ticks after its request "
        "(faster than real time, reproducible); default: 30 Hz wall clock",
    )
    parser.add_argument(
        "--stepped-speed",
        type=float,
        metavar="X",
        help="with --stepped-delay: run at most X times real time (0 < X <= 1; slow motion, so a learner "
        "here gets 1/X the wall time per episode, as one 1/X times faster would); default: as fast as it can",
    )


def add_intervention_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("interventions (docs/algorithms.md section 4)")
    group.add_argument(
        "--intervene",
        choices=INTERVENERS,
        default=None,
        help="who may take over: scripted (sim: the task's expert, when the policy drifts), or a "
        "person with keyboard (i toggles), gamepad or leader (--leader-port) "
        "(default: scripted in sim, else none)",
    )
    group.add_argument(
        "--budget-ticks",
        type=int,
        default=field_default(InterventionConfig, "budget_ticks"),
        help="scripted: intervention ticks allowed in the first episode (default: %(default)s)",
    )
    group.add_argument(
        "--taper-episodes",
        type=int,
        default=field_default(InterventionConfig, "taper_episodes"),
        help="scripted: episodes over which the budget falls to 0 (default: %(default)s)",
    )
    group.add_argument(
        "--takeover-m",
        type=float,
        default=field_default(InterventionConfig, "takeover_m"),
        help="scripted: takes over when the policy's end-effector target is this far (m) from the "
        "expert's (default: %(default)s)",
    )
    group.add_argument(
        "--takeover-gripper-rad",
        type=float,
        default=field_default(InterventionConfig, "takeover_gripper_rad"),
        help="scripted: also takes over when the gripper targets differ by more than this (rad); "
        "0: position only (default: %(default)s)",
    )
    group.add_argument("--leader-port", help="leader: serial port of the leader arm")
    group.add_argument(
        "--leader-id", default=field_default(InterventionConfig, "leader_id"), help="leader: lerobot calibration id"
    )


def intervention_config(args: argparse.Namespace) -> InterventionConfig:
    who = args.intervene or ("scripted" if args.robot == "sim" else "none")
    return InterventionConfig(
        who,
        args.budget_ticks,
        args.taper_episodes,
        args.takeover_m,
        args.takeover_gripper_rad,
        args.leader_port,
        args.leader_id,
    )


def run(args: argparse.Namespace) -> int:
    from robotrl.core.config import load_config
    from robotrl.learn.actor import run_actor
    from robotrl.learn.launch import stop

    if args.config is not None:
        run_actor(load_config(ActorJob, args.config))
        return 0
    arm, executor, intervention = arm_config(args), executor_config(args), intervention_config(args)
    endpoint, server = server_endpoint(args)
    try:
        job = ActorJob(
            arm,
            endpoint,
            args.transitions,
            executor,
            intervention,
            args.episodes,
            args.seed,
            args.max_seconds,
            args.stepped_delay,
            args.stepped_speed,
            args.actor_log,
            args.curve_keys,
            args.learner_keys,
        )
        run_actor(job)
    finally:
        stop(server, timeout_s=10.0)
    return 0
