"""The robot-side executor: paces the arm through an action queue keyed by absolute tick.

Each control tick it takes in chunks that have arrived, asks its `ChunkSource` for the
next chunk when the queue runs low, and sends the queued target for this tick through
`robot.command` (a `SafeRobot`). With nothing queued it holds the last target it sent
(the measured position before the first command).
Robot side: no torch, no mujoco. Angles are radians, times are control ticks.

Modes (ALGORITHMS.md section 1):
- "sync": execute s rows, hold while the next chunk is computed (the waiting ticks are
  pauses), start it where the robot stopped.
- "naive": lerobot async: request at the threshold with the measured state, the chunk is
  keyed from the observation tick, overlapping rows blend 0.3 old + 0.7 new.
- "vlash": the state is forwarded over the in-flight queued rows to the tick the chunk
  starts (t + d); the chunk replaces the queue from that tick. With `lag_deadband_rad`,
  the arm's tracking error beyond the deadband is carried into that state (`carry_lag`).
- "vlash+rtc": as "vlash", and the queued rows for the new chunk's own ticks (t + d on,
  the plan it replaces) go along as `prefix_rad`: the policy is guided toward them (RTC).

Intervention (ALGORITHMS.md section 4): an optional `intervention(tick, requested_rad)`
hook may return a human/teleop target that replaces the policy's row for that tick (the
tick is flagged `intervened`). Chunks keep coming meanwhile (the policy's rows are what
it would have done). When the human lets go, the queue is dropped and a fresh chunk is
requested from the state the human left the arm in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from robotrl.clock import Rate
from robotrl.inference.chunking import DelayEstimator, carry_lag, forward_state, should_request, splice
from robotrl.policies.base import ActionChunk, ChunkPolicy, PolicyObservation

log = logging.getLogger(__name__)

MODES = ("sync", "naive", "vlash", "vlash+rtc")


class ChunkSource(Protocol):
    """Where chunks come from: a local policy (stepped mode) or a remote server."""

    def request(self, obs: PolicyObservation) -> None:
        """Ask for a chunk for `obs`; returns at once."""
        ...

    def poll(self, now_tick: int) -> ActionChunk | None:
        """A chunk that has arrived by tick `now_tick`, oldest first, or None."""
        ...


class LocalChunkSource:
    """A `ChunkSource` for stepped mode: the chunk is computed at once from the
    observation it was given and becomes available `delay_ticks` after the request tick.

    Args:
        policy: a `ChunkPolicy`.
        delay_ticks: the injected inference delay d_inj in ticks, or a function drawing
            it from a `numpy.random.Generator` (seeded by `seed`) for each request.
        seed: seed of that generator.
    """

    def __init__(self, policy: ChunkPolicy, delay_ticks: int | Callable[[np.random.Generator], int] = 0,
                 seed: int = 0) -> None:
        self.policy = policy
        self.delay_ticks = delay_ticks
        self._rng = np.random.default_rng(seed)
        self._pending: list[tuple[int, ActionChunk]] = []  # (ready tick, chunk), oldest first

    def request(self, obs: PolicyObservation) -> None:
        d = self.delay_ticks if isinstance(self.delay_ticks, int) else int(self.delay_ticks(self._rng))
        if d < 0:
            raise ValueError(f"injected delay must be >= 0 ticks, got {d}")
        self._pending.append((obs.tick + d, self.policy.predict_chunk(obs)))

    def poll(self, now_tick: int) -> ActionChunk | None:
        if self._pending and self._pending[0][0] <= now_tick:
            return self._pending.pop(0)[1]
        return None


@dataclass
class TickRecord:
    """What the executor did in one control tick."""

    tick: int
    requested_rad: np.ndarray
    """(J,) target taken from the queue (the hold target while paused), before safety."""
    sent_rad: np.ndarray
    """(J,) what `robot.command` really sent."""
    chunk_id: int
    """Executor-assigned id of the chunk the row came from; -1 while paused."""
    version: int
    """Weight version of that chunk; -1 while paused."""
    obs_tick: int
    """Tick of the observation the row was conditioned on; -1 while paused."""
    delay_ticks: int
    """d the chunk was requested with (the current estimate while paused)."""
    queue_len: int
    """Rows queued for later ticks after this one."""
    paused: bool
    """True when nothing was queued for this tick and the robot held."""
    intervened: bool = False
    """True when the intervention hook's target replaced the policy's row."""
    policy_rad: np.ndarray | None = None
    """(J,) the policy's row (or the hold target) when `intervened`; None: `requested_rad`."""


@dataclass
class ReceivedChunk:
    """A chunk as the executor took it in (for prefix consistency and latency stats)."""

    chunk_id: int
    chunk: ActionChunk
    obs_tick: int
    request_delay_ticks: int
    """d sent with the request (the estimate then)."""
    arrival_tick: int
    dropped_rows: int


