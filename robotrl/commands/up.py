"""`robotrl up FLEET.toml`: start every role the fleet file declares on this machine and
supervise them: the learner of `[learn]`, the inference server of `[serve]` (on the
fleet's GPU for the role), one process per arm with the deploy_client or actor role, and
the recorder of each robot with the recorder role (`[robots.NAME.record]`; an arm that
also runs a policy records first). With `--ray` each role runs instead as a Ray actor
that Ray places (a robot's roles on the node declaring the resource `robot_NAME`, a GPU
role on a node with a free GPU: `robotrl.bringup.ray_cluster`), and the endpoints are
those nodes' IPs.
A role that dies is restarted with exponential backoff (0.5 s doubling to 4 s); the
status goes to a JSON file every second and to a live table. Ctrl-C or SIGTERM stops
the arms' roles first, then the server, then the learner (final checkpoint), exit 0; a
second one kills what is left. When every arm has run its episodes and every recorder
recorded its dataset, `up` stops the rest and exits 0 (1 if a role failed: it died 5
times in a row within 10 s of its start).
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from robotrl.bringup.ray_cluster import RayHandle
    from robotrl.bringup.supervisor import RoleSpec
    from robotrl.fleet import Fleet

OUT_ROOT = Path("outputs/up")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("fleet", type=Path, help="fleet file (TOML), e.g. examples/fleet-sim.toml")
    parser.add_argument(
        "--out", type=Path, help=f"run folder: configs, logs, learner/, buffer/ (default: {OUT_ROOT}/<fleet file name>)"
    )
    parser.add_argument(
        "--status", type=Path, help="JSON status file, rewritten every second (default: OUT/status.json)"
    )
    parser.add_argument("--quiet", action="store_true", help="no live status table on stdout")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out (the learner resumes, arms run the episodes left)",
    )
    parser.add_argument(
        "--ray",
        action="store_true",
        help="run each role as a Ray actor placed by Ray: an arm's role on the node with the resource "
        "robot_NAME, the server and learner on nodes with free GPUs (README: Ray)",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="with --ray: the cluster's head, HOST:PORT (default: auto, the cluster started on this machine "
        "or $RAY_ADDRESS)",
    )


def run(args: argparse.Namespace) -> int:
    from robotrl.bringup.plan import STATUS_FILE, plan_bringup
    from robotrl.core.errors import UserError
    from robotrl.fleet import load_fleet

    if args.ray_address and not args.ray:
        raise UserError("--ray-address is for --ray: add --ray")
    fleet = load_fleet(args.fleet)
    out: Path = args.out or OUT_ROOT / args.fleet.stem
    status_path: Path = args.status or out / STATUS_FILE
    placed = _place(fleet, args.ray_address or "auto") if args.ray else None
    try:
        bringup = plan_bringup(fleet, out, resume=args.resume, hosts=placed)
        wiring = "  ".join(f"{name} {endpoint}" for name, endpoint in bringup.endpoints.items()) or "none"
        print(
            f"robotrl up {args.fleet}: {len(bringup.roles)} roles, run folder {out}, status {status_path}", flush=True
        )
        print(f"endpoints: {wiring}", flush=True)
        extra = {"fleet": str(args.fleet), "run": str(out), "endpoints": bringup.endpoints}
        spawners = None if placed is None else _spawners(bringup.roles, placed)
        code = _supervise(bringup.roles, spawners, status_path, extra, quiet=args.quiet)
    finally:
        if placed is not None:
            from robotrl.bringup.ray_cluster import release

            release(placed)
    print(f"robotrl up: stopped (exit {code}); logs in {out}", flush=True)
    return code


def _place(fleet: Fleet, address: str) -> dict[str, RayHandle]:
    """Join the Ray cluster at `address` and place an actor per role; prints where each runs."""
    from robotrl.bringup.ray_cluster import connect, place

    connect(address)
    placed = place(fleet, Path.cwd())
    for name, handle in placed.items():
        node = handle.node
        print(f"ray: {name} on node {node['id'][:8]} ({node['ip']}, {node['hostname']})", flush=True)
    return placed


def _spawners(roles: list[RoleSpec], placed: dict[str, RayHandle]) -> dict[str, RayHandle]:
    """Each role's Ray actor: its own, or for a role of a robot ("robots.NAME.twin",
    "robots.NAME.record") the robot's, so it runs on the node that owns the arm."""
    owner = {role.name: ".".join(role.name.split(".")[:2]) for role in roles}
    return {name: placed[robot] for name, robot in owner.items() if robot in placed}


def _supervise(
    roles: list[RoleSpec], spawners: dict[str, RayHandle] | None, status_path: Path, extra: dict, *, quiet: bool
) -> int:
    """Run the supervisor until it ends; the status to `status_path` (with `extra`) and,
    unless `quiet`, a live table. Ctrl-C / SIGTERM stops it in order, a second one hurries."""
    from robotrl.bringup.status import LiveTable, write_status
    from robotrl.bringup.supervisor import Supervisor

    table = None if quiet else LiveTable()

    def on_status(status: dict) -> None:
        write_status(status_path, {**extra, **status})
        if table is not None:
            table.show(status)

    stop, hurry = threading.Event(), threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: (hurry if stop.is_set() else stop).set()) for sig in _SIGNALS}
    try:
        return Supervisor(roles, spawners=spawners).run(stop, on_status, hurry=hurry)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_SIGNALS = (signal.SIGINT, signal.SIGTERM)
