"""The robot-side executor: paces the arm through an action queue keyed by absolute tick.

Each control tick it takes in chunks that have arrived, asks its `ChunkSource` for the
next chunk when the queue runs low, and sends the queued target for this tick through
`robot.command` (a `SafeRobot`). With nothing queued it holds the last target it sent
(the measured position before the first command).
Robot side: no torch, no mujoco. Angles are radians, times are control ticks.

Modes (docs/algorithms.md section 1):
- "sync": execute s rows, hold while the next chunk is computed (the waiting ticks are
  pauses), start it where the robot stopped.
- "naive": lerobot async: request at the threshold with the measured state, the chunk is
  keyed from the observation tick, overlapping rows blend 0.3 old + 0.7 new.
- "vlash": the policy conditions on `conditioning_state`: the measured state at d = 0,
  else the state forwarded over the in-flight queued rows to the tick the chunk starts
  (a_(t+d-1)); the chunk replaces the queue from t + d (at d = 0 it blends: exactly
  naive, `splice_mode`). With `lag_deadband_rad`, the arm's tracking error beyond the
  deadband is carried into that state (`carry_lag`).
- "vlash+rtc": as "vlash", and the queued rows for the new chunk's own ticks (t + d on,
  the plan it replaces) go along as `prefix_rad`: the policy is guided toward them (RTC).
- "sync+rtc": as "sync", and the rows of the last chunk that were not executed go along
  as `prefix_rad` (delay 0), so an RTC-capable policy continues its plan smoothly.

Intervention (docs/algorithms.md section 4): an optional `Intervener` may return a human
or scripted target that replaces the policy's row for that tick (the tick is flagged
`intervened`). Chunks keep coming meanwhile (the policy's rows are what it would have
done). When the human lets go, the queue is dropped and a fresh chunk is requested from
the state the human left the arm in.

The executor never reads the robot: the episode runner (`robotrl.inference.runner`) reads
it once per tick (cameras included) and hands that reading to `tick`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from robotrl.core.policy import (
    ActionChunk,
    ChunkPolicy,
    PolicyObservation,
    SlowFastPolicy,
    StateEstimatingPolicy,
    past_frame_ticks_back,
    past_image_key,
)
from robotrl.core.robot import RobotState
from robotrl.core.task import Intervener
from robotrl.hardware.safety import SafeRobot
from robotrl.inference.chunking import (
    DelayEstimator,
    arm_deadband,
    carry_lag,
    conditioning_state,
    forward_state,
    policy_threshold,
    should_request,
    splice,
    splice_mode,
)
from robotrl.inference.latents import LatentCache

log = logging.getLogger(__name__)

MODES = ("sync", "sync+rtc", "naive", "vlash", "vlash+rtc")
LOCAL_ROBOT = "local"
"""Robot id of the one robot a `LocalChunkSource` serves (its latent cache key)."""


@dataclass(frozen=True)
class ExecutorConfig:
    """How the executor turns chunks into one target per tick (docs/algorithms.md section 1)."""

    mode: str = "vlash"
    """One of `MODES`."""
    threshold: float | None = None
    """Async modes request the next chunk when queued rows / H <= threshold. None: the
    policy's own, `policy_threshold` (1 - s / H for a policy trained to run s rows before
    the next request, 0.5 when it does not say)."""
    execute_horizon: int | None = None
    """s, rows of each chunk executed in the sync modes (None: all H)."""
    lag_deadband_rad: float | None = None
    """vlash modes: carry each arm joint's tracking error beyond this deadband into the
    forwarded state (`carry_lag`; the gripper is left out), so the policy sees an arm
    that lags or is blocked. None (the default) forwards the targets alone. Measured:
    +4 points in stepped evaluation, no gain in real time (docs/results.md)."""
    max_in_flight: int = 1
    """Async modes: requests that may be in flight at once. With more than one the
    executor asks again before the reply comes (at most one request per tick, while the
    threshold says so), so an event reaches a chunk within d ticks instead of d plus up
    to d - 1 (docs/algorithms.md section 1); each request costs a model call, and only a
    server with as many model workers runs them side by side. A reply supersedes every
    request made before it."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose from {', '.join(MODES)}")
        if self.threshold is not None:
            should_request(0, 1, self.threshold, 0)  # validates threshold
        if self.execute_horizon is not None and self.execute_horizon < 1:
            raise ValueError(f"execute_horizon must be >= 1, got {self.execute_horizon}")
        if self.lag_deadband_rad is not None and (self.lag_deadband_rad < 0 or not self.mode.startswith("vlash")):
            raise ValueError("lag_deadband_rad needs a vlash mode and a deadband >= 0 rad")
        if self.max_in_flight < 1 or (self.max_in_flight > 1 and self.sync):
            raise ValueError(f"max_in_flight must be >= 1, and 1 in the sync modes; got {self.max_in_flight}")

    @property
    def sync(self) -> bool:
        return self.mode.startswith("sync")


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

    A `SlowFastPolicy` gets its latent from a `LatentCache` as on the server: re-encoded
    every `slow_every` requests (and on a new instruction or episode), its age in ticks
    passed to the fast pathway.

    Args:
        policy: a `ChunkPolicy`.
        delay_ticks: the injected inference delay d_inj in ticks, or a function drawing
            it from a `numpy.random.Generator` (seeded by `seed`) for each request.
        seed: seed of that generator.
        slow_every: requests per slow-pathway refresh (slow/fast policies only).

    Attributes:
        predict_s: seconds of every policy call (slow encoding included when it ran).
        latents: the latent cache (None for a policy without a slow pathway).
        estimate_errors: per request of a `StateEstimatingPolicy` whose observation
            carries the simulator's env_state, (E,) the estimate the fast pathway read
            minus that env_state (env_state units).
    """

    def __init__(
        self,
        policy: ChunkPolicy,
        delay_ticks: int | Callable[[np.random.Generator], int] = 0,
        seed: int = 0,
        slow_every: int = 1,
    ) -> None:
        if slow_every < 1:
            raise ValueError(f"slow_every must be >= 1, got {slow_every}")
        self.policy = policy
        self.delay_ticks = delay_ticks
        self.slow_every = slow_every
        self.latents = LatentCache(policy) if isinstance(policy, SlowFastPolicy) else None
        self._estimator = policy if self.latents is not None and isinstance(policy, StateEstimatingPolicy) else None
        self.predict_s: list[float] = []
        self.estimate_errors: list[np.ndarray] = []
        self._rng = np.random.default_rng(seed)
        self._requests = 0
        self._pending: list[tuple[int, ActionChunk]] = []  # (ready tick, chunk), oldest first

    def request(self, obs: PolicyObservation) -> None:
        d = self.delay_ticks if isinstance(self.delay_ticks, int) else int(self.delay_ticks(self._rng))
        if d < 0:
            raise ValueError(f"injected delay must be >= 0 ticks, got {d}")
        start = time.perf_counter()
        if self.latents is None:
            chunk = self.policy.predict_chunk(obs)
        else:
            if self._requests % self.slow_every == 0:
                self.latents.refresh(LOCAL_ROBOT, obs, 0)
            latent, age = self.latents.latent_for(LOCAL_ROBOT, obs, 0)
            chunk = self.latents.policy.predict_chunk(obs, latent, age)
        self.predict_s.append(time.perf_counter() - start)
        if self._estimator is not None and obs.env_state is not None:
            estimate = self._estimator.estimate_env_state(latent)
            if estimate is not None:
                self.estimate_errors.append(estimate - np.asarray(obs.env_state))
        self._requests += 1
        self._pending.append((obs.tick + d, chunk))

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
    """True when the intervener's target replaced the policy's row."""
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


class PastFrames:
    """The camera frames of the last P G + 1 ticks of an episode, for a policy that reads
    each camera's frames from G, 2 G, .. P G ticks earlier too (`PolicyMetadata.past_frame_ticks`,
    `past_frames`). Frames are copied: a camera driver may fill the same buffer on every read."""

    def __init__(self, past_frame_ticks: int, past_frames: int = 1) -> None:
        if past_frame_ticks < 0 or past_frames < 1:
            raise ValueError(f"need past_frame_ticks >= 0 and past_frames >= 1, got {past_frame_ticks}, {past_frames}")
        self.ticks, self.count = past_frame_ticks, past_frames
        self._back = past_frame_ticks_back(past_frame_ticks, past_frames)
        self._frames: deque[dict[str, np.ndarray]] = deque(maxlen=past_frame_ticks * past_frames + 1)

    def clear(self) -> None:
        self._frames.clear()

    def push(self, images: dict[str, np.ndarray]) -> None:
        """This tick's frames (call once per tick, before `images`)."""
        if self.ticks:
            self._frames.append({cam: np.array(frame) for cam, frame in images.items()})

    def images(self, images: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`images` (this tick's frames) and, with G > 0, each camera's frame of k G ticks
        earlier under `past_image_key(camera, k)`, k = 1 .. P (the episode's first frame
        until k G ticks have passed)."""
        out = dict(images)
        if self.ticks and self._frames:
            newest = len(self._frames) - 1
            for k, back in enumerate(self._back, 1):
                past = self._frames[max(newest - back, 0)]
                out.update({past_image_key(cam, k): past[cam] for cam in images if cam in past})
        return out


def step_limit_rad(robot: SafeRobot) -> np.ndarray:
    """(J,) per-tick step the safety layer allows: velocity limit x period x the
    `SafeRobot` velocity scale."""
    spec = robot.spec
    return spec.max_velocity_rad_s * spec.dt_s * robot.limits.velocity_scale


class Executor:
    """Drives `robot` from chunks of `source`, one `tick()` per control period.

    Args:
        robot: the `SafeRobot` every target goes through.
        source: the `ChunkSource`.
        horizon: H, rows per chunk.
        config: mode, request threshold, execute horizon, lag deadband, requests in flight.
        initial_delay_ticks: the delay estimate d at the start of every episode.
        intervener: who may take over (called every tick), or None.
        lost_errors: exception types of `source` meaning "server lost": hold, retry later.
        past_frame_ticks: G of the policy (`PolicyMetadata.past_frame_ticks`): each request
            also carries every camera's frames of G, 2 G, .. P G ticks earlier.
        past_frames: P of the policy (`PolicyMetadata.past_frames`).
        execute_steps: s of the policy (`PolicyMetadata.execute_steps`, 0: not said), for
            the threshold when `config.threshold` is None.

    Attributes:
        trace: one `TickRecord` per tick of the current episode, for benchmarks.
        received: every chunk taken in this episode, as `ReceivedChunk`.
        lost: True from a `lost_errors` exception until the next chunk arrives.
        stale_replies: chunks dropped because they answered no request in flight.
        intervening: True while the intervener drives the arm.
    """

    def __init__(
        self,
        robot: SafeRobot,
        source: ChunkSource,
        horizon: int,
        config: ExecutorConfig = ExecutorConfig(),
        *,
        initial_delay_ticks: int = 0,
        intervener: Intervener | None = None,
        lost_errors: tuple[type[BaseException], ...] = (),
        past_frame_ticks: int = 0,
        past_frames: int = 1,
        execute_steps: int = 0,
    ) -> None:
        s = horizon if config.execute_horizon is None else min(config.execute_horizon, horizon)
        if horizon <= 0:
            raise ValueError(f"need horizon > 0, got {horizon}")
        self.robot, self.source, self.config = robot, source, config
        threshold = policy_threshold(horizon, execute_steps) if config.threshold is None else config.threshold
        self.mode, self.horizon, self.threshold, self.execute_horizon = config.mode, horizon, threshold, s
        self.initial_delay_ticks = initial_delay_ticks
        self.lost_errors = lost_errors
        self.intervener = intervener
        self.lag_deadband_rad = arm_deadband(robot.spec.num_joints, config.lag_deadband_rad)
        self.max_step_rad = step_limit_rad(robot)
        self.lost = False
        self.stale_replies = 0
        self.past_frames = PastFrames(past_frame_ticks, past_frames)
        self.begin_episode("")

    def begin_episode(self, instruction: str, start_tick: int = 0) -> None:
        """Forget the last episode's plan, trace and delay measurements; the first
        `tick()` is `start_tick`, every observation carries `instruction`."""
        self.instruction = instruction
        self.now_tick = start_tick
        self.delay = DelayEstimator(initial_ticks=self.initial_delay_ticks)
        self.intervening = False
        self.trace: list[TickRecord] = []
        self.received: list[ReceivedChunk] = []
        self._queue: dict[int, np.ndarray] = {}
        self._origin: dict[int, int] = {}  # tick -> index into self.received
        self._in_flight: list[tuple[int, int]] = []  # (request tick, d sent), oldest first
        self._hold_rad: np.ndarray | None = None
        self._unexecuted: np.ndarray | None = None  # sync+rtc: rows of the last chunk not executed
        self.past_frames.clear()

    # -- control loop ---------------------------------------------------------------------
    def tick(self, state: RobotState, env_state: np.ndarray | None = None) -> TickRecord:
        """One control tick from this tick's reading `state` (and the task's privileged
        `env_state`, sim only): take in chunks, maybe request, command this tick's target."""
        now = self.now_tick
        if self._hold_rad is None:
            self._hold_rad = np.array(state.q_rad, dtype=np.float64)
        self.past_frames.push(state.images)
        row, origin = self._next_row(now, state, env_state)
        human = None
        if self.intervener is not None:
            human = self.intervener(now, self._hold_rad if row is None else row, state)
            if human is None and self.intervening:  # let go: plan afresh from here
                self._drop_plan()
                row, origin = self._next_row(now, state, env_state)
            self.intervening = human is not None
        assert self._hold_rad is not None
        planned = self._hold_rad if row is None else row
        requested = planned if human is None else np.asarray(human, dtype=np.float64)
        sent = np.asarray(self.robot.command(requested), dtype=np.float64)
        self._hold_rad = sent.copy()
        got = None if origin is None else self.received[origin]
        record = TickRecord(
            tick=now,
            requested_rad=np.array(requested),
            sent_rad=sent,
            chunk_id=-1 if got is None else got.chunk_id,
            version=-1 if got is None else got.chunk.version,
            obs_tick=-1 if got is None else got.obs_tick,
            delay_ticks=self.delay.estimate() if got is None else got.request_delay_ticks,
            queue_len=len(self._queue),
            paused=got is None,
            intervened=human is not None,
            policy_rad=None if human is None else np.array(planned),
        )
        self.trace.append(record)
        self.now_tick = now + 1
        return record

    @property
    def pauses(self) -> int:
        """Ticks so far at which the robot held for lack of a queued row."""
        return sum(r.paused for r in self.trace)

    # -- requests and replies -------------------------------------------------------------
    def _next_row(
        self, now: int, state: RobotState, env_state: np.ndarray | None
    ) -> tuple[np.ndarray | None, int | None]:
        """Take in chunks, maybe request one, pop this tick's (row, origin) (None: hold)."""
        self._receive(now)
        if self._wants_chunk(now):
            self._request(now, state, env_state)
            self._receive(now)
        return self._queue.pop(now, None), self._origin.pop(now, None)

    def _drop_plan(self) -> None:
        """Forget the queue and the requests in flight (their replies will be dropped)."""
        self._queue.clear()
        self._origin.clear()
        self._in_flight.clear()

    def _remaining(self, now: int) -> int:
        """Queued rows for ticks from `now` on (a chunk that came early starts after `now`)."""
        return sum(1 for tick in self._queue if tick >= now)

    def _fresh_remaining(self, now: int) -> int:
        """Queued rows for ticks from `now` on planned less than H ticks after their
        chunk's observation. A vlash chunk keyed at t + d runs to t + d + H - 1: its last d
        rows count for forwarding and as a reserve, not towards the threshold, so every
        async mode re-plans at the same ticks and executes rows of the same age."""
        origin, received, h = self._origin, self.received, self.horizon
        return sum(
            1
            for tick in self._queue
            if tick >= now and (tick not in origin or tick < received[origin[tick]].obs_tick + h)
        )

    def _planned(self, now: int, d: int) -> np.ndarray:
        """(n, J) targets planned for ticks `now` .. up to `now + d - 1`, as far as rows are
        queued; a tick before the first queued row holds the last target sent."""
        ticks = [tick for tick in range(now, now + d) if tick in self._queue]
        rows = [self._queue.get(tick, self._hold_rad) for tick in range(now, ticks[-1] + 1)] if ticks else []
        return np.array(rows, dtype=np.float64).reshape(-1, self.robot.spec.num_joints)

    def _wants_chunk(self, now: int) -> bool:
        if self.config.sync:
            return not self._in_flight and self._remaining(now) == 0
        fresh = self._fresh_remaining(now)
        return should_request(fresh, self.horizon, self.threshold, len(self._in_flight), self.config.max_in_flight)

    def _request(self, now: int, measured: RobotState, env_state: np.ndarray | None) -> None:
        d = self.delay.estimate()
        obs = PolicyObservation(
            state_rad=np.array(measured.q_rad, dtype=np.float64),
            tick=now,
            instruction=self.instruction,
            images=self.past_frames.images(measured.images),
            env_state=env_state,
        )
        if self.mode == "sync+rtc" and self._unexecuted is not None and len(self._unexecuted):
            obs.prefix_rad = self._unexecuted
        if self.mode.startswith("vlash"):
            start = self._hold_rad  # the last target sent: where the step clamp starts from
            assert start is not None  # set by the first tick
            in_flight = self._planned(now, d)
            obs.state_rad = conditioning_state(measured.q_rad, start, in_flight, d, self.max_step_rad)
            if self.lag_deadband_rad is not None and d > 0:
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
        self._in_flight.append((now, obs.delay_ticks))

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
        """Splice the reply to a request in flight, which supersedes the requests made
        before it (a server may drop them: their late replies are older plans); drop any
        other chunk (e.g. a reply to a request made before the source was lost: planned
        from a state that is gone)."""
        answered = [i for i, (tick, d) in enumerate(self._in_flight) if chunk.start_tick == tick + d]
        if not answered:
            self.stale_replies += 1
            log.info("dropped a chunk starting at tick %d: not the reply to a request in flight", chunk.start_tick)
            return
        if self.lost:
            log.info("chunk source is back at tick %d; resuming", now)
            self.lost = False
        request_tick, d = self._in_flight[answered[0]]
        del self._in_flight[: answered[0] + 1]
        self.delay.add(now - request_tick)
        if self.config.sync:  # the robot waited: start where it stopped, s rows only
            rows = np.asarray(chunk.actions_rad)
            self._unexecuted = rows[self.execute_horizon :]
            chunk = replace(chunk, actions_rad=rows[: self.execute_horizon], start_tick=now)
        dropped = splice(self._queue, chunk, now, splice_mode(self.config.sync, d))
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
