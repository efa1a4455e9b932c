"""What each role of a bring-up reports, and when it last did: one probe per role.

A probe's `check()` never blocks (it is called several times a second by the supervisor)
and returns `(seen_s, report)`: the `time.monotonic()` at which the role last answered
(None: not yet) and a small JSON-able dict of what it says about itself.

- `HealthProbe`: an inference server, asked for its health (`HealthRequest`, the wire's
  health request of `robotrl health`) every `every_s`; it answers from its I/O thread.
- `HelloProbe`: any `ServerSocket` peer (the learner's transitions socket): answered
  hellos and heartbeats; plus the learner's own files (`health.json`, `updates.csv`,
  `episodes.csv`: `learner_report`).
- `BeaconProbe`: an actor or deploy client, through the beacon file it rewrites while its
  arm runs (`robotrl.learn.beacon`) and its per-episode CSV logs; the arm's and cameras'
  ages are taken at the probe's own now (`robotrl.core.health.arm_report`), so an arm
  that stops commanding or a camera that stops delivering is down after `STALE_S` even
  when its beacon is no longer rewritten.
- `TwinProbe`: a `robotrl twin` through the file its control loop rewrites (`--info`).
- `RecorderProbe`: a recorder (`robotrl record --beacon`) through its beacon file
  (`robotrl.record.beacon`) and the episodes its dataset holds.
"""

from __future__ import annotations

import csv
import io
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from robotrl.core.errors import WireError
from robotrl.core.health import LEARNER_HEALTH_FILE, arm_report, intervention_rate
from robotrl.fsutil import heartbeat_s, read_json
from robotrl.learn.beacon import read_beacon
from robotrl.record.commit import saved_episodes
from robotrl.wire.client import ClientSocket
from robotrl.wire.keys import ClientKeys
from robotrl.wire.messages import HealthReply, HealthRequest

HEALTH_EVERY_S = 0.5
"""Seconds between two health requests to a server."""
TAIL_BYTES = 8192
"""How much of the end of a CSV log is read for its last row."""
INTERVENTION_WINDOW = 20
"""Episodes (the latest) over which a learner's intervention rate is taken."""


class Probe(Protocol):
    """How a supervisor hears from one role."""

    def check(self) -> tuple[float | None, dict]:
        """(monotonic seconds when the role last answered, or None; what it reports)."""
        ...

    def close(self) -> None: ...


