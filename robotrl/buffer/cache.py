"""The replay cache: committed episodes in preallocated RAM arrays, ready to sample.

Rows live in a `RowStore`: fixed arrays indexed by physical slot, with every row's
global position `glob` (monotone over the store's life) so that "row t+k of the same
episode" is `min(glob + k, ep_end - 1) % capacity` and "row t-k" `max(glob - k, ep_start)
% capacity`, even across the ring's wrap-around.
Images are kept uint8 (never float). The online store evicts its oldest episodes (whole
episodes) to stay within `capacity` transitions; the demo store never evicts and grows.
Only what sampling needs is kept in RAM (ticks, policy_action and delay_ticks stay in
the log).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from robotrl.buffer.episode import Episode
from robotrl.buffer.spec import TransitionSpec


class RowStore:
    """Rows of whole episodes in arrays of `capacity` slots.

    evict=True: a ring; adding an episode evicts the oldest episodes until it fits.
    evict=False: grows (doubling) instead. Fields (physical slot -> value): state (S,) f32,
    env_state (E,) f32 or absent, action (A,) f32, reward f32, intervention bool, version
    int64, images[cam] (h, w, 3) u8, glob int64, ep_start / ep_end int64 (global, inclusive / exclusive),
    ep_done / ep_success / ep_intervened bool, ep_return f32, instr int32 (into `instructions`).
    """

    def __init__(self, spec: TransitionSpec, capacity: int, *, evict: bool) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be >= 1 transition, got {capacity}")
        self.spec, self.evict = spec, evict
        self.capacity = 0
        self.arrays: dict[str, np.ndarray] = {}
        self.images: dict[str, np.ndarray] = {}
        self.head = self.tail = 0
        self.episodes: deque[tuple[int, int]] = deque()
        self.instructions: list[str] = []
        self._instr_index: dict[str, int] = {}
        self.generation = 0
        self._cache: dict[tuple, np.ndarray] = {}
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        s = self.spec
        shapes = {
            "state": ((s.state_dim,), np.float32),
            "action": ((s.action_dim,), np.float32),
            "reward": ((), np.float32),
            "intervention": ((), np.bool_),
            "version": ((), np.int64),
            "glob": ((), np.int64),
            "ep_start": ((), np.int64),
            "ep_end": ((), np.int64),
            "ep_done": ((), np.bool_),
            "ep_success": ((), np.bool_),
            "ep_intervened": ((), np.bool_),
            "ep_return": ((), np.float32),
            "instr": ((), np.int32),
        }
        if s.env_state_dim:
            shapes["env_state"] = ((s.env_state_dim,), np.float32)
        arrays = {k: np.zeros((capacity, *shape), dt) for k, (shape, dt) in shapes.items()}
        images = {cam: np.zeros((capacity, h, w, 3), np.uint8) for cam, (h, w) in s.cameras.items()}
        live = self.head - self.tail
        if live:  # only the non-evicting store grows; its rows sit at slots 0..head-1
            for old, new in zip([*self.arrays.values(), *self.images.values()], [*arrays.values(), *images.values()]):
                new[:live] = old[:live]
        self.arrays, self.images, self.capacity = arrays, images, capacity

    @property
    def size(self) -> int:
        """Rows held."""
        return self.head - self.tail

    @property
    def nbytes(self) -> int:
        """RAM held by the row arrays (allocated capacity, images included)."""
        return sum(a.nbytes for a in [*self.arrays.values(), *self.images.values()])

    def add(self, ep: Episode) -> None:
        """Copy the episode's rows in (evicting or growing first)."""
        n = ep.n
        if n == 0:
            return
        if n > self.capacity and self.evict:
            raise ValueError(f"episode {ep.key} has {n} transitions, more than the replay capacity {self.capacity}")
        if self.evict:
            while self.size + n > self.capacity:
                start, length = self.episodes.popleft()
                self.tail = start + length
        elif self.head + n > self.capacity:
            self._allocate(max(2 * self.capacity, self.head + n))
        start = self.head
        instr = self._instr_index.setdefault(ep.instruction, len(self.instructions))
        if instr == len(self.instructions):
            self.instructions.append(ep.instruction)
        values = {
            "state": ep.state,
            "action": ep.action,
            "reward": ep.reward,
            "intervention": ep.intervention,
            "version": ep.version,
            "glob": np.arange(start, start + n),
            "ep_start": start,
            "ep_end": start + n,
            "ep_done": ep.done,
            "ep_success": ep.success,
            "ep_intervened": bool(np.any(ep.intervention)),
            "ep_return": float(np.sum(ep.reward, dtype=np.float64)),
            "instr": instr,
        }
        if "env_state" in self.arrays:
            values["env_state"] = ep.env_state
        for name, value in values.items():
            self._write(self.arrays[name], start, n, value)
        for cam, img in ep.images.items():
            self._write(self.images[cam], start, n, img)
        self.head += n
        self.episodes.append((start, n))
        self.generation += 1
        self._cache.clear()

    def _write(self, arr: np.ndarray, start: int, n: int, value) -> None:
        first = start % self.capacity
        k = min(n, self.capacity - first)
        if np.ndim(value) == 0:
            arr[first : first + k] = value
            arr[: n - k] = value
        else:
            arr[first : first + k] = value[:k]
            arr[: n - k] = value[k:]

    def reserve(self, rows: int) -> None:
        """Make room for `rows` more rows at once (a non-evicting store; avoids doubling)."""
        if not self.evict and self.head + rows > self.capacity:
            self._allocate(self.head + rows)

    def eligible(self, min_version: int | None, *, interventions_only: bool = False) -> np.ndarray:
        """Physical slots of live rows with version >= min_version (rows with version < 0,
        made by no policy, always qualify; None: no cap), optionally intervention rows only.
        Cached until the next `add`."""
        key = (min_version, interventions_only)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        slots = np.arange(self.tail, self.head) % self.capacity
        keep = np.ones(len(slots), bool)
        if min_version is not None:
            v = self.arrays["version"][slots]
            keep &= (v >= min_version) | (v < 0)
        if interventions_only:
            keep &= self.arrays["intervention"][slots]
        out = self._cache[key] = slots[keep]
        return out


class ReplayCache:
    """Online episodes (ring of `capacity` transitions, oldest evicted) and demo episodes
    (kept apart, never evicted) for a `TransitionSpec`."""

    def __init__(self, spec: TransitionSpec, capacity: int) -> None:
        self.spec = spec
        self.online = RowStore(spec, capacity, evict=True)
        self.demo = RowStore(spec, 1, evict=False)

    def add(self, episode: Episode) -> None:
        (self.demo if episode.source == "demo" else self.online).add(episode)

    @property
    def online_transitions(self) -> int:
        return self.online.size

    @property
    def demo_transitions(self) -> int:
        return self.demo.size

    @property
    def bytes_per_transition(self) -> float:
        """RAM per online transition slot (all per-row arrays, images included)."""
        return self.online.nbytes / self.online.capacity
