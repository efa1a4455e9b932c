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