class HealthProbe:
    """An inference server's health, asked every `every_s` seconds over its own socket."""

    def __init__(
        self,
        endpoint: str,
        *,
        curve: ClientKeys | None = None,
        every_s: float = HEALTH_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = ClientSocket(endpoint, role="monitor", curve=curve)
        self.every_s, self.clock = every_s, clock
        self.seen_s: float | None = None
        self.report: dict = {}
        self._asked_s = -every_s

    def check(self) -> tuple[float | None, dict]:
        try:
            while (msg := self.client.poll(0.0)) is not None:
                if isinstance(msg, HealthReply):
                    self.seen_s, self.report = self.clock(), health_summary(msg.health)
            now = self.clock()
            if self.client.ready and now - self._asked_s >= self.every_s:
                self._asked_s = now
                self.client.send(HealthRequest(), timeout_s=0.0)
        except WireError:
            pass  # not there (yet, or any more): the client reconnects on the next poll
        return self.seen_s, self.report

    def close(self) -> None:
        self.client.close()


def health_summary(health: dict) -> dict:
    """The parts of `PolicyServer.health()` a status table shows: version, batches/s, queue
    depth (queued_requests), mean batch size, chunk_ms_p50 / chunk_ms_p99 (ms from a
    request's arrival to its reply), threads alive, errors, refused, learner connection,
    gpu (`GpuHealth` or None)."""
    threads = health.get("threads_alive", {})
    learner = health.get("learner")
    chunk_ms = health.get("chunk_ms") or {}
    return {
        "version": health.get("version"),
        "batches_per_s": round(float(health.get("batches_per_s", 0.0)), 2),
        "queued_requests": health.get("queued_requests"),
        "batch_size": round(float(health.get("batch_size", 0.0)), 2),
        "chunk_ms_p50": _rounded(chunk_ms.get("p50")),
        "chunk_ms_p99": _rounded(chunk_ms.get("p99")),
        "gpu": health.get("gpu"),
        "threads_alive": f"{sum(bool(a) for a in threads.values())}/{len(threads)}",
        "errors": sum(health.get("errors", {}).values()),
        "refused": health.get("refused"),
        "learner_connected": None if learner is None else bool(learner.get("connected")),
    }


class HelloProbe:
    """A peer that answers hellos and heartbeats (`ServerSocket`), e.g. the learner's
    transitions socket. It counts as answering only once the `ready` files exist too (the
    learner's served checkpoint); `report()` says the rest (e.g. `learner_report`)."""

    def __init__(
        self,
        endpoint: str,
        *,
        curve: ClientKeys | None = None,
        ready: Sequence[Path] = (),
        report: Callable[[], dict] = dict,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = ClientSocket(endpoint, role="monitor", curve=curve)
        self.ready, self.report, self.clock = tuple(ready), report, clock
        self.seen_s: float | None = None

    def check(self) -> tuple[float | None, dict]:
        try:
            while self.client.poll(0.0) is not None:
                pass  # nothing but hello replies and heartbeat acks is expected
        except WireError:
            pass
        if self.client.ready and all(path.exists() for path in self.ready):
            self.seen_s = self.clock()
        return self.seen_s, self.report()

    def close(self) -> None:
        self.client.close()


def learner_report(out: Path) -> dict:
    """A learner's progress from its run folder: updates, updates per second, weight
    version, committed transitions (`transitions`, the buffer's online part),
    `buffer_samplable`, `staleness_mean` (versions) and `gpu` from its live `health.json`
    (`LearnerHealth`), else from the last row of updates.csv; the episodes it took in (rows
    of episodes.csv) and their `intervention_rate` (share of ticks, over the last
    `INTERVENTION_WINDOW` episodes; None before the first)."""
    last = csv_last_row(out / "updates.csv") or {}
    report: dict = {key: _number(last.get(key)) for key in ("updates", "updates_per_s", "version", "transitions")}
    report |= {"buffer_samplable": None, "staleness_mean": _number(last.get("staleness_mean")), "gpu": None}
    health = read_json(out / LEARNER_HEALTH_FILE) or {}
    for key in ("updates", "updates_per_s", "version", "buffer_samplable", "staleness_mean", "gpu"):
        if key in health:
            report[key] = health[key]
    if "buffer_transitions" in health:
        report["transitions"] = health["buffer_transitions"]
    rows = csv_rows(out / "episodes.csv")
    recent = rows[-INTERVENTION_WINDOW:]
    rate = intervention_rate(
        [_number(r.get("intervention_ticks")) or 0 for r in recent], [_number(r.get("ticks")) or 0 for r in recent]
    )
    report["episodes"], report["intervention_rate"] = len(rows), _rounded(rate, 4)
    return report


def _rounded(value: object, digits: int = 2) -> float | None:
    return round(float(value), digits) if isinstance(value, (int, float)) else None


def _number(text: str | None) -> float | int | None:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return int(value) if value is not None and value.is_integer() else value


class BeaconProbe:
    """An arm's process through its beacon file; `logs(): paths` are its episode CSVs of
    every start so far (rows = episodes ended); `clock` is `time.monotonic` (the beacon's
    clock) but in tests."""

    def __init__(
        self,
        beacon: Path,
        logs: Callable[[], Sequence[Path]],
        episodes: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.beacon, self.logs, self.episodes, self.clock = beacon, logs, episodes, clock

    def check(self) -> tuple[float | None, dict]:
        data = read_beacon(self.beacon) or {}
        ended = successes = 0
        for path in self.logs():
            for row in csv_rows(path):
                ended += 1
                successes += row.get("success") in ("1", "True", "true")
        first = data.get("first_chunk_monotonic_s")
        report = {
            "episodes": ended,
            "episodes_planned": self.episodes,
            "successes": successes,
            "ticks": data.get("ticks", 0),
            "paused_ticks": data.get("paused_ticks", 0),
            "intervened_ticks": data.get("intervened_ticks", 0),
            "missed_ticks": data.get("missed_ticks", 0),
            "version": data.get("version", -1),
            "control_rate_hz": data.get("control_rate_hz", 0.0),
            "first_chunk_monotonic_s": first,
            **arm_report(data, self.clock()),
        }
        return heartbeat_s(data), report

    def close(self) -> None:
        pass


class TwinProbe:
    """A twin through its `--info` file (`robotrl.commands.twin.InfoFile`): seen at its
    `monotonic_s`; reports its follower bus and scene seed."""

    def __init__(self, info: Path) -> None:
        self.info = info

    def check(self) -> tuple[float | None, dict]:
        data = read_json(self.info) or {}
        report = {"follower_port": data.get("follower_port"), "seed": data.get("seed")}
        return heartbeat_s(data), report

    def close(self) -> None:
        pass


class RecorderProbe:
    """A recorder through its beacon, seen at its `monotonic_s`: the episodes its dataset
    holds (`saved_episodes`, as a restart counts them) of the `episodes` wanted, and the
    beacon's frames saved and episodes discarded (this start), current seed and control
    rate (Hz)."""

    def __init__(self, beacon: Path, dataset: Path, episodes: int) -> None:
        self.beacon, self.dataset, self.episodes = beacon, dataset, episodes

    def check(self) -> tuple[float | None, dict]:
        data = read_json(self.beacon) or {}
        report = {
            "episodes": saved_episodes(self.dataset),
            "episodes_planned": self.episodes,
            "frames": data.get("frames", 0),
            "discarded": data.get("discarded", 0),
            "seed": data.get("seed"),
            "control_rate_hz": data.get("control_rate_hz", 0.0),
        }
        return heartbeat_s(data), report

    def close(self) -> None:
        pass


def csv_rows(path: Path) -> list[dict[str, str]]:
    """Every row of a CSV log, [] when it does not exist (yet); read again only when its
    size or modification time changed (probes ask several times a second)."""
    try:
        stat = os.stat(path)
        key = (stat.st_size, stat.st_mtime_ns)
        cached = _ROWS.get(str(path))
        if cached is not None and cached[0] == key:
            return cached[1]
        with Path(path).open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return []
    _ROWS[str(path)] = (key, rows)
    return rows


_ROWS: dict[str, tuple[tuple[int, int], list[dict[str, str]]]] = {}
"""csv_rows' last reading of each file: (size, mtime ns) and its rows."""


def csv_last_row(path: Path) -> dict[str, str] | None:
    """The last row of a CSV log with a header, reading the header and the file's last
    `TAIL_BYTES` only; None when it does not exist or has no row."""
    try:
        with Path(path).open("rb") as f:
            header = f.readline()
            size = f.seek(0, io.SEEK_END)
            f.seek(max(len(header), size - TAIL_BYTES))
            tail = f.read()
    except OSError:
        return None
    lines = [line for line in tail.decode(errors="replace").splitlines() if line.strip()]
    if not header.strip() or not lines:
        return None
    return next(csv.DictReader(io.StringIO(header.decode(errors="replace") + lines[-1] + "\n")), None)
