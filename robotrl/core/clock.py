"""Clocks: wall time for real robots, a simulated clock for stepped runs and tests."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds."""
        ...

    def sleep(self, duration_s: float) -> None: ...


class WallClock:
    """`time.monotonic()`; `sleep` really waits."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, duration_s: float) -> None:
        if duration_s > 0:
            time.sleep(duration_s)


class SimClock:
    """A clock that only moves when told: `sleep` and `advance` add to `now()`."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now_s = float(start_s)

    def now(self) -> float:
        return self._now_s

    def sleep(self, duration_s: float) -> None:
        self.advance(duration_s)

    def advance(self, duration_s: float) -> None:
        if duration_s < 0:
            raise ValueError("a clock cannot go backwards")
        self._now_s += duration_s


class PacedSimClock(SimClock):
    """A `SimClock` that runs no faster than `speed` x real time: `advance` also waits
    until the wall time since the start has caught up with simulated time / `speed`.

    Slow motion for rehearsals: beside a stepped arm at speed 0.25, a learner gets 4 wall
    seconds per simulated second, as a learner 4x faster would beside a real-time arm.
    When the work itself is slower than that, the schedule restarts from now rather than
    bursting to catch up (as `Rate` does)."""

    def __init__(self, speed: float, start_s: float = 0.0) -> None:
        if not 0 < speed <= 1:
            raise ValueError("speed must be in (0, 1]: a fraction of real time")
        super().__init__(start_s)
        self.speed = speed
        self._anchor = (time.monotonic(), self.now())

    def advance(self, duration_s: float) -> None:
        super().advance(duration_s)
        wall_anchor_s, sim_anchor_s = self._anchor
        wait_s = wall_anchor_s + (self.now() - sim_anchor_s) / self.speed - time.monotonic()
        if wait_s > 0:
            time.sleep(wait_s)
        else:
            self._anchor = (time.monotonic(), self.now())


class Rate:
    """Paces a loop at `rate_hz` on `clock` and counts overruns.

    With a `SimClock`, `sleep()` advances time exactly to the next tick; with a
    `WallClock` it waits. A tick whose work took longer than the period is an overrun:
    the schedule restarts from now instead of bursting to catch up.
    """

    def __init__(self, clock: Clock, rate_hz: float) -> None:
        if rate_hz <= 0:
            raise ValueError("rate_hz must be positive")
        self.clock = clock
        self.period_s = 1.0 / rate_hz
        self.overruns = 0
        self._next_s = clock.now() + self.period_s

    def sleep(self) -> None:
        now = self.clock.now()
        if now > self._next_s + 1e-9:
            self.overruns += 1
            self._next_s = now + self.period_s
            return
        self.clock.sleep(self._next_s - now)
        self._next_s += self.period_s

    def restart(self) -> None:
        self._next_s = self.clock.now() + self.period_s
