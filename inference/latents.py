"""`LatentCache`: one slow-pathway latent per robot, stamped with the tick it saw
(docs/algorithms.md section 2). The policy server and the stepped `LocalChunkSource`
share it, so a latent ages and refreshes the same way in serving and evaluation.

A robot's latent is encoded afresh on its first request, when the weight version, the
instruction or the episode (ticks go back) changed; `refresh` re-encodes it from newer
images (the server's slow loop, the local source's every-n-requests). Its age is the
request tick minus the latent's tick, 0 without images (the latent of the instruction
alone never ages). Thread-safe: the server's model and slow threads both use it.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from robotrl.core.policy import PolicyObservation, SlowFastPolicy

AGES_KEPT = 1000
"""Latent ages kept per robot for the benchmarks' age histogram."""


@dataclass
class _Latent:
    value: Any
    tick: int
    version: int
    """Weight version that computed `value`."""
    instruction: str


@dataclass
class _Robot:
    latent: _Latent | None = None
    ages: deque[int] = field(default_factory=lambda: deque(maxlen=AGES_KEPT))


class LatentCache:
    """The newest latent of each robot for `policy`."""

    def __init__(self, policy: SlowFastPolicy) -> None:
        self.policy = policy
        self._robots: dict[str, _Robot] = {}
        self._lock = threading.Lock()

    def latent_for(self, robot_id: str, obs: PolicyObservation, version: int) -> tuple[Any, int]:
        """(latent, age in ticks) for `obs` of `robot_id` under weight `version`; encodes
        a fresh latent when the cached one does not fit (see the module docstring)."""
        with self._lock:
            robot = self._robots.setdefault(robot_id, _Robot())
            latent = robot.latent
        if (
            latent is None
            or latent.version != version
            or latent.instruction != obs.instruction
            or obs.tick < latent.tick
        ):
            latent = self.refresh(robot_id, obs, version)
        age = obs.tick - latent.tick if obs.images else 0
        with self._lock:
            robot.ages.append(age)
        return latent.value, age

    def refresh(self, robot_id: str, obs: PolicyObservation, version: int) -> _Latent:
        """Encode `obs` now as `robot_id`'s latent (made by weight `version`)."""
        latent = _Latent(self.policy.encode_slow(obs), obs.tick, version, obs.instruction)
        with self._lock:
            self._robots.setdefault(robot_id, _Robot()).latent = latent
        return latent

    def ages(self) -> list[int]:
        """Latent ages in ticks of every answered request, all robots."""
        with self._lock:
            return [age for robot in self._robots.values() for age in robot.ages]

    def clear(self) -> None:
        with self._lock:
            self._robots.clear()
