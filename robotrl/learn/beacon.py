"""`Beacon`: an episode observer that keeps a small JSON file up to date while the arm
runs, so a supervisor (`robotrl up`) can tell that an actor is alive and what it does;
`read_beacon` reads it back.

The file is rewritten (atomically: a temporary file renamed over it) at most every
`BEACON_EVERY_S` seconds of wall time, and at once when an episode starts or ends and
when the first chunk arrives. Its `monotonic_s` is `time.monotonic()` of the write:
CLOCK_MONOTONIC is one clock for every process of a Linux machine, so the supervisor
compares it with its own `time.monotonic()` to see how long the actor has been quiet.
With a `health` source (the arm's `SafeRobot.health`) each write also carries the arm's
health as `robotrl.core.health.ArmStamps` (last command and newest camera frames as
monotonic times, motor temperatures and voltages, bus errors), so the reader tells a
stalled arm or camera by their age at its own now.

Robot side: no torch, no mujoco.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from robotrl.core.health import ArmHealth, rate_per_s, to_stamps
from robotrl.fsutil import HeartbeatFile, read_json
from robotrl.inference.runner import EpisodeResult, TickEvent

log = logging.getLogger(__name__)

BEACON_EVERY_S = 0.5
"""Longest time between two writes while the loop ticks, seconds."""


class Beacon:
    """Observer writing `path`: robot id, pid, `monotonic_s` and `time_s` of the write,
    episodes ended and successes (this process), the current episode's seed, ticks, paused
    ticks (held for lack of a chunk), intervened ticks and missed ticks (whose work overran
    the control period) since the process started, the last weight version executed (-1:
    none yet), the control rate over the last write period in Hz,
    `first_chunk_monotonic_s` (when the first policy row was executed; None before), and
    the `ArmStamps` keys of `health()` (see the module docstring; a failed health read
    leaves them as they were and never stops the loop)."""

    def __init__(
        self,
        path: Path,
        robot_id: str,
        *,
        every_s: float = BEACON_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        health: Callable[[], ArmHealth] | None = None,
    ) -> None:
        self.path, self.robot_id, self.every_s, self.clock = Path(path), robot_id, every_s, clock
        self.file = HeartbeatFile(self.path, every_s, clock)
        self.health = health
        self.arm: dict = {}
        """The arm's health as last written (`ArmStamps`)."""
        self.missed_ticks = self._missed_before = 0
        self.episodes = self.successes = self.ticks = self.paused_ticks = self.intervened_ticks = 0
        self.seed: int | None = None
        self.version = -1
        self.first_chunk_s: float | None = None
        self._rate_from = (clock(), 0)
        self.control_rate_hz = 0.0
        self.write()

    def on_episode_start(self, seed: int, instruction: str) -> None:
        self.seed = seed
        self.write()

    def on_tick(self, event: TickEvent) -> None:
        record = event.record
        self.ticks += 1
        self.paused_ticks += record.paused
        self.intervened_ticks += record.intervened
        self.missed_ticks = self._missed_before + event.missed_ticks
        if record.version >= 0:
            self.version = record.version
        if self.first_chunk_s is None and record.chunk_id >= 0:
            self.first_chunk_s = self.clock()
            self.write()
        elif self.file.due():
            self.write()

    def on_episode_end(self, result: EpisodeResult) -> None:
        self.episodes += 1
        self.successes += bool(result.success)
        self._missed_before += result.missed_ticks
        self.missed_ticks = self._missed_before
        self.write()

    def write(self) -> None:
        """Rewrite the file now."""
        now = self.clock()
        since, ticks = self._rate_from
        if now - since >= self.every_s:
            self.control_rate_hz = rate_per_s(ticks, self.ticks, now - since)
            self._rate_from = (now, self.ticks)
        self._read_health(now)
        data = {
            "robot_id": self.robot_id,
            "episodes": self.episodes,
            "successes": self.successes,
            "seed": self.seed,
            "ticks": self.ticks,
            "paused_ticks": self.paused_ticks,
            "intervened_ticks": self.intervened_ticks,
            "missed_ticks": self.missed_ticks,
            "version": self.version,
            "control_rate_hz": round(self.control_rate_hz, 2),
            "first_chunk_monotonic_s": self.first_chunk_s,
            **self.arm,
        }
        self.file.write(data, now)

    def _read_health(self, now: float) -> None:
        """`self.arm` from `health()` taken at `now`; unchanged when that fails."""
        if self.health is None:
            return
        try:
            self.arm = dict(to_stamps(self.health(), now))
        except Exception:  # health must never stop the arm
            log.exception("the arm's health could not be read; the beacon keeps its last reading")


def read_beacon(path: Path) -> dict | None:
    """The beacon at `path`, or None when there is none (yet) or it cannot be read."""
    return read_json(path)
