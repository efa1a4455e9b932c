"""Durable file system steps: fsync a file or a folder, swap a folder in atomically; and
`replace_json` / `read_json`, a small file rewritten atomically for readers in other
processes, and `HeartbeatFile` / `heartbeat_s`, such a file kept up to date by a running
process.

A rename is only durable once the folder that holds it is fsynced, and a file's bytes
only once the file is; the crash-safe writers (buffer segments, learner checkpoints,
dataset commits) are built from these steps.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path


def fsync_file(path: Path) -> None:
    """Flush the bytes of the file at `path` to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush the entries of folder `path` (renames, new and removed files) to disk."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_dir(new: Path, path: Path, backup: Path) -> None:
    """Put folder `new` (its files already fsynced) at `path`, replacing what is there.

    `new` is fsynced, the old `path` renamed to `backup` (a stale `backup` is removed
    first), `new` renamed to `path`, the parent folder fsynced, then `backup` removed. A
    crash at any moment leaves a complete folder at `path` or at `backup`: a `backup` is
    only removed while `path` exists.
    """
    fsync_dir(new)
    if path.exists():
        if backup.exists():
            shutil.rmtree(backup)
        os.rename(path, backup)
    os.rename(new, path)
    fsync_dir(path.parent)
    shutil.rmtree(backup, ignore_errors=True)


def replace_json(path: Path, data: object, *, indent: int | None = None) -> None:
    """Write `data` as JSON to `path` through a temporary file renamed over it, so a reader
    never sees half a file (atomic, not durable: nothing is fsynced)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=indent))
    os.replace(tmp, path)


def read_json(path: Path) -> dict | None:
    """The JSON object in `path`; None when there is none (yet), it cannot be read, or it
    holds something else than an object."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class HeartbeatFile:
    """A JSON file another process watches (`robotrl up`'s probes): every `write` replaces it
    atomically with the caller's data plus `pid`, `monotonic_s` (CLOCK_MONOTONIC, one clock
    for every process of a Linux machine, so a reader tells a stalled writer by its age)
    and `time_s`; `due()` says whether `every_s` seconds have passed since the last write."""

    def __init__(self, path: Path, every_s: float = 0.5, clock: Callable[[], float] = time.monotonic) -> None:
        self.path, self.every_s, self.clock = Path(path), every_s, clock
        self.written_s = -math.inf

    def due(self) -> bool:
        return self.clock() - self.written_s >= self.every_s

    def write(self, data: dict, now: float | None = None) -> None:
        """Replace the file; `now`: the writer's clock reading its data was taken at."""
        now = self.clock() if now is None else now
        replace_json(self.path, {"pid": os.getpid(), "monotonic_s": now, "time_s": time.time(), **data})
        self.written_s = now


def heartbeat_s(data: dict) -> float | None:
    """The `monotonic_s` of a `HeartbeatFile`'s data, None when there is none."""
    seen = data.get("monotonic_s")
    return float(seen) if isinstance(seen, (int, float)) and not isinstance(seen, bool) else None
