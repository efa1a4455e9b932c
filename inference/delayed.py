"""Injected inference delay: a policy whose replies take d control ticks.

The latency benchmark's real-time mode (`robotrl.bench.realtime`) and `robotrl serve
--delay-ticks` wrap the served policy in `delayed(...)`, so an arm (simulated, the twin or
a real one) can be run under the delay a slower model or a remote GPU would give it, on
the deploy path itself: the reply is held until half a tick before the d-th control tick
after the request, so the executor takes it in at tick t + d, as in stepped mode.
"""

from __future__ import annotations

import time
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


class DelayedPolicy:
    """A `ChunkPolicy` whose reply is due (d - 1/2) * `dt_s` after the call (or when its own
    compute ends, if later), d drawn from `delay` (seeded) per call: half a tick before the
    d-th tick after the request, so the executor takes it in at tick t + d, as in stepped
    mode. A batch of several robots' requests is one call: one d for all of them."""

    def __init__(self, policy, delay: DelaySpec, dt_s: float, seed: int) -> None:
        self.policy, self.delay, self.dt_s = policy, delay, dt_s
        self._rng = np.random.default_rng(seed)

    @property
    def metadata(self):
        return self.policy.metadata

    def predict_chunk(self, obs, *latent_and_age):
        return self.predict_chunks([obs], *([value] for value in latent_and_age))[0]

    def predict_chunks(self, observations, *latents_and_ages):
        from robotrl.core.policy import BatchedPolicy

        done_s = time.perf_counter() + max(self.delay.draw(self._rng) - 0.5, 0.0) * self.dt_s
        if isinstance(self.policy, BatchedPolicy):
            chunks = self.policy.predict_chunks(observations, *latents_and_ages)
        else:
            chunks = [self.policy.predict_chunk(*args) for args in zip(observations, *latents_and_ages)]
        time.sleep(max(0.0, done_s - time.perf_counter()))
        return chunks

    def reset(self) -> None:
        self.policy.reset()


class DelayedSlowFastPolicy(DelayedPolicy):
    """A `DelayedPolicy` of a `SlowFastPolicy` that stays one: the server keeps its latents
    (`LatentCache`, the slow pathway's refresh rate) as it does for the policy deployed."""

    def encode_slow(self, obs):
        return self.policy.encode_slow(obs)


def delayed(policy, delay: DelaySpec, dt_s: float, seed: int) -> DelayedPolicy:
    """`policy` whose replies take `delay` ticks, with its slow pathway when it has one."""
    from robotrl.core.policy import SlowFastPolicy

    wrapper = DelayedSlowFastPolicy if isinstance(policy, SlowFastPolicy) else DelayedPolicy
    return wrapper(policy, delay, dt_s, seed)
