"""`robotrl learn`: the online learner process (pull transitions, update, publish weights).

Executors stream transitions to `--transitions` (PULL, default tcp://*:5560); servers
subscribe to `--weights` (PUB on that port, the latest-weights socket on port + 1:
`robotrl serve --weights-from tcp://LEARNER:5561`). SIGINT/SIGTERM stop it with a final
checkpoint; `--resume` continues a run (also after kill -9) from `--out` and the buffer log.
"""

from __future__ import annotations

import argparse
import json
import signal
from pathlib import Path

from robotrl.errors import UserError

ALGORITHMS = ("sac", "hil-flow", "dsrl")
SERVED = "served"
"""Folder in --out with a checkpoint of the served policy: as of the (resumed) start while
the learner runs, its final weights once it stops."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--algo", choices=ALGORITHMS, required=True,
                        help="sac (RLPD / HIL-SERL), hil-flow (weighted flow fine-tuning), dsrl (SAC over the noise)")
    parser.add_argument("--preset", default="default", help="algorithm preset (default: default)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override one field of the preset (JSON value, e.g. --set batch_size=128); repeatable")
    parser.add_argument("--buffer", type=Path, required=True, help="online buffer folder (episode log), created if new")
    parser.add_argument("--out", type=Path, required=True,
                        help="run folder: checkpoint/, served/ (a checkpoint `robotrl serve` loads: the final "
                             "weights once the learner stops), spec.json, updates.csv, episodes.csv, curves.png")
    parser.add_argument("--policy", type=Path, help="flow policy checkpoint (hil-flow, dsrl); also gives the spec")
    parser.add_argument("--demo-dataset", type=Path, action="append", default=[],
                        help="LeRobotDataset folder loaded as demo transitions (repeatable)")
    parser.add_argument("--transitions", default="tcp://*:5560",
                        help="endpoint the transitions PULL socket binds (default: tcp://*:5560)")
    parser.add_argument("--weights", default="tcp://*:5561",
                        help="weights PUB endpoint; the latest-weights socket binds port + 1 (default: tcp://*:5561)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out (checkpoint + buffer log)")
    spec = parser.add_argument_group("transition spec (what executors send; default: from --policy, else these)")
    spec.add_argument("--spec", type=Path, help="TransitionSpec JSON file (e.g. OUT/spec.json of another run)")
    spec.add_argument("--state-dim", type=int, default=6, help="joints in the state (default: 6)")
    spec.add_argument("--action-dim", type=int, default=6, help="joints per action row (default: 6)")
    spec.add_argument("--cameras", default="front,wrist", help="comma-separated cameras, '' for none (default: front,wrist)")
    spec.add_argument("--image-size", type=int, default=64, help="square training image size in pixels (default: 64)")
    spec.add_argument("--env-state-dim", type=int, default=0, help="privileged sim features per row (default: 0)")
    buf = parser.add_argument_group("buffer")
    buf.add_argument("--capacity", type=int, default=200_000, help="online transitions kept in RAM (default: 200000)")
    buf.add_argument("--online-ratio", type=float, default=0.5,
                     help="share of each batch from online rows, the rest demo + interventions (default: 0.5)")
    buf.add_argument("--staleness-cap", type=int, help="never sample online rows more than this many versions old")
    buf.add_argument("--no-fsync", action="store_true", help="skip fsync in the buffer log (faster, not crash-safe)")
    loop = parser.add_argument_group("learner loop")
    loop.add_argument("--min-transitions", type=int, default=500, help="samplable transitions before updating (default: 500)")
    loop.add_argument("--publish-every", type=int, default=20, help="updates between weight versions (default: 20)")
    loop.add_argument("--checkpoint-every", type=int, default=200, help="updates between checkpoints (default: 200)")
    loop.add_argument("--log-every", type=int, default=20, help="updates between updates.csv rows (default: 20)")
    loop.add_argument("--max-updates", type=int, help="stop after this many updates in total (default: until stopped)")
    loop.add_argument("--minutes", type=float, help="stop after this many minutes of this session")
    loop.add_argument("--seed", type=int, default=0, help="seed (default: 0)")
    loop.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")


def run(args: argparse.Namespace) -> int:
    import torch

    from robotrl.buffer.online import OnlineBuffer
    from robotrl.learn.algorithm import make_algorithm
    from robotrl.learn.learner import Learner, LearnerConfig, run_exists
    from robotrl.learn.weights import WeightPublisher, weight_endpoints

    torch.set_num_threads(max(1, args.threads))
    if not args.resume and run_exists(args.out):
        raise UserError(f"{args.out} holds a learner run: pass --resume to continue it or choose another --out")
    spec = resolve_spec(args)
    overrides = parse_overrides(args.set)
    try:
        cfg = LearnerConfig(out=args.out, transitions_endpoint=args.transitions, min_transitions=args.min_transitions,
                            publish_every=args.publish_every, checkpoint_every=args.checkpoint_every,
                            log_every=args.log_every, max_updates=args.max_updates,
                            max_wall_s=args.minutes * 60 if args.minutes is not None else None, seed=args.seed)
        pub_endpoint, latest_endpoint = weight_endpoints(args.weights)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    algorithm = make_algorithm(args.algo, spec, policy_path=args.policy, preset=args.preset, overrides=overrides,
                               seed=args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "spec.json").write_text(json.dumps(spec.to_dict(), indent=1))
    buffer = OnlineBuffer(args.buffer, spec, args.capacity, online_ratio=args.online_ratio,
                          staleness_cap=args.staleness_cap, fsync=not args.no_fsync)
    meta = {"spec": spec.to_dict(), "algo": args.algo, "preset": args.preset, "overrides": overrides,
            "policy": str(args.policy) if args.policy else None, "buffer": str(args.buffer)}
    publisher = learner = None
    try:
        for path in args.demo_dataset:
            print(f"demo transitions from {path}: {buffer.add_demo_dataset(path, progress=True)}")
        print(f"buffer {args.buffer}: {buffer.committed_episodes} episodes, {buffer.committed_transitions} "
              f"online transitions recovered in {buffer.recovery_s:.2f} s")
        publisher = WeightPublisher(pub_endpoint, latest_endpoint)
        learner = Learner(algorithm, buffer, publisher, cfg, resume=args.resume, meta=meta)
        algorithm.served_policy().save(args.out / SERVED)  # what a server starts from (`serve --policy`)
        print(f"transitions: {learner.transitions_endpoint}  weights: {publisher.pub_endpoint} "
              f"(latest: {publisher.latest_endpoint})")
        with _stop_on_signals(learner):
            learner.run()
        algorithm.served_policy().save(args.out / SERVED)  # the final weights, for `serve` / `deploy`
        print(f"{learner.updates} updates, weights version {learner.version}, {learner.episodes} episodes, "
              f"{learner.rejected} batches rejected; checkpoint {learner.checkpoint_path}, curves {args.out}")
    finally:
        for part in (learner, publisher, buffer):
            if part is not None:
                part.close()
    return 0


def resolve_spec(args: argparse.Namespace):
    """TransitionSpec from --spec, else OUT/spec.json on --resume, else --policy's config, else the flags."""
    from robotrl.buffer.spec import TransitionSpec

    path = args.spec or (args.out / "spec.json" if args.resume and (args.out / "spec.json").is_file() else None)
    if path is not None:
        try:
            return TransitionSpec.from_dict(json.loads(Path(path).read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UserError(f"cannot read the transition spec {path}: {exc}") from None
    if args.policy is not None:
        from robotrl.policies.checkpoint import read_config

        c = read_config(args.policy).get("config", {})
        size = int(c.get("image_size_px", args.image_size))
        return TransitionSpec(int(c.get("state_dim", args.state_dim)), int(c.get("action_dim", args.action_dim)),
                              {cam: (size, size) for cam in c.get("cameras", ())},
                              int(c.get("env_state_dim", 0)) if c.get("use_env_state") else args.env_state_dim)
    cameras = [c for c in args.cameras.split(",") if c]
    return TransitionSpec(args.state_dim, args.action_dim, {c: (args.image_size, args.image_size) for c in cameras},
                          args.env_state_dim)


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


class _stop_on_signals:
    """SIGINT/SIGTERM -> `learner.stop()` (the loop then checkpoints and returns)."""

    def __init__(self, learner) -> None:
        self.learner = learner
        self.previous: dict[int, object] = {}

    def __enter__(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, lambda *_: self.learner.stop())

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
