"""`robotrl learner`: the online learner process alone (pull transitions, update, publish
weights); `robotrl learn` starts one with `--config FILE`.

Executors stream transitions to `--transitions` (default tcp://*:5560, hello + heartbeats); servers
subscribe to `--weights` (PUB on that port, the latest-weights socket on port + 1:
`robotrl serve --weights-from tcp://LEARNER:5561`). SIGINT/SIGTERM stop it with a final
checkpoint; `--resume` continues a run (also after kill -9) from `--out` and the buffer log.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from robotrl.commands.flags import add_device_arguments, add_field, resolve_device
from robotrl.core.config import field_default
from robotrl.core.errors import UserError
from robotrl.learn.job import LearnerJob
from robotrl.learn.learner import LearnerConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=Path, help="a LearnerJob JSON file (written by `robotrl learn`); replaces every other option"
    )
    parser.add_argument("--buffer", type=Path, help="online buffer folder (episode log), created if new")
    parser.add_argument(
        "--out",
        type=Path,
        help="run folder: checkpoint/, served/ (a checkpoint `robotrl serve` "
        "loads: the final weights once the learner stops), spec.json, "
        "updates.csv, episodes.csv, curves.png",
    )
    parser.add_argument(
        "--transitions",
        default=field_default(LearnerConfig, "transitions_endpoint"),
        help="endpoint the transitions socket binds (default: %(default)s)",
    )
    parser.add_argument(
        "--weights",
        default=field_default(LearnerJob, "weights"),
        help="weights PUB endpoint; the latest-weights socket binds port + 1 (default: %(default)s)",
    )
    parser.add_argument("--resume", action="store_true", help="continue the run in --out (checkpoint + buffer log)")
    parser.add_argument(
        "--curve-keys",
        type=Path,
        help="folder with the learner's server.key_secret and "
        "allowed_clients/ (the actors' and servers' public keys): encrypt the transitions and "
        "weights channels and hear only those keys",
    )
    add_learning_arguments(parser)
    parser.add_argument(
        "--fleet",
        metavar="FILE",
        help="fleet file (TOML): --device auto takes the GPU its [gpus.*] entries give the learner role here",
    )
    spec = parser.add_argument_group("transition spec (what executors send; default: from --policy, else these)")
    spec.add_argument("--spec", type=Path, help="TransitionSpec JSON file (e.g. OUT/spec.json of another run)")
    spec.add_argument("--state-dim", type=int, default=6, help="joints in the state (default: 6)")
    spec.add_argument("--action-dim", type=int, default=6, help="joints per action row (default: 6)")
    spec.add_argument(
        "--cameras", default="front,wrist", help="comma-separated cameras, '' for none (default: front,wrist)"
    )
    spec.add_argument("--image-size", type=int, default=64, help="square training image size in pixels (default: 64)")
    spec.add_argument("--env-state-dim", type=int, default=0, help="privileged sim features per row (default: 0)")


def add_learning_arguments(parser: argparse.ArgumentParser) -> None:
    """The algorithm, buffer and loop options `robotrl learner` and `robotrl learn` share."""
    learn = parser.add_argument_group("learner")
    learn.add_argument(
        "--algo",
        default="hil-flow",
        help="sac (RLPD / HIL-SERL), hil-flow (weighted flow "
        "fine-tuning), dsrl (SAC over the noise); default: hil-flow",
    )
    add_field(learn, "--preset", LearnerJob, "algorithm preset")
    learn.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override one field of the preset (JSON value, e.g. --set batch_size=128); repeatable",
    )
    learn.add_argument("--policy", type=Path, help="flow policy checkpoint (hil-flow, dsrl); also gives the spec")
    learn.add_argument(
        "--demo-dataset",
        type=Path,
        action="append",
        default=[],
        help="LeRobotDataset folder loaded as demo transitions (repeatable)",
    )
    add_field(learn, "--capacity", LearnerJob, "online transitions kept in RAM")
    add_field(
        learn, "--online-ratio", LearnerJob, "share of each batch from online rows, the rest demo + interventions"
    )
    learn.add_argument("--staleness-cap", type=int, help="never sample online rows more than this many versions old")
    learn.add_argument("--no-fsync", action="store_true", help="skip fsync in the buffer log (faster, not crash-safe)")
    add_field(learn, "--min-transitions", LearnerConfig, "samplable transitions before updating")
    add_field(learn, "--publish-every", LearnerConfig, "updates between weight versions")
    add_field(learn, "--checkpoint-every", LearnerConfig, "updates between checkpoints")
    add_field(learn, "--log-every", LearnerConfig, "updates between updates.csv rows")
    learn.add_argument("--max-updates", type=int, help="stop after this many updates in total (default: until stopped)")
    learn.add_argument("--minutes", type=float, help="stop after this many minutes of this session")
    add_field(learn, "--learner-seed", LearnerConfig, "the learner's seed", field="seed")
    add_field(learn, "--threads", LearnerJob, "torch CPU threads of the learner")
    add_device_arguments(learn, config=LearnerJob)


def learner_job(
    args: argparse.Namespace, *, out: Path, buffer: Path, transitions: str, weights: str, device: str, spec=None
) -> LearnerJob:
    """The `LearnerJob` of the options of `add_learning_arguments`, training on `device`
    (resolved from `--device`)."""
    try:
        loop = LearnerConfig(
            out=out,
            transitions_endpoint=transitions,
            min_transitions=args.min_transitions,
            publish_every=args.publish_every,
            checkpoint_every=args.checkpoint_every,
            log_every=args.log_every,
            max_updates=args.max_updates,
            max_wall_s=args.minutes * 60 if args.minutes is not None else None,
            seed=args.learner_seed,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return LearnerJob(
        algo=args.algo,
        buffer=buffer,
        loop=loop,
        preset=args.preset,
        overrides=parse_overrides(args.set),
        policy=args.policy,
        demo_datasets=tuple(args.demo_dataset),
        weights=weights,
        resume=args.resume,
        spec=spec,
        capacity=args.capacity,
        online_ratio=args.online_ratio,
        staleness_cap=args.staleness_cap,
        fsync=not args.no_fsync,
        threads=args.threads,
        device=device,
    )


def run(args: argparse.Namespace) -> int:
    from robotrl.core.config import load_config
    from robotrl.learn.job import run_learner

    if args.config is not None:
        job = load_config(LearnerJob, args.config)
        job = replace(job, device=resolve_device(job.device, role="learner", fleet=args.fleet))
    else:
        if args.buffer is None or args.out is None:
            raise UserError("give --buffer and --out (or --config FILE)")
        job = learner_job(
            args,
            out=args.out,
            buffer=args.buffer,
            transitions=args.transitions,
            weights=args.weights,
            device=resolve_device(args.device, role="learner", fleet=args.fleet),
            spec=_flag_spec(args),
        )
        job = replace(job, curve_keys=args.curve_keys)
    run_learner(job)
    return 0


def _flag_spec(args: argparse.Namespace):
    """The spec the options give: --spec's file, or the flags when neither --policy nor a
    resumed run's spec.json says it (None: the job resolves it)."""
    from robotrl.buffer.spec import TransitionSpec

    if args.spec is not None:
        try:
            return TransitionSpec.from_dict(json.loads(Path(args.spec).read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UserError(f"cannot read the transition spec {args.spec}: {exc}") from None
    if args.policy is not None or (args.resume and (args.out / "spec.json").is_file()):
        return None
    cameras = [c for c in args.cameras.split(",") if c]
    return TransitionSpec(
        args.state_dim, args.action_dim, {c: (args.image_size, args.image_size) for c in cameras}, args.env_state_dim
    )


def parse_overrides(items: list[str]) -> dict:
    """["batch_size=128", "name=x"] -> {"batch_size": 128, "name": "x"} (JSON values, else strings)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--set {item!r}: expected FIELD=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out
