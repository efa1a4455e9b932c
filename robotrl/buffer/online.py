"""`OnlineBuffer`: the learner's replay buffer = the on-disk `EpisodeLog` + the RAM
`ReplayCache`, rebuilt from the log when opened.

Every batch is checked against the `TransitionSpec`, journalled, and when its episode
ends committed to disk and copied into the cache; only committed episodes are sampled.
Demonstrations (`add_demo_dataset`) go to the cache only: they are not written to the
log, so a learner that reopens the buffer adds its demo dataset again.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from robotrl.buffer.cache import ReplayCache
from robotrl.buffer.demo import load_demo_episodes
from robotrl.buffer.episode import Episode
from robotrl.buffer.log import EpisodeLog
from robotrl.buffer.sampler import ChunkSample, ImageAlloc, TransitionSample, sample_chunks, sample_transitions
from robotrl.buffer.spec import TransitionSpec
from robotrl.record import features as F
from robotrl.wire.messages import TransitionBatch

log = logging.getLogger(__name__)


class OnlineBuffer:
    """Replay buffer at `root` for transitions of `spec`.

    capacity: online transitions held in RAM (oldest episodes evicted; the log keeps
    everything). online_ratio: share of each batch drawn from online rows (RLPD), the rest
    from demo + intervention rows. staleness_cap: online rows with learner_version -
    version above it are never sampled (None: no cap). fsync: durable journal and commits.
    past_ticks: (n_1, .. n_P) rows back of the past frames `sample_chunks` adds to every
    camera, for a policy that reads them (`past_frame_ticks_back(G, P)`; (): none).
    Attributes: `recovery_s` (seconds the open took to rebuild the cache from the log),
    `partial_episodes` (in-progress episodes found in the journal on open, not sampled),
    `image_alloc` (None, or where sampled images are gathered: a learner on a GPU sets
    pinned host memory, `robotrl.learn.prefetch.pinned_images`).
    """

    def __init__(
        self,
        root: Path | str,
        spec: TransitionSpec,
        capacity: int,
        *,
        online_ratio: float = 0.5,
        staleness_cap: int | None = None,
        fsync: bool = True,
        past_ticks: tuple[int, ...] = (),
    ) -> None:
        if not 0.0 <= online_ratio <= 1.0:
            raise ValueError(f"online_ratio must be in [0, 1], got {online_ratio}")
        if staleness_cap is not None and staleness_cap < 0:
            raise ValueError(f"staleness_cap must be >= 0 or None, got {staleness_cap}")
        self.spec, self.online_ratio, self.staleness_cap = spec, online_ratio, staleness_cap
        self.past_ticks = past_ticks
        self.image_alloc: ImageAlloc | None = None
        t0 = time.perf_counter()
        self.log = EpisodeLog(root, fsync=fsync)
        self.cache = ReplayCache(spec, capacity)
        episodes, self.partial_episodes = self.log.recover(online_capacity=capacity)
        for ep in episodes:
            self._cache_add(ep)
        self.recovery_s = time.perf_counter() - t0

    @property
    def committed_transitions(self) -> int:
        """Online transitions committed to the log over its whole life (the buffer cursor)."""
        return self.log.committed_transitions

    @property
    def committed_episodes(self) -> int:
        return self.log.committed_episodes

    def __len__(self) -> int:
        """Transitions that can be sampled now (online in RAM + demo)."""
        return self.cache.online_transitions + self.cache.demo_transitions

    def add(self, batch: TransitionBatch) -> Episode | None:
        """Check, journal and (on `episode_done`) commit and cache `batch`; the committed
        episode or None. Raises `SpecMismatch` (nothing stored) if the batch does not fit."""
        self.spec.check(batch)
        episode = self.log.append(batch)
        if episode is not None:
            self._cache_add(episode)
        return episode

    def _cache_add(self, episode: Episode) -> None:
        try:
            self.cache.add(episode)
        except ValueError as exc:
            log.warning("episode not cached: %s", exc)

    def add_demo_dataset(self, path: Path | str, *, action_key: str = F.ACTION, progress: bool = False) -> int:
        """Load the LeRobotDataset at `path` as demo episodes, their actions from its
        `action_key` column (`load_demo_episodes`); the number of transitions added."""
        return self.add_demo_episodes(load_demo_episodes(path, self.spec, action_key=action_key, progress=progress))

    def add_demo_episodes(self, episodes: list[Episode]) -> int:
        """Add demo episodes built elsewhere (source must be "demo"); transitions added."""
        for ep in episodes:
            if ep.source != "demo":
                raise ValueError(f"episode {ep.key} has source {ep.source!r}, expected 'demo'")
        self.cache.demo.reserve(sum(ep.n for ep in episodes))
        for ep in episodes:
            self.cache.add(ep)
        return sum(ep.n for ep in episodes)

    def sample_transitions(self, batch_size: int, learner_version: int, rng: np.random.Generator) -> TransitionSample:
        """See `robotrl.buffer.sampler.sample_transitions`."""
        return sample_transitions(
            self.cache, batch_size, learner_version, rng, self.online_ratio, self.staleness_cap, self.image_alloc
        )

    def sample_chunks(
        self, batch_size: int, horizon: int, learner_version: int, rng: np.random.Generator
    ) -> ChunkSample:
        """See `robotrl.buffer.sampler.sample_chunks`."""
        return sample_chunks(
            self.cache,
            batch_size,
            horizon,
            learner_version,
            rng,
            self.online_ratio,
            self.staleness_cap,
            self.image_alloc,
            self.past_ticks,
        )

    def close(self) -> None:
        self.log.close()
