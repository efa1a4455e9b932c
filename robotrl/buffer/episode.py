"""One episode's transitions: the rows of its `TransitionBatch`es stacked in order.

`PartialEpisode` collects the batches of an episode still in progress and puts them in
`seq` order: a duplicate batch (same rows again, e.g. a resend) is ignored, an
overlapping one contributes only its new rows, and a gap (lost rows) is kept as is with
a warning. `Episode` is the finished result that the log stores and the cache samples.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import msgspec
import numpy as np

from robotrl.wire.messages import TransitionBatch

log = logging.getLogger(__name__)

ROW_FIELDS: dict[str, np.dtype] = {
    "ticks": np.dtype(np.int64),
    "state": np.dtype(np.float32),
    "action": np.dtype(np.float32),
    "policy_action": np.dtype(np.float32),
    "reward": np.dtype(np.float32),
    "intervention": np.dtype(np.bool_),
    "version": np.dtype(np.int64),
    "delay_ticks": np.dtype(np.int64),
}
"""Per-row array fields of a transition (besides images and env_state) and their stored dtype."""

SOURCES = ("online", "demo")


@dataclass
class Episode:
    """n rows of one episode of one robot.

    ticks (n,) int64; state (n, S) f32 rad; action (n, A) f32 rad executed; policy_action
    (n, A) f32 rad; reward (n,) f32; intervention (n,) bool; version (n,) int64;
    delay_ticks (n,) int64; images camera -> (n, h, w, 3) uint8; env_state (n, E) f32 or
    None. `done`: the episode ended (its last row is terminal); `success`: it succeeded;
    `source`: "online" (streamed by an executor) or "demo" (a recorded dataset).
    """

    robot_id: str
    episode_id: int
    ticks: np.ndarray
    state: np.ndarray
    action: np.ndarray
    policy_action: np.ndarray
    reward: np.ndarray
    intervention: np.ndarray
    version: np.ndarray
    delay_ticks: np.ndarray
    images: dict[str, np.ndarray] = field(default_factory=dict)
    env_state: np.ndarray | None = None
    instruction: str = ""
    done: bool = True
    success: bool = False
    source: str = "online"

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"episode source {self.source!r}: expected one of {SOURCES}")
        n = len(self.ticks)
        for name in ROW_FIELDS:
            if len(getattr(self, name)) != n:
                raise ValueError(f"episode {self.episode_id}: {name} has {len(getattr(self, name))} rows, ticks {n}")

    @property
    def n(self) -> int:
        """Number of rows."""
        return len(self.ticks)

    @property
    def key(self) -> tuple[str, int]:
        return (self.robot_id, self.episode_id)

    @property
    def nbytes(self) -> int:
        """Bytes of all row arrays (images included)."""
        arrays = [getattr(self, k) for k in ROW_FIELDS] + list(self.images.values())
        arrays += [self.env_state] if self.env_state is not None else []
        return sum(a.nbytes for a in arrays)


class PartialEpisode:
    """The batches of one in-progress episode, in `seq` order (see the module docstring)."""

    def __init__(self, robot_id: str, episode_id: int) -> None:
        self.robot_id, self.episode_id = robot_id, episode_id
        self.batches: dict[int, TransitionBatch] = {}
        self.last: TransitionBatch | None = None
        """The batch with `episode_done`, once it arrived."""

    @property
    def key(self) -> tuple[str, int]:
        return (self.robot_id, self.episode_id)

    def add(self, batch: TransitionBatch) -> bool:
        """Keep `batch`; False when it is an exact duplicate of one already held."""
        held = self.batches.get(batch.seq)
        if held is not None and len(held.ticks) >= len(batch.ticks) and held.episode_done >= batch.episode_done:
            return False
        self.batches[batch.seq] = batch
        if batch.episode_done:
            self.last = batch
        return True

    def to_episode(self) -> Episode:
        """The rows received, in order; `done`/`success` from the final batch if it came."""
        parts = _in_order(self.batches, warn_key=self.key)
        if not parts:
            raise ValueError(f"episode {self.key}: no rows")
        first = parts[0]
        cat = {
            name: np.concatenate([np.asarray(getattr(b, name), dtype=dt) for b in parts])
            for name, dt in ROW_FIELDS.items()
        }
        images = {cam: np.concatenate([b.images[cam] for b in parts]) for cam in first.images}
        env = (
            np.concatenate([np.asarray(b.env_state, np.float32) for b in parts])
            if first.env_state is not None
            else None
        )
        done = self.last is not None
        return Episode(
            self.robot_id,
            self.episode_id,
            **cat,
            images=images,
            env_state=env,
            instruction=first.instruction,
            done=done,
            success=bool(self.last.success) if self.last is not None else False,
            source="online",
        )


def _in_order(batches: dict[int, TransitionBatch], warn_key: tuple[str, int]) -> list[TransitionBatch]:
    """Batches sorted by seq, overlaps trimmed to their new rows; gaps warned about."""
    out: list[TransitionBatch] = []
    end = 0
    for seq in sorted(batches):
        b = batches[seq]
        stop = seq + len(b.ticks)
        if stop <= end:
            continue
        if seq > end:
            log.warning("episode %s: rows %d..%d never arrived (gap before seq %d)", warn_key, end, seq - 1, seq)
        if seq < end:
            b = _slice_batch(b, end - seq)
        out.append(b)
        end = stop
    return out


def _slice_batch(b: TransitionBatch, start: int) -> TransitionBatch:
    """`b` without its first `start` rows."""
    rows = {name: getattr(b, name)[start:] for name in ROW_FIELDS}
    return msgspec.structs.replace(
        b,
        seq=b.seq + start,
        images={k: v[start:] for k, v in b.images.items()},
        env_state=None if b.env_state is None else b.env_state[start:],
        **rows,
    )
