"""`EpisodeRunner`: the one episode loop of robotrl.

Real-time deploy, the online-learning actors, the stepped benchmarks and evaluation
(`bench policy`, the trainer's periodic evaluation) are all this loop; they differ only
in the clock (wall or simulated), the chunk source (a server, or a local policy with an
injected delay), the executor's mode and the observers attached.

Each tick:
1. read the arm once (`SafeRobot.read`: joints and camera frames) and the task's
   privileged features (sim only);
2. the executor takes in chunks, maybe requests one, lets the intervener take over, and
   commands this tick's target through `SafeRobot`;
3. the clock waits out the control period (`Rate`: a `SimClock` just advances);
4. the task scores the tick (reward, success, done); a person's success/failure label
   (`Intervener.outcome`) overrides it and ends the episode;
5. every observer's `on_tick` sees the reading, the executor's record and the verdict.

The episode ends when the task is done, a label was given, or `max_ticks` ran out.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from robotrl.core.clock import Clock, Rate
from robotrl.core.robot import RobotState
from robotrl.core.task import Task, TaskOutcome
from robotrl.hardware.safety import SafeRobot
from robotrl.inference.ensemble import EnsembleExecutor
from robotrl.inference.executor import Executor, ReceivedChunk, TickRecord
from robotrl.inference.start_pose import hold_still, move_to_start

log = logging.getLogger(__name__)

STATUS_EVERY_TICKS = 15
"""Ticks between two refreshes of the live status line (0.5 s at 30 Hz)."""


@dataclass(frozen=True)
class TickEvent:
    """What observers see of one tick."""

    state: RobotState
    """The reading the tick acted on (before its command)."""
    env_state: np.ndarray
    """(E,) the task's privileged features at that reading; (0,) on a real arm."""
    record: TickRecord
    """What the executor did."""
    outcome: TaskOutcome
    """The verdict after the tick (a person's label already applied)."""
    missed_ticks: int = 0
    """Ticks of this episode so far, this one included, whose work overran the control
    period (wall clock only; `EpisodeResult.missed_ticks` at the end)."""


@dataclass
class EpisodeResult:
    """One episode's outcome, the same for every use of the runner."""

    seed: int
    success: bool
    ticks: int
    episode_return: float
    pauses: int
    """Ticks the arm held for lack of a queued action."""
    step_clamps: int
    """Ticks the safety step clamp acted."""
    safety_clamps: int
    """Step, joint-limit and workspace clamps together."""
    missed_ticks: int
    """Ticks whose work overran the control period (wall clock only)."""
    intervention_ticks: int
    """Ticks whose executed target came from the intervener."""
    takeovers: int
    """Times the intervener took over."""
    versions: list[int]
    """Weight versions of the chunks executed, ascending (holds excluded)."""
    read_ms: list[float] = field(default_factory=list)
    """Per tick, how long reading the arm took (motors and cameras), milliseconds."""
    frame_ages_ms: list[float] = field(default_factory=list)
    """Per tick and camera, how old its frame was when the arm was read (lerobot's capture
    stamp on a real arm, 0 on the simulated one: it renders at the reading), milliseconds;
    unknown ages left out. The policy's image is this much older than its joints."""
    trace: list[TickRecord] = field(default_factory=list)
    received: list[ReceivedChunk] = field(default_factory=list)
    estimate_errors: np.ndarray | None = None
    """(R, E) per request of a policy that estimates env_state from its images: the
    estimate minus the simulator's env_state (stepped evaluation; None otherwise)."""

    def delays_ticks(self) -> list[int]:
        """Measured delay of every chunk taken in (arrival tick - request tick)."""
        return [r.arrival_tick - r.obs_tick for r in self.received]

    def row_ages(self) -> list[int]:
        """Age of every policy row executed, in ticks: its tick minus the tick of the
        observation it was planned from (d .. 2d - 1 with one request in flight at delay d,
        d with d in flight); held ticks excluded."""
        return [r.tick - r.obs_tick for r in self.trace if not r.paused]

    def requested_rad(self) -> np.ndarray:
        """(T, J) requested targets (before the safety layer)."""
        return np.stack([r.requested_rad for r in self.trace])

    def switch_ticks(self) -> list[int]:
        """Trace indices where a row came from a different chunk than the tick before."""
        return [
            k
            for k in range(1, len(self.trace))
            if self.trace[k].chunk_id >= 0 and self.trace[k].chunk_id != self.trace[k - 1].chunk_id
        ]


