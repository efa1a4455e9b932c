"""Stepped mode: the episode runner on a simulated `TaskEnv` with an injected delay.

A chunk policy built from the task's scripted expert (`ExpertChunkPolicy`) and
`run_stepped_episode`, which runs a chunk policy through a `LocalChunkSource`, an
`Executor` (or the ACT `EnsembleExecutor`) and the `EpisodeRunner` on the env's
`SimClock` (docs/benchmarks.md: stepped mode, deterministic for a seed). Used by the
benchmarks, evaluation and the tests; simulation only.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import numpy as np

from robotrl.core.policy import ActionChunk, ChunkPolicy, PolicyMetadata, PolicyObservation
from robotrl.core.robot import RobotSpec
from robotrl.core.task import Intervener
from robotrl.inference.ensemble import EnsembleExecutor
from robotrl.inference.executor import MODES, Executor, ExecutorConfig, LocalChunkSource
from robotrl.inference.runner import EpisodeObserver, EpisodeResult, EpisodeRunner
from robotrl.sim.env import TaskEnv
from robotrl.sim.tasks.base import Expert

STEPPED_MODES = (*MODES, "ensemble")


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

    def __init__(self, expert: Expert, horizon: int, spec: RobotSpec, version: int = 0) -> None:
        self.expert = expert
        self.version = version
        self._metadata = PolicyMetadata(
            "scripted_expert", horizon, spec.num_joints, spec.control_rate_hz, spec.num_joints
        )
        self._snapshots: dict[int, Expert] = {}  # tick -> expert before its row for that tick
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

    def _resume(self, start: int, obs_tick: int, q_rad: np.ndarray) -> Expert:
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


def _clone(expert: Expert) -> Expert:
    """A copy of `expert` and its mover that can step on without changing the original
    (their arrays are replaced on every step, never written in place)."""
    twin = copy.copy(expert)
    twin.mover = copy.copy(expert.mover)
    return twin


def run_stepped_episode(
    env: TaskEnv,
    seed: int,
    mode: str,
    delay_ticks: int | Callable[[np.random.Generator], int],
    horizon: int = 16,
    *,
    threshold: float | None = None,
    execute_horizon: int | None = None,
    policy: ChunkPolicy | None = None,
    initial_delay_ticks: int | None = None,
    lag_deadband_rad: float | None = None,
    max_in_flight: int = 1,
    slow_every: int = 1,
    intervener: Intervener | None = None,
) -> EpisodeResult:
    """Reset `env` with `seed` and run a chunk policy through an executor in `mode` (one of
    `STEPPED_MODES`; "ensemble" is ACT temporal ensembling) until the episode ends.

    Args:
        delay_ticks: the injected inference delay d, fixed or drawn per request from a
            generator seeded with `seed` (see `LocalChunkSource`).
        horizon: H of the default policy, the task's expert (`ExpertChunkPolicy`).
        policy: a `ChunkPolicy` to run instead (reset first; its own horizon counts).
        initial_delay_ticks: where the delay estimator starts; default the fixed delay
            (no warm-up guess). Required for a drawn delay.
        threshold, execute_horizon, lag_deadband_rad, max_in_flight: as for `ExecutorConfig`.
        slow_every: requests per slow-pathway refresh (see `LocalChunkSource`).
        intervener: who may take over, or None.
    """
    if mode not in STEPPED_MODES:
        raise ValueError(f"stepped mode must be one of {STEPPED_MODES}, got {mode!r}")
    if initial_delay_ticks is None:
        if not isinstance(delay_ticks, int):
            raise ValueError("a drawn delay needs initial_delay_ticks")
        initial_delay_ticks = delay_ticks
    env.begin(seed)  # the expert is made for this episode's scene
    if policy is None:
        policy = ExpertChunkPolicy(env.make_expert(seed), horizon, env.spec)
    policy.reset()
    source = LocalChunkSource(policy, delay_ticks, seed=seed, slow_every=slow_every)
    if mode == "ensemble":
        executor: Executor | EnsembleExecutor = EnsembleExecutor(
            env.robot,
            source,
            past_frame_ticks=policy.metadata.past_frame_ticks,
            past_frames=policy.metadata.past_frames,
        )
    else:
        config = ExecutorConfig(mode, threshold, execute_horizon, lag_deadband_rad, max_in_flight)
        executor = Executor(
            env.robot,
            source,
            policy.metadata.horizon,
            config,
            initial_delay_ticks=initial_delay_ticks,
            intervener=intervener,
            past_frame_ticks=policy.metadata.past_frame_ticks,
            past_frames=policy.metadata.past_frames,
            execute_steps=policy.metadata.execute_steps,
        )
    result = EpisodeRunner(env.robot, env, executor, env.clock).run(seed)
    if source.estimate_errors:
        result.estimate_errors = np.stack(source.estimate_errors)
    return result


class ClosedLoopPolicy:
    """A per-tick policy (measured joints -> next target) as a one-row `ChunkPolicy`:
    run synchronously with delay 0 it acts on every tick's fresh reading."""

    def __init__(self, act: Callable[[np.ndarray], np.ndarray], spec: RobotSpec, name: str = "closed_loop") -> None:
        self.act = act
        self._metadata = PolicyMetadata(name, 1, spec.num_joints, spec.control_rate_hz, spec.num_joints)

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
        return ActionChunk(np.asarray(self.act(obs.state_rad), dtype=np.float64)[None], obs.tick)

    def reset(self) -> None:
        """Stateless."""


def run_closed_loop(
    env: TaskEnv,
    make_policy: Callable[[TaskEnv, int], Callable[[np.ndarray], np.ndarray]],
    seed: int,
    observers: Sequence[EpisodeObserver] = (),
) -> EpisodeResult:
    """One episode of a per-tick policy (`robotrl.sim.rollout.POLICIES`) through the
    runner: `make_policy(env, seed)` is called once the scene of `seed` is set."""
    env.begin(seed)
    policy = ClosedLoopPolicy(make_policy(env, seed), env.spec)
    executor = Executor(env.robot, LocalChunkSource(policy), 1, ExecutorConfig("sync"))
    return EpisodeRunner(env.robot, env, executor, env.clock, observers=observers).run(seed)
