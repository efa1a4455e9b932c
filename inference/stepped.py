"""Stepped-mode harness: the executor on a simulated `TaskEnv` with injected delay.

A `TaskEnv` seen as a robot (`EnvRobot`), a chunk policy built from the task's scripted
expert (`ExpertChunkPolicy`) and `run_stepped_episode`, which ties them to an `Executor`
and a `LocalChunkSource` (METRICS.md: stepped mode, deterministic for a seed). Used by
the tests and the chunking benchmarks; not robot side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robotrl.hardware.robot import RobotState
from robotrl.inference.chunking import DelayEstimator
from robotrl.inference.executor import Executor, LocalChunkSource, ReceivedChunk, TickRecord
from robotrl.policies.base import ActionChunk, PolicyMetadata, PolicyObservation


class EnvRobot:
    """A `TaskEnv` as a `SafeRobot`-like robot: `command` steps the env one tick (through
    its `SafeRobot`, paced by its clock); the last `Step` is kept in `last_step`."""

    def __init__(self, env) -> None:
        self.env = env
        self.last_step = None

    @property
    def spec(self):
        return self.env.robot.spec

    @property
    def limits(self):
        return self.env.robot.limits

    def read(self) -> RobotState:
        return self.env.robot.read()

    def command(self, target_rad: np.ndarray) -> np.ndarray:
        self.last_step = self.env.step(target_rad)
        return self.last_step.sent_rad


class ExpertChunkPolicy:
    """A `ChunkPolicy` from a scripted expert that tracks its own joint targets (the reach
    expert): each chunk resets the expert and rolls it H ticks from `obs.state_rad`,
    feeding back its own targets. It sees the task as it is at the request (stale vision).

    Args:
        expert: the env's expert (`env.make_expert()`), `reset(rng)` and `act(q) -> q`.
        horizon: H rows per chunk.
        spec: the arm's `RobotSpec` (joints and control rate).
        version: weight version stamped on every chunk.
    """

    def __init__(self, expert, horizon: int, spec, version: int = 0) -> None:
        self.expert = expert
        self.version = version
        self._metadata = PolicyMetadata("scripted_expert", horizon, spec.num_joints,
                                        spec.control_rate_hz, spec.num_joints)

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
        self.expert.reset(np.random.default_rng(obs.tick))
        q = np.asarray(obs.state_rad, dtype=np.float64)
        rows = []
        for _ in range(self._metadata.horizon):
            q = np.array(self.expert.act(q), dtype=np.float64)
            rows.append(q)
        return ActionChunk(np.stack(rows), obs.tick + obs.delay_ticks, self.version)

    def reset(self) -> None:
        pass


@dataclass
class SteppedEpisode:
    """One stepped episode's outcome and the executor's records."""

    seed: int
    success: bool
    ticks: int
    pauses: int
    step_clamps: int
    trace: list[TickRecord]
    received: list[ReceivedChunk]

    def requested_rad(self) -> np.ndarray:
        """(T, J) requested targets."""
        return np.stack([r.requested_rad for r in self.trace])

    def switch_ticks(self) -> list[int]:
        """Trace indices where a row came from a different chunk than the tick before."""
        return [k for k in range(1, len(self.trace)) if self.trace[k].chunk_id >= 0
                and self.trace[k].chunk_id != self.trace[k - 1].chunk_id]


def run_stepped_episode(env, seed: int, mode: str, delay_ticks: int, horizon: int = 16, *,
                        threshold: float = 0.5, execute_horizon: int | None = None) -> SteppedEpisode:
    """Reset `env` with `seed` and run the reach expert as a chunk policy through an
    `Executor` in `mode`, with the inference delay injected as `delay_ticks`, until the
    episode ends. The delay estimator starts at the injected delay (no warm-up guess)."""
    env.reset(seed)
    policy = ExpertChunkPolicy(env.make_expert(seed), horizon, env.spec)
    robot = EnvRobot(env)
    clamps_before = env.robot.stats.step_clamps
    executor = Executor(robot, LocalChunkSource(policy, delay_ticks, seed=seed), horizon, mode,
                        threshold=threshold, execute_horizon=execute_horizon,
                        delay=DelayEstimator(initial_ticks=delay_ticks), instruction=env.instruction,
                        env_state=lambda: env.task.env_state(env.sim))
    while robot.last_step is None or not robot.last_step.done:
        executor.tick()
    return SteppedEpisode(seed, robot.last_step.success, env.tick, executor.pauses,
                          env.robot.stats.step_clamps - clamps_before, executor.trace, executor.received)
