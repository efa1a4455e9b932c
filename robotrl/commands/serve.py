"""`robotrl serve`: run the asynchronous inference server for a policy checkpoint."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from robotrl.commands.flags import (
    add_delay_argument,
    add_device_arguments,
    add_field,
    add_noise_argument,
    delay_option,
    noise_option,
    resolve_device,
)
from robotrl.inference.server import ServeJob, ServerConfig

STATUS_EVERY_S = 10.0
"""Seconds between two status lines."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        help="a ServeJob JSON file (written by `robotrl learn` / `deploy`); replaces every other option",
    )
    parser.add_argument(
        "--policy", type=Path, help="checkpoint folder (robotrl train output or a lerobot pretrained_model folder)"
    )
    add_field(
        parser,
        "--bind",
        ServerConfig,
        "endpoint to bind (tcp://*:5555 for other machines, with --curve-keys)",
        field="endpoint",
    )
    parser.add_argument(
        "--curve-keys",
        type=Path,
        help="folder with server.key_secret and allowed_clients/ (public "
        "keys from `robotrl keys`): encrypt and allow only those clients",
    )
    _add_model_arguments(parser)
    parser.add_argument(
        "--weights-from",
        metavar="tcp://HOST:PORT",
        help="take new weights from a learner (`robotrl "
        "learner --weights`): its PUB socket is on PORT, the latest-weights socket on PORT + 1; "
        "weights swap between chunks",
    )
    parser.add_argument(
        "--learner-keys",
        type=Path,
        help="with --weights-from: folder with this server's client.key_secret and the learner's server.key (CURVE)",
    )


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """How the model answers: batching, workers, slow pathway, forwarding, noise, device."""
    add_field(parser, "--batch-wait-ms", ServerConfig, "longest wait to batch requests of several robots")
    add_field(
        parser,
        "--workers",
        ServerConfig,
        "model threads running batches side by side (robots deployed with --in-flight N want N)",
        field="model_workers",
    )
    add_field(parser, "--slow-rate-hz", ServerConfig, "rate of the slow vision-language pathway per robot")
    add_field(
        parser,
        "--max-step-rad",
        ServeJob,
        "per-tick joint step used to clamp forwarded states, the robot's safety step (0.1 = 3 rad/s at 30 Hz)",
        field="step_rad",
    )
    add_field(parser, "--seed", ServeJob, "seed of the policy's sampling noise")
    add_delay_argument(parser)
    add_noise_argument(parser)
    add_device_arguments(parser, role="inference_server", config=ServeJob)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from robotrl.inference.delayed import ReplyHold
    from robotrl.inference.server import PolicyServer
    from robotrl.policies.loading import load_policy
    from robotrl.wire.transport import check_bindable

    job = _job(args)
    check_bindable(job.server.endpoint)  # a port in use fails now, not after the model loads
    device = resolve_device(job.device, role="inference_server", fleet=args.fleet)
    policy = load_policy(job.policy, seed=job.seed, device=device, noise_scale=job.noise_scale)
    dt_s = 1.0 / policy.metadata.control_rate_hz
    hold = None if job.delay is None else ReplyHold(job.delay, dt_s, job.seed)
    config = replace(job.server, max_step_rad=(job.step_rad,) * policy.metadata.action_dim)
    server = PolicyServer(policy, config, curve=_curve(job.curve_keys), device=device, hold=hold)
    server.start()
    meta = policy.metadata
    delay = "" if job.delay is None else f" (replies held to {job.delay.label} ticks)"
    delay += "" if job.noise_scale == 1.0 else f" (noise scale {job.noise_scale:g})"
    print(
        f"serving {meta.policy_type} (H={meta.horizon}) on {server.endpoint}; model {server.model_ms:.1f} ms per "
        f"chunk{delay}; Ctrl-C to stop",
        flush=True,
    )
    if config.weights_from:
        print(f"taking new weights from {config.weights_from} (latest-weights requests on its port + 1)", flush=True)
    try:
        return _report_until_stopped(server)
    finally:
        server.stop()


def _job(args: argparse.Namespace) -> ServeJob:
    from robotrl.core.config import load_config
    from robotrl.core.errors import UserError

    if args.config is not None:
        return load_config(ServeJob, args.config)
    if args.policy is None:
        raise UserError("give --policy CKPT (or --config FILE)")
    if args.workers < 1:
        raise UserError(f"--workers must be >= 1, got {args.workers}")
    server = ServerConfig(
        endpoint=args.bind,
        batch_wait_ms=args.batch_wait_ms,
        model_workers=args.workers,
        slow_rate_hz=args.slow_rate_hz,
        weights_from=args.weights_from,
        weights_keys=args.learner_keys,
    )
    delay, noise = delay_option(args.delay_ticks), noise_option(args.noise_scale)
    try:
        return ServeJob(args.policy, server, args.max_step_rad, args.seed, args.curve_keys, args.device, delay, noise)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _report_until_stopped(server) -> int:
    """A line of chunk counts, server times and health every 10 s, until SIGTERM or
    Ctrl-C (0), or until a server thread has died (1: the server cannot serve, say so)."""
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        while not done.wait(STATUS_EVERY_S):
            total = server.stats.percentiles_ms("total") or {"p50": 0.0, "p99": 0.0}
            health = server.health()
            alive = sum(health["threads_alive"].values())
            learner = health["learner"]
            learner_text = "" if learner is None else f"  learner {'up' if learner['connected'] else 'LOST'}"
            print(
                f"chunks {server.stats.count('total')}  server time p50 {total['p50']:.1f} ms p99 {total['p99']:.1f} "
                f"ms  version {server.version}  threads {alive}/{len(health['threads_alive'])}  refused "
                f"{health['refused']}  errors {sum(health['errors'].values())}{learner_text}",
                flush=True,
            )
            dead = [name for name, alive in health["threads_alive"].items() if not alive]
            refused = "" if learner is None else learner["failure"]
            if dead or refused:
                reason = (
                    f"thread(s) {', '.join(dead)} stopped ({health['last_error'] or 'no error'})"
                    if dead
                    else f"weights: {refused}"
                )
                print(
                    f"robotrl serve: error: {reason}; exiting so a supervisor can restart the server", file=sys.stderr
                )
                return 1
    except KeyboardInterrupt:
        pass
    return 0


def _curve(folder: Path | None):
    if folder is None:
        return None
    from robotrl.wire.keys import ServerKeys

    return ServerKeys(secret_file=folder / "server.key_secret", allowed_clients_dir=folder / "allowed_clients")