def step_limit_rad(robot) -> np.ndarray:
    """(J,) per-tick step the safety layer allows: velocity limit x period x the
    `SafeRobot` velocity scale (1 for a robot without `limits`)."""
    spec = robot.spec
    scale = getattr(getattr(robot, "limits", None), "velocity_scale", 1.0)
    return spec.max_velocity_rad_s * spec.dt_s * scale


class Executor:
    """Drives `robot` from chunks of `source`, one `tick()` per control period.

    Args:
        robot: `SafeRobot`-like: `spec`, `read() -> RobotState`, `command(q) -> sent`.
        source: the `ChunkSource`.
        horizon: H, rows per chunk.
        mode: one of `MODES`.
        threshold: async modes request when queued rows / H <= threshold.
        execute_horizon: s, rows of each chunk executed in "sync" mode (default H).
        delay: the inference delay estimator (default `DelayEstimator()`).
        instruction: sent with every observation.
        lost_errors: exception types of `source` meaning "server lost": hold, retry later.
        env_state: optional callable returning privileged features for the observation.
        start_tick: absolute tick of the first `tick()`.
        intervention: optional hook `(tick, requested_rad (J,)) -> (J,) target | None`
            called every tick; a target replaces the policy's row (a human took over).
        lag_deadband_rad: vlash modes: (J,) or scalar deadband of `carry_lag` (see
            `arm_deadband`); None forwards the targets alone.

    Attributes:
        trace: one `TickRecord` per tick, for benchmarks.
        received: every chunk taken in, as `ReceivedChunk`.
        lost: True from a `lost_errors` exception until the next chunk arrives.
        stale_replies: chunks dropped because they answered no request in flight.
        intervening: True while the intervention hook drives the arm.
    """

    def __init__(self, robot, source: ChunkSource, horizon: int, mode: str = "vlash", *,
                 threshold: float = 0.5, execute_horizon: int | None = None,
                 delay: DelayEstimator | None = None, instruction: str = "",
                 lost_errors: tuple[type[BaseException], ...] = (),
                 env_state: Callable[[], np.ndarray] | None = None, start_tick: int = 0,
                 intervention: Callable[[int, np.ndarray], np.ndarray | None] | None = None,
                 lag_deadband_rad: np.ndarray | float | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"Executor mode must be one of {MODES}, got {mode!r}")
        s = horizon if execute_horizon is None else execute_horizon
        if horizon <= 0 or not 0 < s <= horizon:
            raise ValueError(f"need horizon > 0 and 0 < execute_horizon <= horizon, got {horizon}, {s}")
        should_request(0, horizon, threshold, False)  # validates threshold
        self.robot, self.source, self.mode = robot, source, mode
        self.horizon, self.threshold, self.execute_horizon = horizon, threshold, s
        self.delay = delay if delay is not None else DelayEstimator()
        self.instruction = instruction
        self.lost_errors = lost_errors
        self.env_state = env_state
        self.intervention = intervention
        self.lag_deadband_rad = lag_deadband_rad
        self.intervening = False
        self.now_tick = start_tick
        self.max_step_rad = step_limit_rad(robot)
        self.trace: list[TickRecord] = []
        self.received: list[ReceivedChunk] = []
        self.lost = False
        self.stale_replies = 0
        self._queue: dict[int, np.ndarray] = {}
        self._origin: dict[int, int] = {}  # tick -> index into self.received
        self._in_flight: tuple[int, int] | None = None  # (request tick, d sent)
        self._hold_rad: np.ndarray | None = None

    # -- control loop ---------------------------------------------------------------------
    def tick(self) -> TickRecord:
        """One control tick: take in chunks, maybe request, command this tick's target."""
        now = self.now_tick
        if self._hold_rad is None:
            self._hold_rad = np.array(self.robot.read().q_rad, dtype=np.float64)
        row, origin = self._next_row(now)
        human = None
        if self.intervention is not None:
            human = self.intervention(now, self._hold_rad if row is None else row)
            if human is None and self.intervening:  # let go: plan afresh from here
                self._drop_plan()
                row, origin = self._next_row(now)
            self.intervening = human is not None
        planned = self._hold_rad if row is None else row
        requested = planned if human is None else np.asarray(human, dtype=np.float64)
        sent = np.asarray(self.robot.command(requested), dtype=np.float64)
        self._hold_rad = sent.copy()
        held = row is None
        got = None if held else self.received[origin]
        record = TickRecord(
            tick=now, requested_rad=np.array(requested), sent_rad=sent,
            chunk_id=-1 if held else got.chunk_id, version=-1 if held else got.chunk.version,
            obs_tick=-1 if held else got.obs_tick,
            delay_ticks=self.delay.estimate() if held else got.request_delay_ticks,
            queue_len=len(self._queue), paused=held, intervened=human is not None,
            policy_rad=None if human is None else np.array(planned))
        self.trace.append(record)
        self.now_tick = now + 1
        return record

    def run(self, n_ticks: int, rate: Rate | None = None) -> list[TickRecord]:
        """`n_ticks` ticks paced by `rate` (None when `robot.command` paces itself, e.g. a
        stepped `TaskEnv`); returns their records."""
        records = []
        for _ in range(n_ticks):
            records.append(self.tick())
            if rate is not None:
                rate.sleep()
        return records

    @property
    def pauses(self) -> int:
        """Ticks so far at which the robot held for lack of a queued row."""
        return sum(r.paused for r in self.trace)

    # -- requests and replies -------------------------------------------------------------
    def _next_row(self, now: int) -> tuple[np.ndarray | None, int | None]:
        """Take in chunks, maybe request one, pop this tick's (row, origin) (None: hold)."""
        self._receive(now)
        if self._wants_chunk(now):
            self._request(now)
            self._receive(now)
        return self._queue.pop(now, None), self._origin.pop(now, None)

    def _drop_plan(self) -> None:
        """Forget the queue and the request in flight (its reply will be dropped)."""
        self._queue.clear()
        self._origin.clear()
        self._in_flight = None

    def _remaining(self, now: int) -> int:
        """Queued rows for consecutive ticks from `now` on."""
        n = 0
        while now + n in self._queue:
            n += 1
        return n

    def _wants_chunk(self, now: int) -> bool:
        if self.mode == "sync":
            return self._in_flight is None and self._remaining(now) == 0
        return should_request(self._remaining(now), self.horizon, self.threshold, self._in_flight is not None)

    def _request(self, now: int) -> None:
        measured = self.robot.read()
        d = self.delay.estimate()
        obs = PolicyObservation(state_rad=np.array(measured.q_rad, dtype=np.float64), tick=now,
                                instruction=self.instruction, images=dict(measured.images),
                                env_state=self.env_state() if self.env_state is not None else None)
        if self.mode.startswith("vlash"):
            start = self._hold_rad  # the last target sent: where the step clamp starts from
            in_flight = np.array([self._queue[now + i] for i in range(min(d, self._remaining(now)))])
            in_flight = in_flight.reshape(-1, len(start))
            obs.state_rad = forward_state(start, in_flight, d, max_step_rad=self.max_step_rad)
            if self.lag_deadband_rad is not None:
                target = forward_state(start, in_flight, 1, max_step_rad=self.max_step_rad)  # this tick's
                obs.state_rad = carry_lag(obs.state_rad, target, measured.q_rad, self.lag_deadband_rad)
            obs.delay_ticks = d
            if self.mode == "vlash+rtc":  # the current plan for the new chunk's own ticks
                tail = [self._queue[t] for t in sorted(self._queue) if t >= now + d]
                obs.prefix_rad = np.array(tail) if tail else None
        try:
            self.source.request(obs)
        except self.lost_errors as exc:
            self._lose(now, exc)
            return
        self._in_flight = (now, obs.delay_ticks)

    def _receive(self, now: int) -> None:
        while True:
            try:
                chunk = self.source.poll(now)
            except self.lost_errors as exc:
                self._lose(now, exc)
                return
            if chunk is None:
                return
            self._accept(chunk, now)

    def _accept(self, chunk: ActionChunk, now: int) -> None:
        """Splice the reply to the request in flight; drop any other chunk (a reply to a
        request made before the source was lost: planned from a state that is gone)."""
        if self._in_flight is None or chunk.start_tick != self._in_flight[0] + self._in_flight[1]:
            self.stale_replies += 1
            log.info("dropped a chunk starting at tick %d: not the reply in flight", chunk.start_tick)
            return
        if self.lost:
            log.info("chunk source is back at tick %d; resuming", now)
            self.lost = False
        request_tick, d = self._in_flight
        self._in_flight = None
        self.delay.add(now - request_tick)
        if self.mode == "sync":  # the robot waited: start where it stopped, s rows only
            chunk = replace(chunk, actions_rad=np.asarray(chunk.actions_rad)[:self.execute_horizon],
                            start_tick=now)
        dropped = splice(self._queue, chunk, now, "blend" if self.mode == "naive" else "replace")
        index = len(self.received)
        self.received.append(ReceivedChunk(index, chunk, request_tick, d, now, dropped))
        for t in range(chunk.start_tick + dropped, chunk.start_tick + len(chunk.actions_rad)):
            self._origin[t] = index
        for t in [t for t in self._origin if t not in self._queue]:
            del self._origin[t]

    def _lose(self, now: int, exc: BaseException) -> None:
        """Server lost: drop the queue so this tick already holds; retry on later ticks."""
        if not self.lost:
            log.warning("chunk source lost at tick %d (%s); holding and retrying", now, exc)
        self.lost = True
        self._drop_plan()
