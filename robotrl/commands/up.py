"""`robotrl up FLEET.toml`: start every role the fleet file declares on this machine and
supervise them: the learner of `[learn]`, the inference server of `[serve]` (on the
fleet's GPU for the role) and one process per arm with the deploy_client or actor role.
A role that dies is restarted with exponential backoff (0.5 s doubling to 4 s); the
status goes to a JSON file every second and to a live table. Ctrl-C or SIGTERM stops
the arms' roles first, then the server, then the learner (final checkpoint), exit 0; a
second one kills what is left. When every arm has run its episodes, `up` stops the rest
and exits 0 (1 if a role failed: it died 5 times in a row within 10 s of its start).
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

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


def run(args: argparse.Namespace) -> int:
    from robotrl.bringup.plan import STATUS_FILE, plan_bringup
    from robotrl.bringup.status import LiveTable, write_status
    from robotrl.bringup.supervisor import Supervisor
    from robotrl.fleet import load_fleet

    fleet = load_fleet(args.fleet)
    out: Path = args.out or OUT_ROOT / args.fleet.stem
    bringup = plan_bringup(fleet, out, resume=args.resume)
    status_path: Path = args.status or out / STATUS_FILE
    for line in bringup.skipped:
        print(line, flush=True)
    wiring = "  ".join(f"{name} {endpoint}" for name, endpoint in bringup.endpoints.items())
    print(f"robotrl up {args.fleet}: {len(bringup.roles)} roles, run folder {out}, status {status_path}", flush=True)
    print(f"endpoints: {wiring}", flush=True)
    table = None if args.quiet else LiveTable()
    extra = {"fleet": str(args.fleet), "run": str(out), "endpoints": bringup.endpoints}

    def on_status(status: dict) -> None:
        write_status(status_path, {**extra, **status})
        if table is not None:
            table.show(status)

    stop, hurry = threading.Event(), threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: (hurry if stop.is_set() else stop).set()) for sig in _SIGNALS}
    try:
        code = Supervisor(bringup.roles).run(stop, on_status, hurry=hurry)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"robotrl up: stopped (exit {code}); logs in {out}", flush=True)
    return code


_SIGNALS = (signal.SIGINT, signal.SIGTERM)
