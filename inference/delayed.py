"""Injected inference delay: a server whose replies take d control ticks.

The latency benchmark's real-time mode (`robotrl.bench.realtime`) and `robotrl serve
--delay-ticks` give the `PolicyServer` a `ReplyHold`, so an arm (simulated, the twin or a
real one) can be run under the delay a slower model or a remote GPU would give it, on the
deploy path itself: each reply is held until half a tick before the d-th control tick
after its request arrived, so the executor takes it in at tick t + d, as in stepped mode.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DelaySpec:
    """Injected inference delay d in control ticks: fixed (low == high) or drawn
    uniformly from {low..high} for every request."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 0 <= self.low <= self.high:
            raise ValueError(f"delay needs 0 <= low <= high ticks, got {self.low}..{self.high}")

    @classmethod
    def parse(cls, text: str) -> DelaySpec:
        """ "4" -> fixed 4 ticks; "2-6" -> uniform on {2..6}."""
        low, _, high = text.strip().partition("-")
        return cls(int(low), int(high or low))

    @property
    def fixed(self) -> bool:
        return self.low == self.high

    @property
    def label(self) -> str:
        return str(self.low) if self.fixed else f"U{{{self.low}..{self.high}}}"

    @property
    def mean_ticks(self) -> float:
        return (self.low + self.high) / 2

    def draw(self, rng: np.random.Generator) -> int:
        return int(rng.integers(self.low, self.high + 1))


class ReplyHold:
    """When a served reply may go out under an injected delay: (d - 1/2) control ticks
    after its request arrived at the server, d drawn per model call (a batch of several
    robots' requests is one call: one d for all of them). The policy's own compute, its
    slow pathway's encoding and the wait for a model worker count toward the hold, so the
    executor takes the reply in at tick t + d, as in stepped mode, unless the model itself
    takes longer."""

    def __init__(self, delay: DelaySpec, dt_s: float, seed: int) -> None:
        self.delay, self.dt_s = delay, dt_s
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()  # model workers draw side by side

    @property
    def mean_s(self) -> float:
        """Seconds from arrival to reply, on average over the draws."""
        return max(self.delay.mean_ticks - 0.5, 0.0) * self.dt_s

    def draw_ns(self) -> int:
        """Nanoseconds from a request's arrival to its reply, for one model call."""
        with self._lock:
            d = self.delay.draw(self._rng)
        return round(max(d - 0.5, 0.0) * self.dt_s * 1e9)
