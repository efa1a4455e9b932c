"""A bring-up's status as a JSON file (rewritten atomically) and as a compact table.

`LiveTable` shows the table on a terminal, redrawn in place every call; on anything else
(a log file, a pipe) it prints the table only when a role's state or restarts, an arm's
or a camera's state changed, or every `QUIET_PRINT_S` seconds, so a log stays readable.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from robotrl.fsutil import replace_json
from robotrl.report.table import format_table

QUIET_PRINT_S = 30.0
"""Off a terminal: longest time between two printed tables, seconds."""


def write_status(path: Path, status: dict) -> None:
    """Write `status` as JSON to `path` through a temporary file renamed over it, so a
    reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_json(path, status, indent=1)


HEADERS = ("role", "state", "pid", "restarts", "uptime", "quiet", "reports")
ENDED = ("done", "stopped")
"""Role states after its process ended on purpose: its arm and cameras are not marked down."""


def status_table(status: dict) -> str:
    """The status as a header line and one row per role: state, pid, restarts, uptime,
    quiet time and what the role reports; under a role, a short row for its GPU (server,
    learner) and one per camera (arm), with the camera's own state."""
    first = status.get("first_chunk_s")
    head = f"robotrl up: {status['phase']}, {status['uptime_s']:.0f} s" + (
        f"; first chunk after {first:.1f} s" if first is not None else ""
    )
    rows: list[tuple] = []
    for name, role in status["roles"].items():
        quiet = "-" if role["quiet_s"] is None else f"{role['quiet_s']:.1f} s"
        kind = "recorder" if role.get("role") == "recorder" else role["kind"]
        ended = role["state"] in ENDED  # its arm and cameras are not expected to answer
        uptime, text = f"{role['uptime_s']:.0f} s", report_text(kind, role["report"], ended)
        rows.append((name, role["state"], role["pid"] or "-", role["restarts"], uptime, quiet, text))
        rows += [
            (label, "" if ended else state, "", "", "", "", text) for label, state, text in sub_rows(role["report"])
        ]
    return head + "\n" + format_table(HEADERS, rows)


def sub_rows(report: dict) -> list[tuple[str, str, str]]:
    """(label, state, text) of the short rows under a role: its GPU and its cameras."""
    rows = []
    if report.get("gpu"):
        rows.append(("  gpu", "", gpu_text(report["gpu"])))
    for name, cam in (report.get("cameras") or {}).items():
        age = cam.get("frame_age_s")
        rows.append((f"  camera {name}", cam.get("state", ""), f"{cam.get('fps', 0.0):.1f} fps  frame age {_s(age)}"))
    return rows


def report_text(kind: str, report: dict, ended: bool = False) -> str:
    """One short line of what a role of `kind` (a role kind, or "recorder") reports ("-":
    not reported, e.g. a simulated arm's motor temperatures); `ended`: its process ended
    on purpose, so a quiet arm is not marked down."""
    if not report:
        return ""
    if kind == "server":
        learner = report.get("learner_connected")
        return (
            f"version {report.get('version')}  queue {report.get('queued_requests')}  "
            f"batch {_f(report.get('batch_size'), '.1f')}  chunk p50 {_f(report.get('chunk_ms_p50'), '.0f', ' ms')} "
            f"p99 {_f(report.get('chunk_ms_p99'), '.0f', ' ms')}  batches/s {report.get('batches_per_s')}  "
            f"threads {report.get('threads_alive')}  errors {report.get('errors')}"
            + ("" if learner is None else f"  learner {'up' if learner else 'LOST'}")
        )
    if kind == "learner":
        return (
            f"updates {report.get('updates') or 0} ({_f(report.get('updates_per_s'), '.1f', '/s')})  "
            f"version {report.get('version') or 0}  buffer {report.get('transitions') or 0}  "
            f"staleness {_f(report.get('staleness_mean'), '.1f')}  "
            f"intervention {_f(report.get('intervention_rate'), '.0%')}  episodes {report.get('episodes', 0)}"
        )
    if kind == "twin":
        return f"follower bus {report.get('follower_port') or '-'}  scene seed {report.get('seed')}"
    if kind == "recorder":
        return (
            f"recorded {report.get('episodes', 0)}/{report.get('episodes_planned', '?')} episodes  "
            f"frames {report.get('frames', 0)}  discarded {report.get('discarded', 0)}  "
            f"seed {_f(report.get('seed'), 'd')}  {report.get('control_rate_hz', 0.0):.0f} Hz"
        )
    down = "ARM DOWN: " if report.get("arm_state") == "down" and not ended else ""
    return down + (
        f"episodes {report.get('episodes', 0)}/{report.get('episodes_planned', '?')}  "
        f"successes {report.get('successes', 0)}  {report.get('control_rate_hz', 0.0):.0f} Hz  "
        f"missed {report.get('missed_ticks', 0)}  paused {report.get('paused_ticks', 0)}  "
        f"command age {_s(report.get('command_age_s'))}  bus errors {_f(report.get('bus_errors'), 'd')}  "
        f"motors {_f(report.get('temperature_c_max'), '.0f', ' C')} {_f(report.get('voltage_v_min'), '.1f', ' V')}  "
        f"version {report.get('version', -1)}"
    )


def gpu_text(gpu: dict) -> str:
    """A `GpuHealth` in a few words: device, memory used/total (GiB), utilisation."""
    if gpu.get("device", "cpu") == "cpu":
        return "cpu (no GPU)"
    used, total = gpu.get("memory_used_mb"), gpu.get("memory_total_mb")
    memory = "-" if used is None or total is None else f"{used / 1024:.1f}/{total / 1024:.1f} GiB"
    return f"{gpu['device']}  memory {memory}  util {_f(gpu.get('utilization_pct'), '.0f', '%')}"


def _f(value: object, spec: str, unit: str = "") -> str:
    """`value` formatted by `spec` with `unit`; "-" when it is not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    return f"{value:{spec}}{unit}"


def _s(seconds: object) -> str:
    """Seconds as "0.03 s" (two decimals below 10 s, else none); "-" for none."""
    if not isinstance(seconds, (int, float)):
        return "-"
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.0f} s"


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
            shape = (status["phase"], [_shape(r) for r in status["roles"].values()])
            if shape == self._shown and time.monotonic() - self._printed_s < QUIET_PRINT_S:
                return
            self._shown, self._printed_s = shape, time.monotonic()
            self.stream.write(text + "\n\n")
        self.stream.flush()


def _shape(role: dict) -> tuple:
    """What makes a new table worth printing off a terminal: a role's state and restarts,
    its arm's state and its cameras' states."""
    report = role.get("report") or {}
    cameras = tuple(cam.get("state") for cam in (report.get("cameras") or {}).values())
    return role["state"], role["restarts"], report.get("arm_state"), cameras
