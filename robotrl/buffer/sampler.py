"""Batches drawn from the replay cache for the learners: `TransitionSample` (one step,
for SAC-style critics) and `ChunkSample` (H executed rows, for chunk policies).

RLPD mixing (HIL-SERL): `online_ratio` of a batch comes from the online pool (rows of
committed online episodes, staleness at most the cap), the rest from the prior pool
(demo rows + intervention rows; an intervention row is in both pools). All arrays are
numpy; images stay uint8 (B, h, w, 3) RGB, the learner converts them to float. With an
`ImageAlloc` (a learner on a GPU: pinned host memory) the images are gathered straight into
the memory it gives and handed over as what it returns (a pinned uint8 torch tensor).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from robotrl.buffer.cache import ReplayCache, RowStore
from robotrl.core.policy import past_image_key

if TYPE_CHECKING:
    import torch

    ImageBatch = np.ndarray | torch.Tensor
    """(B, h, w, 3) uint8 images: numpy, or a torch tensor (pinned, or on the learner's device)."""
else:
    ImageBatch = Any

ImageAlloc = Callable[[tuple[int, ...]], tuple[np.ndarray, Any]]
"""shape (B, h, w, 3) -> (a writable uint8 numpy array of that shape to gather into, the
object the sample hands over: that array, or e.g. the pinned torch tensor it views)."""


@dataclass
class TransitionSample:
    """B transitions (s, a, r, s', done). Units: state/action radians, reward as received.

    state: (B, S) float32; env_state: (B, E) float32 or None; images: camera -> (B, h, w, 3)
    uint8; action: (B, A) float32 executed (post-safety, human when intervened);
    reward: (B,) float32; done: (B,) bool, True only on the last row of a finished
    episode (then next_* repeat the row itself); next_state / next_env_state /
    next_images: the same for row t+1; intervention: (B,) bool; version: (B,) int64 weight
    version that made the row (-1: none, demos); staleness: (B,) int64 learner_version -
    version (0 for demo rows and rows with version < 0, made by no policy); is_demo: (B,)
    bool (False for intervention rows drawn from the prior pool).
    """

    state: np.ndarray
    env_state: np.ndarray | None
    images: Mapping[str, ImageBatch]
    action: np.ndarray
    reward: np.ndarray
    done: np.ndarray
    next_state: np.ndarray
    next_env_state: np.ndarray | None
    next_images: Mapping[str, ImageBatch]
    intervention: np.ndarray
    version: np.ndarray
    staleness: np.ndarray
    is_demo: np.ndarray


@dataclass
class ChunkSample:
    """B chunks starting at row t of an episode.

    state: (B, S) float32 at t; env_state: (B, E) float32 or None; images: camera ->
    (B, h, w, 3) uint8 at t, and with `past_ticks` (n_1, n_2, ..) also `past_image_key(camera,
    k)` -> the camera's image n_k rows earlier (the episode's first row when t < n_k), as a
    policy reading past frames gets them (`PolicyObservation.images`); instruction: B
    strings; actions: (B, H, A) float32 executed rows t..t+H-1, past the episode end padded
    with its last row; mask: (B, H) bool, True for real rows; intervention: (B, H) bool
    (False on padding); episode_return: (B,) float32 sum of the episode's rewards;
    episode_success: (B,) bool; episode_intervened: (B,) bool (any row of the episode
    intervened); version: (B,) int64 of row t; staleness: (B,) int64 (0 for demo rows);
    is_demo: (B,) bool.
    Chunk TD (DSRL): reward: (B, H) float32 of rows t..t+H-1, 0 on padding; next_state /
    next_env_state / next_images: the same as state / env_state / images (past frames
    too) for row t+H, or for the episode's last row when the episode ends first; done:
    (B,) bool, True when t+H >= the episode's length and the episode finished (terminal:
    no bootstrap).
    """

    state: np.ndarray
    env_state: np.ndarray | None
    images: Mapping[str, ImageBatch]
    instruction: list[str]
    actions: np.ndarray
    mask: np.ndarray
    intervention: np.ndarray
    episode_return: np.ndarray
    episode_success: np.ndarray
    episode_intervened: np.ndarray
    version: np.ndarray
    staleness: np.ndarray
    is_demo: np.ndarray
    reward: np.ndarray
    next_state: np.ndarray
    next_env_state: np.ndarray | None
    next_images: Mapping[str, ImageBatch]
    done: np.ndarray


def draw_rows(
    cache: ReplayCache,
    batch_size: int,
    learner_version: int,
    rng: np.random.Generator,
    online_ratio: float,
    staleness_cap: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """(online-store slots, demo-store slots) of a mixed batch of `batch_size` rows.

    round(online_ratio * B) rows uniformly from the online pool (live online rows whose
    staleness learner_version - version <= staleness_cap), the rest uniformly from the
    prior pool (demo rows + online intervention rows within the same cap). When one pool
    is empty the other supplies the whole batch; both empty -> ValueError.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not 0.0 <= online_ratio <= 1.0:
        raise ValueError(f"online_ratio must be in [0, 1], got {online_ratio}")
    min_version = None if staleness_cap is None else int(learner_version) - int(staleness_cap)
    online = cache.online.eligible(min_version)
    interventions = cache.online.eligible(min_version, interventions_only=True)
    n_demo = cache.demo.size
    n_prior = n_demo + len(interventions)
    if len(online) == 0 and n_prior == 0:
        raise ValueError("the replay buffer has no committed transitions to sample (within the staleness cap)")
    k_online = batch_size if n_prior == 0 else 0 if len(online) == 0 else int(round(online_ratio * batch_size))
    picks = online[rng.integers(0, len(online), k_online)] if k_online else online[:0]
    prior = np.sort(rng.integers(0, n_prior, batch_size - k_online)) if n_prior else np.zeros(0, np.int64)
    from_demo = prior[prior < n_demo]  # the demo store never evicts: its slots are 0..size-1
    from_int = interventions[prior[prior >= n_demo] - n_demo]
    return np.concatenate([picks, from_int]), from_demo


def _gather(groups: list[tuple[RowStore, np.ndarray]], field: str) -> np.ndarray:
    """Rows `slots` of `field` from each (store, slots) group, stacked (one copy)."""
    arrays = [st.arrays[field] for st, _ in groups]
    return _take_into(arrays, groups, np.empty((_rows(groups), *arrays[0].shape[1:]), arrays[0].dtype))


def _gather_images(groups: list[tuple[RowStore, np.ndarray]], cam: str, alloc: ImageAlloc | None) -> ImageBatch:
    """(B, h, w, 3) uint8 rows of camera `cam`, gathered into `alloc`'s memory when given
    (then handed over as what it returns)."""
    arrays = [st.images[cam] for st, _ in groups]
    shape = (_rows(groups), *arrays[0].shape[1:])
    out, handed = (np.empty(shape, np.uint8), None) if alloc is None else alloc(shape)
    _take_into(arrays, groups, out)
    return out if handed is None else handed


def _camera_images(
    groups: list[tuple[RowStore, np.ndarray]], past_ticks: tuple[int, ...], alloc: ImageAlloc | None
) -> dict[str, ImageBatch]:
    """Every camera's images at the rows `groups` name, then for k = 1, 2, .. its images
    `past_ticks[k - 1]` rows earlier in the same episode under `past_image_key(camera, k)`."""
    cams = list(groups[0][0].images)
    out = {cam: _gather_images(groups, cam, alloc) for cam in cams}
    for k, back in enumerate(past_ticks, 1):
        earlier = [(st, _earlier_slots(st, slots, back)) for st, slots in groups]
        out.update({past_image_key(cam, k): _gather_images(earlier, cam, alloc) for cam in cams})
    return out


def _rows(groups: list[tuple[RowStore, np.ndarray]]) -> int:
    return sum(len(slots) for _, slots in groups)


def _take_into(arrays: list[np.ndarray], groups: list[tuple[RowStore, np.ndarray]], out: np.ndarray) -> np.ndarray:
    pos = 0
    for arr, (_, slots) in zip(arrays, groups):
        np.take(arr, slots, axis=0, out=out[pos : pos + len(slots)], mode="clip")  # clip: unbuffered
        pos += len(slots)
    return out


def _offset_slots(store: RowStore, slots: np.ndarray, k: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """(slots of rows t+k of the same episode, clipped to its last row; mask t+k in the episode).
    `k` broadcasts against slots[:, None] for chunks, or is a scalar."""
    glob = store.arrays["glob"][slots]
    end = store.arrays["ep_end"][slots]
    if np.ndim(k):
        glob, end = glob[:, None], end[:, None]
    target = glob + k
    return np.minimum(target, end - 1) % store.capacity, target < end


def _earlier_slots(store: RowStore, slots: np.ndarray, back: int) -> np.ndarray:
    """Slots of rows t - back of the same episode, clipped to its first row."""
    glob = store.arrays["glob"][slots]
    return np.maximum(glob - back, store.arrays["ep_start"][slots]) % store.capacity


def _chunk_rows(
    groups: list[tuple[RowStore, np.ndarray]], offs: list[tuple[np.ndarray, np.ndarray]], field: str
) -> np.ndarray:
    """(B, H, ...) `field` at the (B, H) chunk slots `offs[i][0]` of each group's store."""
    return np.concatenate([st.arrays[field][sl] for (st, _), (sl, _) in zip(groups, offs)])


def _common(groups, learner_version: int, k_online: int) -> dict:
    version = _gather(groups, "version")
    is_demo = np.zeros(len(version), bool)
    is_demo[k_online:] = True
    staleness = np.where(is_demo | (version < 0), 0, int(learner_version) - version).astype(np.int64)
    version[is_demo] = -1
    return {"version": version, "staleness": staleness, "is_demo": is_demo}


def sample_transitions(
    cache: ReplayCache,
    batch_size: int,
    learner_version: int,
    rng: np.random.Generator,
    online_ratio: float = 0.5,
    staleness_cap: int | None = None,
    image_alloc: ImageAlloc | None = None,
) -> TransitionSample:
    """A `TransitionSample` of `batch_size` rows mixed as `draw_rows` says (online and
    intervention rows first, demo rows last); images gathered into `image_alloc`'s memory."""
    on, demo = draw_rows(cache, batch_size, learner_version, rng, online_ratio, staleness_cap)
    groups = [(cache.online, on), (cache.demo, demo)]
    nxt = [(st, _offset_slots(st, slots, 1)[0]) for st, slots in groups]
    last = np.concatenate([_offset_slots(st, slots, 1)[1] == 0 for st, slots in groups])
    done = last & _gather(groups, "ep_done")
    env = "env_state" in cache.online.arrays
    return TransitionSample(
        state=_gather(groups, "state"),
        env_state=_gather(groups, "env_state") if env else None,
        images=_camera_images(groups, (), image_alloc),
        action=_gather(groups, "action"),
        reward=_gather(groups, "reward"),
        done=done,
        next_state=_gather(nxt, "state"),
        next_env_state=_gather(nxt, "env_state") if env else None,
        next_images=_camera_images(nxt, (), image_alloc),
        intervention=_gather(groups, "intervention"),
        **_common(groups, learner_version, len(on)),
    )


def sample_chunks(
    cache: ReplayCache,
    batch_size: int,
    horizon: int,
    learner_version: int,
    rng: np.random.Generator,
    online_ratio: float = 0.5,
    staleness_cap: int | None = None,
    image_alloc: ImageAlloc | None = None,
    past_ticks: tuple[int, ...] = (),
) -> ChunkSample:
    """A `ChunkSample` of `batch_size` chunks of `horizon` rows, start rows mixed as
    `draw_rows` says (the cap applies to the start row's version); images gathered into
    `image_alloc`'s memory, with each camera's images `past_ticks` rows earlier too."""
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    on, demo = draw_rows(cache, batch_size, learner_version, rng, online_ratio, staleness_cap)
    groups = [(cache.online, on), (cache.demo, demo)]
    steps = np.arange(horizon)
    offs = [_offset_slots(st, slots, steps) for st, slots in groups]
    mask = np.concatenate([m for _, m in offs])
    ends = [_offset_slots(st, slots, horizon) for st, slots in groups]
    nxt = [(st, sl) for (st, _), (sl, _) in zip(groups, ends)]
    done = ~np.concatenate([inside for _, inside in ends]) & _gather(groups, "ep_done")
    instr = [st.instructions[i] for st, slots in groups for i in st.arrays["instr"][slots]]
    env = "env_state" in cache.online.arrays
    return ChunkSample(
        state=_gather(groups, "state"),
        env_state=_gather(groups, "env_state") if env else None,
        images=_camera_images(groups, past_ticks, image_alloc),
        instruction=instr,
        actions=_chunk_rows(groups, offs, "action"),
        mask=mask,
        intervention=_chunk_rows(groups, offs, "intervention") & mask,
        episode_return=_gather(groups, "ep_return"),
        episode_success=_gather(groups, "ep_success"),
        episode_intervened=_gather(groups, "ep_intervened"),
        **_common(groups, learner_version, len(on)),
        reward=np.where(mask, _chunk_rows(groups, offs, "reward"), np.float32(0)),
        next_state=_gather(nxt, "state"),
        next_env_state=_gather(nxt, "env_state") if env else None,
        next_images=_camera_images(nxt, past_ticks, image_alloc),
        done=done,
    )
