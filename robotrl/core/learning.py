"""The learner's two partners: the `Buffer` it samples and the `WeightPublisher` it
hands new weights to (docs/algorithms.md section 3).

The buffer's batch and sample types live in `robotrl.buffer` (named here for the type
checker only, so core imports nothing above it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from robotrl.buffer.episode import Episode
    from robotrl.buffer.sampler import ChunkSample, TransitionSample
    from robotrl.wire.messages import TransitionBatch


@runtime_checkable
class Sampler(Protocol):
    """What a learning algorithm samples its batches from (docs/algorithms.md section 3):
    online rows mixed with demonstrations, each with its staleness."""

    def sample_transitions(
        self, batch_size: int, learner_version: int, rng: np.random.Generator
    ) -> TransitionSample: ...

    def sample_chunks(
        self, batch_size: int, horizon: int, learner_version: int, rng: np.random.Generator
    ) -> ChunkSample: ...


@runtime_checkable
class Buffer(Sampler, Protocol):
    """Crash-safe online transitions plus demonstrations (`robotrl.buffer.OnlineBuffer`)."""

    @property
    def committed_transitions(self) -> int:
        """Transitions of committed (finished, fsynced) episodes."""
        ...

    @property
    def committed_episodes(self) -> int: ...

    def __len__(self) -> int:
        """Transitions that can be sampled now."""
        ...

    def add(self, batch: TransitionBatch) -> Episode | None:
        """Store `batch`; the episode it committed, or None while the episode runs."""
        ...


@runtime_checkable
class WeightPublisher(Protocol):
    """Where the learner sends each new weight version (`robotrl.wire.weights.WeightPublisher`)."""

    def publish(self, version: int, safetensors_bytes: bytes) -> None: ...
