"""`robotrl health`: ask a running inference server how it is (for a person or a supervisor).

Prints the server's health as JSON and exits 0 when every thread is alive and the
learner (if it takes weights from one) answers, 1 when not, 2 when the server cannot be
reached within `--timeout-s`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from robotrl.core.errors import TransportTimeout, UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("endpoint", help="the server's endpoint, e.g. tcp://gpu-box:5555")
    parser.add_argument(
        "--curve-keys",
        type=Path,
        help="folder with this client's client.key_secret and the server's server.key (as for deploy)",
    )
    parser.add_argument("--timeout-s", type=float, default=3.0, help="give up after this long (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    from robotrl.wire.client import ClientSocket
    from robotrl.wire.keys import client_keys
    from robotrl.wire.messages import HealthReply, HealthRequest

    curve = None if args.curve_keys is None else client_keys(args.curve_keys)
    with ClientSocket(args.endpoint, role="monitor", curve=curve) as client:
        try:
            client.connect(timeout_s=args.timeout_s)
            client.send(HealthRequest(), timeout_s=args.timeout_s)
            reply = client.recv(args.timeout_s)
        except TransportTimeout as exc:
            raise UserError(str(exc)) from None
    if not isinstance(reply, HealthReply):
        raise UserError(f"{args.endpoint} answered {type(reply).__name__}, not a health reply: is it a robotrl server?")
    health = reply.health
    print(json.dumps(health, indent=2, sort_keys=True))
    learner = health.get("learner")
    healthy = all(health["threads_alive"].values()) and (learner is None or learner["connected"])
    return 0 if healthy else 1
