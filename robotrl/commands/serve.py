"""`robotrl serve`: run the asynchronous inference server for a policy checkpoint."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from robotrl.core.config import field_default
from robotrl.inference.server import ServeJob, ServerConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        help="a ServeJob JSON file (written by `robotrl learn` / `deploy`); replaces every other option",
    )
    parser.add_argument(
        "--policy", type=Path, help="checkpoint folder (robotrl train output or a lerobot pretrained_model folder)"
    )
    parser.add_argument(
        "--bind",
        default=field_default(ServerConfig, "endpoint"),
        help="endpoint to bind (default: %(default)s; tcp://*:5555 for other machines, with --curve-keys)",
    )
    parser.add_argument(
        "--curve-keys",
        type=Path,
        help="folder with server.key_secret and allowed_clients/ (public keys from `robotrl keys`): "
        "encrypt and allow only those clients",
    )
    parser.add_argument(
        "--batch-wait-ms",
        type=float,
        default=field_default(ServerConfig, "batch_wait_ms"),
        help="longest wait to batch requests of several robots (default: %(default)s)",
    )
    parser.add_argument(
        "--slow-rate-hz",
        type=float,
        default=field_default(ServerConfig, "slow_rate_hz"),
        help="rate of the slow vision-language pathway per robot (default: %(default)s)",
    )
    parser.add_argument(
        "--max-step-rad",
        type=float,
        default=field_default(ServeJob, "step_rad"),
        help="per-tick joint step used to clamp forwarded states, the robot's safety step "
        "(default: %(default)s = 3 rad/s at 30 Hz)",
    )
    parser.add_argument(
        "--seed", type=int, default=field_default(ServeJob, "seed"), help="seed of the policy's sampling noise"
    )
    parser.add_argument(
        "--weights-from",
        metavar="tcp://HOST:PORT",
        help="take new weights from a learner (`robotrl learner --weights`): its PUB socket is on "
        "PORT, the latest-weights socket on PORT + 1; weights swap between chunks",
    )


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from robotrl.core.config import load_config
    from robotrl.core.errors import UserError
    from robotrl.inference.server import PolicyServer
    from robotrl.policies.loading import load_policy

    if args.config is not None:
        job = load_config(ServeJob, args.config)
    elif args.policy is None:
        raise UserError("give --policy CKPT (or --config FILE)")
    else:
        job = ServeJob(
            args.policy,
            ServerConfig(
                endpoint=args.bind,
                batch_wait_ms=args.batch_wait_ms,
                slow_rate_hz=args.slow_rate_hz,
                weights_from=args.weights_from,
            ),
            args.max_step_rad,
            args.seed,
            args.curve_keys,
        )
    policy = load_policy(job.policy, seed=job.seed)
    config = replace(job.server, max_step_rad=(job.step_rad,) * policy.metadata.action_dim)
    server = PolicyServer(policy, config, curve=_curve(job.curve_keys))
    server.start()
    print(
        f"serving {policy.metadata.policy_type} (H={policy.metadata.horizon}) on {server.endpoint}; "
        f"model {server.model_ms:.1f} ms per chunk; Ctrl-C to stop",
        flush=True,
    )
    if config.weights_from:
        print(f"taking new weights from {config.weights_from} (latest-weights requests on its port + 1)", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        while not done.wait(10.0):
            total = server.stats.percentiles_ms("total")
            if total:
                print(
                    f"chunks {server.stats.count('total')}  server time p50 {total['p50']:.1f} ms "
                    f"p99 {total['p99']:.1f} ms  version {server.version}",
                    flush=True,
                )
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def _curve(folder: Path | None):
    if folder is None:
        return None
    from robotrl.wire.keys import ServerKeys

    return ServerKeys(secret_file=folder / "server.key_secret", allowed_clients_dir=folder / "allowed_clients")
