"""`TransitionStreamer`: an executor's transitions to the learner, a few ticks at a time.

Rows are buffered and sent as a `TransitionBatch` every `every_ticks` rows and at the end
of an episode (`episode_done`), through `wire.transitions.TransitionSender` (hello with
the robot id, heartbeats, reconnects). Sends never block the control loop: with the
learner absent or slow, up to `queue_batches` batches wait on the robot, and older ones
beyond that are dropped and counted in `sender.dropped_batches` (the learner sees a gap in
`seq`). Images are resized to the training resolution of the `TransitionSpec` here, on
the robot, so the wire and the learner's RAM carry uint8 at that size only.

Robot side: no torch, no mujoco. Angles are radians, times are control ticks.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import cv2
import numpy as np

from robotrl.buffer.spec import TransitionSpec
from robotrl.inference.runner import EpisodeResult, TickEvent
from robotrl.wire.keys import ClientKeys
from robotrl.wire.messages import TransitionBatch
from robotrl.wire.transitions import TransitionSender

log = logging.getLogger(__name__)

_FIELDS = ("ticks", "state", "action", "policy_action", "reward", "intervention", "version", "delay_ticks")
_DTYPES = {
    "ticks": np.int64,
    "state": np.float32,
    "action": np.float32,
    "policy_action": np.float32,
    "reward": np.float32,
    "intervention": np.bool_,
    "version": np.int64,
    "delay_ticks": np.int64,
}


def resize_image(image: np.ndarray, size_hw: tuple[int, int]) -> np.ndarray:
    """uint8 (H, W, 3) RGB image at (h, w) (cv2 INTER_AREA; unchanged if already so)."""
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"images must be uint8 (H, W, 3) RGB, got {image.dtype} {image.shape}")
    if image.shape[:2] == tuple(size_hw):
        return image
    return cv2.resize(image, (size_hw[1], size_hw[0]), interpolation=cv2.INTER_AREA)


class TransitionStreamer:
    """Streams one robot's transitions to the learner's transitions socket at `endpoint`.

    Args:
        endpoint: the learner's transitions endpoint ("tcp://learner:5560").
        robot_id: this robot's name (unique in the fleet).
        spec: what the learner expects (shapes, cameras and their training size).
        every_ticks: rows per batch (the last batch of an episode may be shorter).
        queue_batches: batches kept on the robot for an absent or slow learner.
        linger_s: how long `close` waits for queued batches to go out.

    Attributes:
        episode_id: id of the current episode (time-based ns: unique across restarts).
        sent_rows: rows of the batches made so far.
        sender: the `TransitionSender` (`sent_batches`, `dropped_batches`, `connected`).
    """

    def __init__(
        self,
        endpoint: str,
        robot_id: str,
        spec: TransitionSpec,
        *,
        every_ticks: int = 8,
        queue_batches: int = 256,
        linger_s: float = 1.0,
        curve: ClientKeys | None = None,
    ) -> None:
        if every_ticks < 1:
            raise ValueError(f"every_ticks={every_ticks} must be >= 1")
        self.endpoint, self.robot_id, self.spec = endpoint, robot_id, spec
        self.every_ticks = every_ticks
        self.linger_s = linger_s
        self.sender = TransitionSender(endpoint, robot_id, queue_batches=queue_batches, curve=curve)
        self.sent_rows = 0
        self.episode_id = -1
        self.instruction = ""
        self._seq = 0
        self._rows: list[dict] = []
        self._last_episode_id = 0

    def begin_episode(self, instruction: str = "") -> int:
        """Start a new episode (rows left of an unfinished one are sent first, not done);
        returns its id. `record` starts one by itself when none is open."""
        if self._rows:
            self._flush(done=False, success=False)
        self.episode_id = max(time.time_ns(), self._last_episode_id + 1)
        self._last_episode_id = self.episode_id
        self.instruction = instruction
        self._seq = 0
        return self.episode_id

    def record(
        self,
        tick: int,
        state: np.ndarray,
        images: dict[str, np.ndarray],
        env_state: np.ndarray | None,
        action: np.ndarray,
        policy_action: np.ndarray,
        reward: float,
        intervention: bool,
        version: int,
        delay_ticks: int,
    ) -> None:
        """Buffer one row: the observation at `tick` (before acting: (S,) `state`,
        camera -> uint8 (H, W, 3) `images` at any size, (E,) `env_state` or None), the
        executed post-safety target `action` (A,), the policy's own row `policy_action`
        (A,), the `reward` after acting, whether a human gave `action`, the weight
        `version` of the policy row (-1: none) and the delay `delay_ticks` of its chunk.
        Sends a batch of `every_ticks` rows when the next row comes; never blocks."""
        if self.episode_id < 0:
            self.begin_episode(self.instruction)
        if len(self._rows) >= self.every_ticks:  # (one tick late: end_episode always has a row)
            self._flush(done=False, success=False)
        missing = set(self.spec.cameras) - set(images)
        if missing:
            raise ValueError(f"robot {self.robot_id!r}: no image from cameras {sorted(missing)}")
        self._rows.append(
            {
                "ticks": tick,
                "state": state,
                "action": action,
                "policy_action": policy_action,
                "reward": reward,
                "intervention": intervention,
                "version": version,
                "delay_ticks": delay_ticks,
                "images": {cam: resize_image(images[cam], hw) for cam, hw in self.spec.cameras.items()},
                "env_state": env_state if self.spec.env_state_dim else None,
            }
        )

    def end_episode(self, success: bool) -> None:
        """Send the buffered rows (at least the last one) with `episode_done` and `success`."""
        if self.episode_id < 0 or not self._rows:
            raise ValueError("end_episode without an episode: record its rows first")
        self._flush(done=True, success=success)
        self.episode_id = -1

    def close(self) -> None:
        """Close the connection, waiting up to `linger_s` for queued batches to be handed
        to ZMQ and up to `linger_s` more for ZMQ to send them."""
        self.sender.flush(self.linger_s)  # our queue into ZMQ's, then ZMQ's onto the wire
        self.sender.close(linger_s=self.linger_s)

    def __enter__(self) -> TransitionStreamer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _flush(self, done: bool, success: bool) -> None:
        rows, self._rows = self._rows, []
        cols: dict[str, Any] = {name: np.asarray([r[name] for r in rows], dtype=_DTYPES[name]) for name in _FIELDS}
        batch = TransitionBatch(
            robot_id=self.robot_id,
            episode_id=self.episode_id,
            seq=self._seq,
            **cols,
            images={cam: np.stack([r["images"][cam] for r in rows]) for cam in self.spec.cameras},
            env_state=np.asarray([r["env_state"] for r in rows], np.float32) if self.spec.env_state_dim else None,
            instruction=self.instruction,
            episode_done=done,
            success=success,
        )
        self.spec.check(batch)
        self._seq += len(rows)
        self.sent_rows += len(rows)
        self.sender.send(batch)


class TransitionRecorder:
    """An episode-runner observer streaming every executed tick through `streamer`
    (episode begin, every tick, end with the success label).

    Each row is the reading the tick acted on (joints, camera frames, privileged features
    in sim), what was executed (post-safety), the policy's own row, the reward, the
    intervention flag, the chunk's weight version and delay."""

    def __init__(self, streamer: TransitionStreamer) -> None:
        self.streamer = streamer

    def on_episode_start(self, seed: int, instruction: str) -> None:
        self.streamer.begin_episode(instruction)

    def on_tick(self, event: TickEvent) -> None:
        r = event.record
        policy_row = r.requested_rad if r.policy_rad is None else r.policy_rad
        self.streamer.record(
            r.tick,
            event.state.q_rad,
            event.state.images,
            event.env_state,
            r.sent_rad,
            policy_row,
            event.outcome.reward,
            r.intervened,
            r.version,
            r.delay_ticks,
        )

    def on_episode_end(self, result: EpisodeResult) -> None:
        self.streamer.end_episode(result.success)