class EpisodeObserver(Protocol):
    """Watches the loop; never commands the arm."""

    def on_episode_start(self, seed: int, instruction: str) -> None: ...

    def on_tick(self, event: TickEvent) -> None: ...

    def on_episode_end(self, result: EpisodeResult) -> None: ...


class ArmTask:
    """The `Task` of a real arm: a person resets the scene, there is no reward, the
    instruction is fixed; episodes end by a person's label or the tick limit. Each episode
    begins (`start_pose`) with the move to `start_rad` (the served policy's start pose;
    None: the arm starts where it stands), then `on_reset()` if given (a twin lays out
    its next scene; the arm is commanded to stay first, so the scene is driven from its
    first tick) and `reset_s` seconds of the arm held still while the scene is reset.
    Both wait on `clock`."""

    env_state_dim = 0

    def __init__(
        self,
        robot: SafeRobot,
        instruction: str,
        clock: Clock | None = None,
        start_rad: np.ndarray | None = None,
        reset_s: float = 0.0,
        on_reset: Callable[[], None] | None = None,
    ) -> None:
        if (start_rad is not None or reset_s > 0) and clock is None:
            raise ValueError("moving to a start pose or holding for a reset needs the arm's clock")
        if reset_s < 0:
            raise ValueError(f"reset_s must be >= 0, got {reset_s}")
        self.robot, self.instruction, self.clock, self.start_rad = robot, instruction, clock, start_rad
        self.reset_s, self.on_reset = reset_s, on_reset

    def begin(self, seed: int) -> str:
        if self.start_rad is not None and self.clock is not None:
            move_to_start(self.robot, self.clock, self.start_rad)
        if self.on_reset is not None or self.reset_s > 0:
            here = self.robot.read().q_rad if self.start_rad is None else self.start_rad
            if self.on_reset is not None:
                self.robot.command(here)  # driven before the scene appears (an arm at its start pose was not moved)
                self.on_reset()
            if self.reset_s > 0 and self.clock is not None:
                log.info("reset the scene: the episode starts in %g s", self.reset_s)
                hold_still(self.robot, self.clock, here, self.reset_s)
        self.robot.resync()
        return self.instruction

    def env_state(self) -> np.ndarray:
        return np.zeros(0, np.float32)

    def score(self, tick: int) -> TaskOutcome:
        return TaskOutcome(0.0, False, False)


