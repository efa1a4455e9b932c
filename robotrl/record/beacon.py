"""`RecordBeacon`: a recording's observer (`robotrl.record.loop.RecordObserver`) that keeps
a small JSON file up to date while it records (`robotrl record --beacon PATH`), so a
supervisor (`robotrl up`) can tell that a recorder is alive and how far it is.

The file is rewritten atomically (`robotrl.fsutil.replace_json`) at most every
`BEACON_EVERY_S` seconds while the loop ticks, and at once when an episode starts or
ends; the first write is at the first episode's start (after the dataset is opened). Its
`monotonic_s` is `time.monotonic()` of the write, one clock for every process of a Linux
machine, as the actor's beacon (`robotrl.learn.beacon`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

from robotrl.core.health import rate_per_s
from robotrl.fsutil import HeartbeatFile

BEACON_EVERY_S = 0.5
"""Longest time between two writes while the loop ticks, seconds."""


class RecordBeacon:
    """Observer writing `path`: pid, `monotonic_s` and `time_s` of the write, episodes
    saved and discarded by this process, frames saved, control ticks run (resets and
    discarded episodes included), the current episode's seed (None before the first) and
    its control rate (its ticks per second since it started, Hz; faster than the arm's
    rate on a stepped simulated arm)."""

    def __init__(self, path: Path, *, every_s: float = BEACON_EVERY_S, clock: Callable[[], float] = time.monotonic):
        self.path, self.clock = Path(path), clock
        self.file = HeartbeatFile(self.path, every_s, clock)
        self.episodes = self.discarded = self.frames = self.ticks = 0
        self.seed: int | None = None
        self.control_rate_hz = 0.0
        self._episode_ticks = 0
        self._episode_start_s = -math.inf
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def on_episode_start(self, seed: int) -> None:
        self.seed, self._episode_ticks, self._episode_start_s = seed, 0, self.clock()
        self.write()

    def on_tick(self) -> None:
        now = self.clock()
        self.ticks += 1
        self._episode_ticks += 1
        self.control_rate_hz = rate_per_s(0, self._episode_ticks, now - self._episode_start_s)
        if self.file.due():
            self.write()

    def on_episode_end(self, saved: bool) -> None:
        if saved:
            self.episodes += 1
            self.frames += self._episode_ticks
        else:
            self.discarded += 1
        self.write()

    def write(self) -> None:
        """Rewrite the file now."""
        data = {
            "episodes": self.episodes,
            "discarded": self.discarded,
            "frames": self.frames,
            "ticks": self.ticks,
            "seed": self.seed,
            "control_rate_hz": round(self.control_rate_hz, 2),
        }
        self.file.write(data)
