"""ACT temporal ensembling: a benchmark baseline executor (docs/algorithms.md section 1).

Every control tick it asks for a chunk conditioned on the measured state; a chunk
predicts the ticks from its observation tick on (rows whose ticks passed while it was
computed are dropped). The target for a tick is the average of every prediction made
for it, oldest first, with weights w_i = exp(-m i) (ACT: m = 0.01, so the oldest
prediction weighs most). Same interface and `TickRecord` trace as `Executor`.
Robot side: no torch, no mujoco. Angles are radians, times are control ticks.
"""

from __future__ import annotations

import numpy as np

from robotrl.core.policy import PolicyObservation
from robotrl.core.robot import RobotState
from robotrl.hardware.safety import SafeRobot
from robotrl.inference.executor import ChunkSource, PastFrames, ReceivedChunk, TickRecord

ACT_DECAY = 0.01
"""ACT's m in w_i = exp(-m i)."""


def ensemble_weights(n: int, decay: float = ACT_DECAY) -> np.ndarray:
    """(n,) normalised weights exp(-decay * i) for predictions i = 0 (oldest) .. n-1."""
    if n <= 0 or decay < 0:
        raise ValueError(f"ensemble_weights needs n > 0 and decay >= 0, got n={n}, decay={decay}")
    w = np.exp(-decay * np.arange(n, dtype=np.float64))
    return w / w.sum()


class EnsembleExecutor:
    """Drives `robot` with ACT temporal ensembling of the chunks of `source`.

    Args:
        robot: the `SafeRobot` every target goes through.
        source: the `ChunkSource`; it must accept a request every tick (several in flight).
        decay: m in w_i = exp(-m i).

    Attributes:
        trace: one `TickRecord` per tick. `chunk_id` is the newest contributing chunk
            (every tick is a switch), `obs_tick` the weighted mean (rounded) of the
            contributing observation ticks, `delay_ticks` that chunk's measured delay.
        received: every chunk taken in.
    """

    intervener = None
    """Never intervened (a benchmark baseline)."""

    def __init__(
        self,
        robot: SafeRobot,
        source: ChunkSource,
        *,
        decay: float = ACT_DECAY,
        past_frame_ticks: int = 0,
        past_frames: int = 1,
    ) -> None:
        ensemble_weights(1, decay)  # validates decay
        self.robot, self.source, self.decay = robot, source, decay
        self.past_frames = PastFrames(past_frame_ticks, past_frames)
        self.begin_episode("")

    def begin_episode(self, instruction: str, start_tick: int = 0) -> None:
        """Forget the last episode; the first `tick()` is `start_tick`."""
        self.instruction = instruction
        self.now_tick = start_tick
        self.trace: list[TickRecord] = []
        self.received: list[ReceivedChunk] = []
        self._predictions: dict[int, list[tuple[int, np.ndarray]]] = {}  # tick -> [(chunk index, row)]
        self._hold_rad: np.ndarray | None = None
        self.past_frames.clear()

    @property
    def pauses(self) -> int:
        """Ticks so far at which the robot held for lack of a prediction."""
        return sum(r.paused for r in self.trace)

    def tick(self, measured: RobotState, env_state: np.ndarray | None = None) -> TickRecord:
        """One control tick from this tick's reading: request, take in arrived chunks,
        command the ensembled target."""
        now = self.now_tick
        if self._hold_rad is None:
            self._hold_rad = np.array(measured.q_rad, dtype=np.float64)
        self.past_frames.push(measured.images)
        self.source.request(
            PolicyObservation(
                state_rad=np.array(measured.q_rad, dtype=np.float64),
                tick=now,
                instruction=self.instruction,
                images=self.past_frames.images(measured.images),
                env_state=env_state,
            )
        )
        while (chunk := self.source.poll(now)) is not None:
            self._accept(chunk, now)
        predictions = self._predictions.pop(now, [])
        requested = self._hold_rad if not predictions else self._ensemble(predictions)
        sent = np.asarray(self.robot.command(requested), dtype=np.float64)
        self._hold_rad = sent.copy()
        record = self._record(now, requested, sent, predictions)
        self.trace.append(record)
        self.now_tick = now + 1
        return record

    def _accept(self, chunk, now: int) -> None:
        rows = np.asarray(chunk.actions_rad, dtype=np.float64)
        dropped = min(max(0, now - chunk.start_tick), len(rows))
        index = len(self.received)
        self.received.append(ReceivedChunk(index, chunk, chunk.start_tick, 0, now, dropped))
        for i in range(dropped, len(rows)):
            self._predictions.setdefault(chunk.start_tick + i, []).append((index, rows[i]))

    def _ensemble(self, predictions: list[tuple[int, np.ndarray]]) -> np.ndarray:
        w = ensemble_weights(len(predictions), self.decay)
        return w @ np.stack([row for _, row in predictions])

    def _record(
        self, now: int, requested: np.ndarray, sent: np.ndarray, predictions: list[tuple[int, np.ndarray]]
    ) -> TickRecord:
        if not predictions:
            return TickRecord(now, np.array(requested), sent, -1, -1, -1, 0, len(self._predictions), True)
        w = ensemble_weights(len(predictions), self.decay)
        newest = self.received[predictions[-1][0]]
        obs_tick = int(round(float(w @ [self.received[i].obs_tick for i, _ in predictions])))
        return TickRecord(
            now,
            np.array(requested),
            sent,
            newest.chunk_id,
            newest.chunk.version,
            obs_tick,
            newest.arrival_tick - newest.obs_tick,
            len(self._predictions),
            False,
        )
