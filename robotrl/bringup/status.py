"""A bring-up's status as a JSON file (rewritten atomically) and as a compact table.

`LiveTable` shows the table on a terminal, redrawn in place every call; on anything else
(a log file, a pipe) it prints the table only when a role's state or restarts changed,
or every `QUIET_PRINT_S` seconds, so a log stays readable.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TextIO

from robotrl.report.table import format_table

QUIET_PRINT_S = 30.0
"""Off a terminal: longest time between two printed tables, seconds."""


def write_status(path: Path, status: dict) -> None:
    """Write `status` as JSON to `path` through a temporary file renamed over it, so a
    reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(status, indent=1, sort_keys=False))
    os.replace(tmp, path)


def status_table(status: dict) -> str:
    """The status as a header line and one row per role: state, pid, restarts, uptime,
    quiet time and what the role reports."""
    first = status.get("first_chunk_s")
    head = f"robotrl up: {status['phase']}, {status['uptime_s']:.0f} s" + (
        f"; first chunk after {first:.1f} s" if first is not None else ""
    )
    rows = [
        (
            name,
            role["state"],
            role["pid"] or "-",
            role["restarts"],
            f"{role['uptime_s']:.0f} s",
            "-" if role["quiet_s"] is None else f"{role['quiet_s']:.1f} s",
            report_text(role["kind"], role["report"]),
        )
        for name, role in status["roles"].items()
    ]
    return head + "\n" + format_table(("role", "state", "pid", "restarts", "uptime", "quiet", "reports"), rows)


def report_text(kind: str, report: dict) -> str:
    """One short line of what a role reports."""
    if not report:
        return ""
    if kind == "server":
        learner = report.get("learner_connected")
        return (
            f"version {report.get('version')}  batches/s {report.get('batches_per_s')}  "
            f"queued {report.get('queued_requests')}  threads {report.get('threads_alive')}  "
            f"errors {report.get('errors')}" + ("" if learner is None else f"  learner {'up' if learner else 'LOST'}")
        )
    if kind == "learner":
        return (
            f"updates {report.get('updates') or 0}  version {report.get('version') or 0}  "
            f"episodes {report.get('episodes', 0)}  transitions {report.get('transitions') or 0}"
        )
    return (
        f"episodes {report.get('episodes', 0)}/{report.get('episodes_planned', '?')}  "
        f"successes {report.get('successes', 0)}  {report.get('control_rate_hz', 0.0):.0f} Hz  "
        f"paused {report.get('paused_ticks', 0)}  version {report.get('version', -1)}"
    )


class LiveTable:
    """Shows `status_table` on `stream` (see the module docstring)."""

    def __init__(self, stream: TextIO = sys.stdout) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self._lines = 0
        self._shown: object = None
        self._printed_s = 0.0

    def show(self, status: dict) -> None:
        text = status_table(status)
        if self.tty:
            if self._lines:
                self.stream.write(f"\x1b[{self._lines}F\x1b[J")  # back to the table's first line, clear below
            self.stream.write(text + "\n")
            self._lines = text.count("\n") + 1
        else:
            shape = (status["phase"], [(r["state"], r["restarts"]) for r in status["roles"].values()])
            if shape == self._shown and time.monotonic() - self._printed_s < QUIET_PRINT_S:
                return
            self._shown, self._printed_s = shape, time.monotonic()
            self.stream.write(text + "\n\n")
        self.stream.flush()