class EpisodeRunner:
    """Runs episodes of `task` on `robot` with `executor`, paced by `clock`.

    Args:
        robot: the `SafeRobot` (the executor commands it; the runner reads it).
        task: reset, instruction and scoring.
        executor: an `Executor` (or the ACT `EnsembleExecutor` of the benchmarks); its
            intervener, if any, is told when episodes begin and end.
        clock: `WallClock` (real time) or the task's `SimClock` (stepped).
        observers: see `EpisodeObserver`.
    """

    def __init__(
        self,
        robot: SafeRobot,
        task: Task,
        executor: Executor | EnsembleExecutor,
        clock: Clock,
        *,
        observers: Sequence[EpisodeObserver] = (),
    ) -> None:
        self.robot, self.task, self.executor, self.clock = robot, task, executor, clock
        self.observers = list(observers)

    def run(self, seed: int, max_ticks: int | None = None) -> EpisodeResult:
        """One episode seeded `seed`, at most `max_ticks` ticks (None: until the task ends it)."""
        self.begin(seed)
        while not self.outcome.done and (max_ticks is None or self.ticks < max_ticks):
            self.tick()
        return self.finish()

    def begin(self, seed: int) -> str:
        """Start the episode seeded `seed` (the task resets the scene); its instruction."""
        self.seed = seed
        instruction = self.task.begin(seed)
        if self.executor.intervener is not None:
            self.executor.intervener.begin_episode(seed)
        self.executor.begin_episode(instruction)
        for observer in self.observers:
            observer.on_episode_start(seed, instruction)
        stats = self.robot.stats
        self._clamps_before = (stats.step_clamps, stats.step_clamps + stats.limit_clamps + stats.workspace_clamps)
        self._rate = Rate(self.clock, self.robot.spec.control_rate_hz)
        self.ticks, self.episode_return, self.outcome = 0, 0.0, TaskOutcome(0.0, False, False)
        self._read_ms: list[float] = []
        self._frame_ages_ms: list[float] = []
        return instruction

    def tick(self) -> TickEvent:
        """One control tick (see the module docstring)."""
        started = time.perf_counter()
        state = self.robot.read()
        self._read_ms.append((time.perf_counter() - started) * 1e3)
        ages_s = [state.image_ages_s.get(camera, 0.0) for camera in state.images]  # none given: rendered now
        self._frame_ages_ms += [age * 1e3 for age in ages_s if np.isfinite(age)]
        env_state = self.task.env_state()
        record = self.executor.tick(state, env_state)
        self._rate.sleep()
        self.ticks += 1
        intervener = self.executor.intervener
        self.outcome = _labelled(self.task.score(self.ticks), None if intervener is None else intervener.outcome)
        self.episode_return += self.outcome.reward
        event = TickEvent(state, env_state, record, self.outcome, self._rate.overruns)
        for observer in self.observers:
            observer.on_tick(event)
        return event

    def finish(self) -> EpisodeResult:
        """End the episode; its result."""
        intervener = self.executor.intervener
        if intervener is not None:
            intervener.end_episode(self.outcome.success)
        stats, trace = self.robot.stats, self.executor.trace
        result = EpisodeResult(
            seed=self.seed,
            success=bool(self.outcome.success),
            ticks=self.ticks,
            episode_return=float(self.episode_return),
            pauses=sum(r.paused for r in trace),
            step_clamps=stats.step_clamps - self._clamps_before[0],
            safety_clamps=stats.step_clamps + stats.limit_clamps + stats.workspace_clamps - self._clamps_before[1],
            missed_ticks=self._rate.overruns,
            intervention_ticks=sum(r.intervened for r in trace),
            takeovers=0 if intervener is None else intervener.episode_takeovers,
            versions=sorted({r.version for r in trace if r.version >= 0}),
            read_ms=self._read_ms,
            frame_ages_ms=self._frame_ages_ms,
            trace=trace,
            received=self.executor.received,
        )
        for observer in self.observers:
            observer.on_episode_end(result)
        return result


def _labelled(outcome: TaskOutcome, label: bool | None) -> TaskOutcome:
    """`outcome` with a person's label applied: it sets success, ends the episode, and a
    success earns reward 1 on that tick (a real arm has no reward of its own)."""
    if label is None:
        return outcome
    reward = 1.0 if label and not outcome.done else outcome.reward
    return TaskOutcome(reward, label, True, outcome.info)


class StatusLine:
    """An observer printing one live line: control rate, missed ticks, delay estimate,
    weight version, pauses, on `stream` (default: the standard output when it is made, not
    when this module was imported: a replaced `sys.stdout` may be closed by then)."""

    def __init__(self, executor: Executor, stream=None) -> None:
        self.executor, self.stream = executor, sys.stdout if stream is None else stream
        self._start_s = time.monotonic()
        self._ticks = self._paused = 0

    def on_episode_start(self, seed: int, instruction: str) -> None:
        self._start_s = time.monotonic()
        self._ticks = self._paused = 0

    def on_tick(self, event: TickEvent) -> None:
        self._ticks += 1
        self._paused += event.record.paused
        if self._ticks % STATUS_EVERY_TICKS:
            return
        hz = self._ticks / max(time.monotonic() - self._start_s, 1e-9)
        self.stream.write(
            f"\r  {hz:5.1f} Hz  delay {self.executor.delay.estimate():2d} ticks  "
            f"version {max(event.record.version, 0)}  paused {self._paused:3d}   "
        )
        self.stream.flush()

    def on_episode_end(self, result: EpisodeResult) -> None:
        self.stream.write("\n")
        self.stream.flush()


def latency_summary(episodes: Sequence[EpisodeResult]) -> dict[str, dict[str, float]]:
    """p50 / p95 / max, in ticks, of the measured chunk delays ("inference delay") and of the
    ages of the rows executed ("row age") of `episodes`; a key with no values is left out."""
    out = {}
    for name, values in (
        ("inference delay", [d for e in episodes for d in e.delays_ticks()]),
        ("row age", [a for e in episodes for a in e.row_ages()]),
    ):
        if values:
            p50, p95 = np.percentile(values, [50, 95])
            out[name] = {"p50": float(p50), "p95": float(p95), "max": float(max(values))}
    return out
