"""`robotrl serve`: run the asynchronous inference server for a policy checkpoint."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", type=Path, required=True,
                        help="checkpoint folder (robotrl train output or a lerobot pretrained_model folder)")
    parser.add_argument("--bind", default="tcp://127.0.0.1:5555",
                        help="endpoint to bind (default tcp://127.0.0.1:5555; tcp://*:5555 for other machines, with --curve-keys)")
    parser.add_argument("--curve-keys", type=Path,
                        help="folder with server.key_secret and allowed_clients/ (public keys from `robotrl keys`): encrypt and allow only those clients")
    parser.add_argument("--batch-wait-ms", type=float, default=2.0, help="longest wait to batch requests of several robots (default: 2)")
    parser.add_argument("--slow-rate-hz", type=float, default=3.0, help="rate of the slow vision-language pathway per robot (default: 3)")
    parser.add_argument("--max-step-rad", type=float, default=0.1,
                        help="per-tick joint step used to clamp forwarded states, the robot's safety step (default: 0.1 = 3 rad/s at 30 Hz)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the policy's sampling noise")
    parser.add_argument("--weights-from", metavar="tcp://HOST:PORT",
                        help="take new weights from a learner (`robotrl learn --weights`): its PUB socket is on "
                             "PORT, the latest-weights socket on PORT + 1; weights swap between chunks")


def run(args: argparse.Namespace) -> int:
    from robotrl.inference.server import PolicyServer, ServerConfig
    from robotrl.policies.loading import load_policy

    policy = load_policy(args.policy, seed=args.seed)
    joints = policy.metadata.action_dim
    config = ServerConfig(endpoint=args.bind, batch_wait_ms=args.batch_wait_ms, slow_rate_hz=args.slow_rate_hz,
                          max_step_rad=(args.max_step_rad,) * joints, weights_from=args.weights_from)
    server = PolicyServer(policy, config, curve=_curve(args.curve_keys))
    server.start()
    print(f"serving {policy.metadata.policy_type} (H={policy.metadata.horizon}) on {server.endpoint}; "
          f"model {server.model_ms:.1f} ms per chunk; Ctrl-C to stop", flush=True)
    if args.weights_from:
        print(f"taking new weights from {args.weights_from} (latest-weights requests on its port + 1)", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        while not done.wait(10.0):
            total = server.stats.percentiles_ms("total")
            if total:
                print(f"chunks {server.stats.count('total')}  server time p50 {total['p50']:.1f} ms "
                      f"p99 {total['p99']:.1f} ms  version {server.version}", flush=True)
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
