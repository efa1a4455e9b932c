"""`LatentCache`: one slow-pathway latent per robot, stamped with the tick it saw
(docs/algorithms.md section 2). The policy server and the stepped `LocalChunkSource`
share it, so a latent ages and refreshes the same way in serving and evaluation.

A robot's latent is encoded afresh on its first request, when the weight version, the
instruction or the episode (ticks go back) changed, or when it is older than the policy
was trained on (`PolicyMetadata.max_latent_age_ticks`, J of `--latent-delay-max`: with
J = 0 every request with images is encoded afresh); `refresh` re-encodes it from newer
images (the server's slow loop, the local source's every-n-requests). Its age is the
request tick minus the latent's tick, 0 without images (the latent of the instruction
alone never ages). Thread-safe: the server's model and slow threads both use it.

Many robots at once (`latents_for`, `refresh_many`): the robots due for a new latent are
encoded together, in one model call when the policy is a `BatchedSlowPolicy`; each latent
still carries its own robot's tick (so its own age) and the weight version of that call.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from robotrl.core.policy import BatchedSlowPolicy, PolicyObservation, SlowFastPolicy

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
        self.max_age_ticks = policy.metadata.max_latent_age_ticks
        self._robots: dict[str, _Robot] = {}
        self._lock = threading.Lock()

    def latent_for(self, robot_id: str, obs: PolicyObservation, version: int) -> tuple[Any, int]:
        """(latent, age in ticks) for `obs` of `robot_id` under weight `version`; encodes
        a fresh latent when the cached one does not fit (see the module docstring)."""
        return self.latents_for([robot_id], [obs], version)[0]

    def latents_for(
        self, robot_ids: list[str], observations: list[PolicyObservation], version: int
    ) -> list[tuple[Any, int]]:
        """(latent, age in ticks) per robot for its observation under weight `version`, in
        order; the robots whose cached latent does not fit are encoded together
        (`refresh_many`). One observation per robot."""
        if len(set(robot_ids)) != len(robot_ids) or len(robot_ids) != len(observations):
            raise ValueError("latents_for: one observation per robot, each robot once")
        with self._lock:
            robots = [self._robots.setdefault(robot_id, _Robot()) for robot_id in robot_ids]
            cached = [robot.latent for robot in robots]
        due = {
            r: o
            for r, o, latent in zip(robot_ids, observations, cached)
            if not _fits(latent, o, version, self.max_age_ticks)
        }
        fresh = self.refresh_many(due, version) if due else {}
        pairs = []
        with self._lock:
            for robot_id, robot, obs, latent in zip(robot_ids, robots, observations, cached):
                latent = fresh.get(robot_id, latent)
                assert latent is not None  # every robot without one was due
                age = obs.tick - latent.tick if obs.images else 0
                robot.ages.append(age)
                pairs.append((latent.value, age))
        return pairs

    def refresh(self, robot_id: str, obs: PolicyObservation, version: int) -> _Latent:
        """Encode `obs` now as `robot_id`'s latent (made by weight `version`)."""
        return self.refresh_many({robot_id: obs}, version)[robot_id]

    def refresh_many(
        self,
        observations: dict[str, PolicyObservation],
        version: int,
        on_error: Callable[[str, Exception], None] | None = None,
    ) -> dict[str, _Latent]:
        """Encode each robot's observation (robot id -> observation) now as its latent, made
        by weight `version` and stamped with that observation's tick; one model call for
        all when the policy is a `BatchedSlowPolicy`, else one each. Returns the new latents
        by robot id. With `on_error`, a failed call is retried robot by robot and each
        robot's own failure goes to `on_error(robot_id, exc)` (that robot keeps its latent)
        instead of raising."""
        try:
            return self._encode(observations, version)
        except Exception as exc:
            if on_error is None:
                raise
            if len(observations) == 1:
                on_error(next(iter(observations)), exc)
                return {}
        fresh: dict[str, _Latent] = {}
        for robot_id, obs in observations.items():
            fresh |= self.refresh_many({robot_id: obs}, version, on_error)
        return fresh

    def _encode(self, observations: dict[str, PolicyObservation], version: int) -> dict[str, _Latent]:
        batch = list(observations.values())
        if isinstance(self.policy, BatchedSlowPolicy):
            values = self.policy.encode_slow_batch(batch)
        else:
            values = [self.policy.encode_slow(obs) for obs in batch]
        latents = [_Latent(value, obs.tick, version, obs.instruction) for value, obs in zip(values, batch, strict=True)]
        with self._lock:
            for robot_id, latent in zip(observations, latents):
                self._robots.setdefault(robot_id, _Robot()).latent = latent
        return dict(zip(observations, latents))

    def ages(self) -> list[int]:
        """Latent ages in ticks of every answered request, all robots."""
        with self._lock:
            return [age for robot in self._robots.values() for age in robot.ages]

    def clear(self) -> None:
        with self._lock:
            self._robots.clear()


def _fits(latent: _Latent | None, obs: PolicyObservation, version: int, max_age_ticks: int | None) -> bool:
    """Whether `latent` may answer `obs` under weight `version`: same weights and
    instruction, the same episode (its tick not ahead of the request's), and, with
    images, no older than `max_age_ticks` (None: any age)."""
    return (
        latent is not None
        and latent.version == version
        and latent.instruction == obs.instruction
        and obs.tick >= latent.tick
        and (max_age_ticks is None or not obs.images or obs.tick - latent.tick <= max_age_ticks)
    )
