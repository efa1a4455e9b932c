"""Stepped-mode harness: the executor on a simulated `TaskEnv` with injected delay.

A `TaskEnv` seen as a robot (`EnvRobot`), a chunk policy built from the task's scripted
expert (`ExpertChunkPolicy`) and `run_stepped_episode`, which ties a chunk policy to an
`Executor` (or the ACT `EnsembleExecutor`) and a `LocalChunkSource` (METRICS.md: stepped
mode, deterministic for a seed). Used by the tests and the benchmarks; not robot side.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from robotrl.hardware.robot import RobotState
from robotrl.inference.chunking import DelayEstimator
from robotrl.inference.ensemble import EnsembleExecutor
from robotrl.inference.executor import MODES, Executor, LocalChunkSource, ReceivedChunk, TickRecord
from robotrl.policies.base import ActionChunk, ChunkPolicy, PolicyMetadata, PolicyObservation

STEPPED_MODES = (*MODES, "ensemble")


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
    """A `ChunkPolicy` from a scripted expert built on a `CartesianMover` (both tasks'
    experts): each chunk rolls the expert H ticks from `obs.state_rad`, feeding back its
    own targets. It sees the task as it is at the request (stale vision).

    The expert's plan (its phase and Cartesian reference point) carries over between
    chunks: a chunk starting at tick T resumes from the expert as it was before the
    previous rollout's row for T (the newest earlier snapshot), with its joint state
    re-anchored at `obs.state_rad` (the IK seed and the start of the per-tick joint step
    limit, so a stale state still shows in the first rows). A request whose observation
    tick is not later than the previous request's (a new episode, a server's warm-up call)
    or the first after `reset` starts afresh from `obs.state_rad`.

    Args:
        expert: the env's expert (`env.make_expert()`), `reset(rng)`, `act(q) -> q`, `mover`.
        horizon: H rows per chunk.
        spec: the arm's `RobotSpec` (joints and control rate).
        version: weight version stamped on every chunk.
    """

    def __init__(self, expert, horizon: int, spec, version: int = 0) -> None:
        self.expert = expert
        self.version = version
        self._metadata = PolicyMetadata("scripted_expert", horizon, spec.num_joints,
                                        spec.control_rate_hz, spec.num_joints)
        self._snapshots: dict[int, object] = {}  # tick -> expert before its row for that tick
        self._last_obs_tick: int | None = None

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
        start = obs.tick + obs.delay_ticks
        q = np.asarray(obs.state_rad, dtype=np.float64)
        expert = self._resume(start, obs.tick, q)
        rows, snapshots = [], {}
        for i in range(self._metadata.horizon):
            snapshots[start + i] = _clone(expert)
            q = np.array(expert.act(q), dtype=np.float64)
            rows.append(q)
        snapshots[start + len(rows)] = _clone(expert)
        self._snapshots = {t: e for t, e in self._snapshots.items() if t < start} | snapshots
        return ActionChunk(np.stack(rows), start, self.version)

    def reset(self) -> None:
        self._snapshots = {}
        self._last_obs_tick = None

    def _resume(self, start: int, obs_tick: int, q_rad: np.ndarray):
        if self._last_obs_tick is not None and obs_tick <= self._last_obs_tick:
            self._snapshots = {}
        self._last_obs_tick = obs_tick
        earlier = [t for t in self._snapshots if t <= start]
        if not earlier:
            self.expert.reset(np.random.default_rng(obs_tick))
            return _clone(self.expert)
        expert = _clone(self._snapshots[max(earlier)])
        expert.mover.reanchor_joints(q_rad)
        return expert


def _clone(expert):
    """A copy of `expert` and its mover that can step on without changing the original
    (their arrays are replaced on every step, never written in place)."""
    twin = copy.copy(expert)
    twin.mover = copy.copy(expert.mover)
    return twin


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


def run_stepped_episode(env, seed: int, mode: str, delay_ticks: int | Callable[[np.random.Generator], int],
                        horizon: int = 16, *, threshold: float = 0.5, execute_horizon: int | None = None,
                        policy: ChunkPolicy | None = None, initial_delay_ticks: int | None = None,
                        lag_deadband_rad: np.ndarray | float | None = None) -> SteppedEpisode:
    """Reset `env` with `seed` and run a chunk policy through an executor in `mode` (one of
    `STEPPED_MODES`; "ensemble" is ACT temporal ensembling) until the episode ends.

    Args:
        delay_ticks: the injected inference delay d, fixed or drawn per request from a
            generator seeded with `seed` (see `LocalChunkSource`).
        horizon: H of the default policy, the task's expert (`ExpertChunkPolicy`).
        policy: a `ChunkPolicy` to run instead (reset first; its own horizon counts).
        initial_delay_ticks: where the delay estimator starts; default the fixed delay
            (no warm-up guess). Required for a drawn delay.
        lag_deadband_rad: as for `Executor`.
    """
    if mode not in STEPPED_MODES:
        raise ValueError(f"stepped mode must be one of {STEPPED_MODES}, got {mode!r}")
    if initial_delay_ticks is None:
        if not isinstance(delay_ticks, int):
            raise ValueError("a drawn delay needs initial_delay_ticks")
        initial_delay_ticks = delay_ticks
    env.reset(seed)
    if policy is None:
        policy = ExpertChunkPolicy(env.make_expert(seed), horizon, env.spec)
    policy.reset()
    robot = EnvRobot(env)
    clamps_before = env.robot.stats.step_clamps
    source = LocalChunkSource(policy, delay_ticks, seed=seed)

    def env_state() -> np.ndarray:
        return env.task.env_state(env.sim)

    if mode == "ensemble":
        executor = EnsembleExecutor(robot, source, instruction=env.instruction, env_state=env_state)
    else:
        executor = Executor(robot, source, policy.metadata.horizon, mode, threshold=threshold,
                            execute_horizon=execute_horizon, delay=DelayEstimator(initial_ticks=initial_delay_ticks),
                            instruction=env.instruction, env_state=env_state, lag_deadband_rad=lag_deadband_rad)
    while robot.last_step is None or not robot.last_step.done:
        executor.tick()
    return SteppedEpisode(seed, robot.last_step.success, env.tick, executor.pauses,
                          env.robot.stats.step_clamps - clamps_before, executor.trace, executor.received)
