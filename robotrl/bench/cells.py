"""One benchmark cell: a stepped episode of (scenario, mode, delay, seed) and its record.

`run_cell(setup, cell)` is a pure function of its arguments (same cell, same record),
so cells can run in any order, in any process (Ray workers), and be cached by key.
Each process keeps one `TaskEnv` per (task, scenario) and one loaded checkpoint.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from robotrl.bench.metrics import reaction_ticks, staleness_histogram
from robotrl.inference.chunking import boundary_discontinuity_ratio, boundary_jerk_ratio, prefix_consistency
from robotrl.inference.delayed import DelaySpec
from robotrl.inference.runner import EpisodeResult
from robotrl.inference.stepped import STEPPED_MODES, run_stepped_episode
from robotrl.sim.scenario import Scenario

if TYPE_CHECKING:
    from robotrl.core.clock import Clock
    from robotrl.core.policy import ChunkPolicy
    from robotrl.hardware.kinematics import Kinematics
    from robotrl.sim.env import TaskEnv


PIPELINED_MODES = ("naive", "vlash", "vlash+rtc")
"""Modes that may keep several requests in flight (`BenchSetup.max_in_flight`); sync
waits for each chunk, the ensemble asks every tick."""


@dataclass(frozen=True)
class BenchSetup:
    """What stays the same for every cell of a run (its fingerprint keys the cache)."""

    task: str = "reach"
    """Simulated task: "reach" (the target jumps: reaction time) or "pick_place"."""
    checkpoint: str | None = None
    """Policy checkpoint folder; None runs the task's scripted expert as a chunk policy."""
    horizon: int = 16
    """H, rows per chunk of the scripted expert (a checkpoint brings its own)."""
    execute_horizon: int = 15
    """s, rows per chunk in sync mode (capped at H) and in the time model; 15 = 0.5 s at 30 Hz."""
    threshold: float = 1.0
    """Async modes request when queued rows / H <= threshold; 1 re-plans as soon as a reply is in."""
    reaction_speed_m_s: float = 0.1
    """Speed toward the jumped reach target that counts as reacting."""
    lag_deadband_rad: float | None = None
    """vlash modes: the arm joints' `carry_lag` deadband (rad); None forwards the targets alone."""
    max_in_flight: int = 1
    """Async modes: requests in flight at once (`ExecutorConfig.max_in_flight`); in real
    time the server gets as many model workers."""
    device: str = "cpu"
    """Where the checkpoint's model runs: "cpu" or "cuda:N"."""
    noise_scale: float = 1.0
    """A flow-matching checkpoint's initial noise scale (`load_policy`; 0: its central chunk)."""

    def fingerprint(self) -> str:
        """Hash of the fields and of the checkpoint files' modification times (a checkpoint
        trained again in the same folder invalidates cached episodes); the CPU device, one
        request in flight and a noise scale of 1 are left out, so episodes cached before
        they existed still count. A checkpoint's episodes start at its start pose
        (`make_env`); those cached when they started at home do not count."""
        doc = asdict(self)
        if self.device == "cpu":
            del doc["device"]
        if self.max_in_flight == 1:
            del doc["max_in_flight"]
        if self.noise_scale == 1.0:
            del doc["noise_scale"]
        if self.checkpoint is not None:
            doc["checkpoint_mtime_ns"] = max((f.stat().st_mtime_ns for f in Path(self.checkpoint).iterdir()), default=0)
            doc["start"] = "the policy's start pose"
        return hashlib.sha1(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Cell:
    """One episode: `scenario` physics, executor `mode`, injected `delay`, `seed`."""

    scenario: Scenario
    mode: str
    delay: DelaySpec
    seed: int

    def __post_init__(self) -> None:
        if self.mode not in STEPPED_MODES:
            raise ValueError(f"mode must be one of {STEPPED_MODES}, got {self.mode!r}")

    @property
    def key(self) -> str:
        return f"{self.scenario.name}|{self.mode}|{self.delay.label}|{self.seed}"


_ENVS: dict[tuple, TaskEnv] = {}
_POLICIES: dict[tuple[str, str, float], ChunkPolicy] = {}
_KINEMATICS: dict[str, Kinematics] = {}


def setup_policy(setup: BenchSetup) -> ChunkPolicy:
    """The `ChunkPolicy` of `setup`'s checkpoint, on its device with its noise scale,
    loaded once per process."""
    assert setup.checkpoint is not None, "the scripted expert has no checkpoint"
    key = (setup.checkpoint, setup.device, setup.noise_scale)
    if key not in _POLICIES:
        from robotrl.policies.loading import load_policy

        _POLICIES[key] = load_policy(Path(setup.checkpoint), device=setup.device, noise_scale=setup.noise_scale)
    return _POLICIES[key]


def make_env(setup: BenchSetup, scenario: Scenario, clock: Clock | None = None) -> TaskEnv:
    """A `TaskEnv` for (task, scenario) rendering the checkpoint's cameras and starting its
    episodes at its start pose (no cameras and home for the expert, which reads privileged
    state). Stepped (`clock` None): this process's cached one; with a clock (e.g.
    `WallClock`): a new one, the caller closes it."""
    key = (setup.task, scenario, setup.checkpoint)
    if clock is None and key in _ENVS:
        return _ENVS[key]
    from robotrl.inference.evaluation import make_env as policy_env
    from robotrl.sim.env import TaskEnv

    if setup.checkpoint is None:
        env = TaskEnv(setup.task, scenario, cameras=(), clock=clock)
    else:
        env = policy_env(setup_policy(setup), setup.task, scenario, clock)
    if clock is None:
        _ENVS[key] = env
    return env


def chunk_horizon(setup: BenchSetup) -> int:
    """H of the policy the cells run."""
    return setup_policy(setup).metadata.horizon if setup.checkpoint else setup.horizon


def run_cell(setup: BenchSetup, cell: Cell) -> dict:
    """Run `cell`'s stepped episode; its JSON-ready metrics record."""
    env = make_env(setup, cell.scenario)
    policy = setup_policy(setup) if setup.checkpoint else None
    horizon = chunk_horizon(setup)
    delay = cell.delay
    episode = run_stepped_episode(
        env,
        cell.seed,
        cell.mode,
        delay.low if delay.fixed else delay.draw,
        setup.horizon,
        threshold=setup.threshold,
        execute_horizon=min(setup.execute_horizon, horizon),
        policy=policy,
        initial_delay_ticks=delay.high,
        lag_deadband_rad=setup.lag_deadband_rad,
        max_in_flight=setup.max_in_flight if cell.mode in PIPELINED_MODES else 1,
    )
    return episode_record(setup, cell, episode, env)


def episode_record(setup: BenchSetup, cell: Cell, episode: EpisodeResult, env: TaskEnv) -> dict:
    """The metrics of one finished episode (NaN stored as None)."""
    trace = episode.trace
    requested = episode.requested_rad()
    sent = np.stack([r.sent_rad for r in trace])
    # The ensemble mixes every chunk into every tick: it has no chunk boundaries.
    switches = [] if cell.mode == "ensemble" else episode.switch_ticks()
    chunks = episode.received
    errors = episode.estimate_errors
    prefix = [
        prefix_consistency(a.chunk, b.chunk, max(1, b.arrival_tick - b.obs_tick)) for a, b in zip(chunks, chunks[1:])
    ]
    record = {
        "key": cell.key,
        "task": setup.task,
        "scenario": cell.scenario.name,
        "mode": cell.mode,
        "delay": cell.delay.label,
        "delay_mean_ticks": cell.delay.mean_ticks,
        "seed": cell.seed,
        "success": bool(episode.success),
        "ticks": int(episode.ticks),
        "pauses": int(episode.pauses),
        "step_clamps": int(episode.step_clamps),
        "chunks": len(chunks),
        "staleness": {str(k): v for k, v in staleness_histogram(episode.row_ages()).items()},
        "disc_ratio_requested": _finite(boundary_discontinuity_ratio(requested, switches)),
        "disc_ratio_executed": _finite(boundary_discontinuity_ratio(sent, switches)),
        "jerk_ratio_requested": _finite(boundary_jerk_ratio(requested, switches)),
        "jerk_ratio_executed": _finite(boundary_jerk_ratio(sent, switches)),
        "prefix_consistency_rad": _finite(np.nanmean(prefix)) if any(np.isfinite(prefix)) else None,
        "jump_tick": None,
        "reaction_ticks": None,
        "estimate_requests": 0 if errors is None else len(errors),
        "estimate_mean_square": None if errors is None else (errors**2).mean(0).tolist(),
    }
    task: Any = env.task  # reach's `jump_tick` and `target_m` are not part of the `Task` protocol
    jump_tick = getattr(task, "jump_tick", None)
    if jump_tick is not None:  # reach: the target after the jump is the current one
        kin = _kinematics(env)
        ee = np.stack([kin.ee_position(q) for q in sent])
        record["jump_tick"] = int(jump_tick)
        record["reaction_ticks"] = reaction_ticks(ee, task.target_m, jump_tick, env.dt_s, setup.reaction_speed_m_s)
    return record


def _kinematics(env: TaskEnv) -> Kinematics:
    """The pinocchio model of `env`'s arm, built once per process."""
    name = env.sim.arm.name
    if name not in _KINEMATICS:
        from robotrl.hardware.kinematics import Kinematics

        _KINEMATICS[name] = Kinematics(env.sim.arm)
    return _KINEMATICS[name]


def _finite(value) -> float | None:
    return float(value) if value is not None and np.isfinite(value) else None
