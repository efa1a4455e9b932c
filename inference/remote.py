"""`RemoteChunkSource`: the executor's `ChunkSource` backed by a `PolicyServer` over ZMQ.

Robot side: no torch, no mujoco. Requests never block the control loop: `request` queues
the observation on the socket, `poll` (once a tick) collects replies and drives the
heartbeats. A lost server, a refused request or a reply that takes longer than
`reply_timeout_s` raise a `WireError`; the executor holds and asks again later.
"""

from __future__ import annotations

import math
import time

import numpy as np

from robotrl.core.errors import TransportTimeout, UserError, WireError
from robotrl.core.policy import ActionChunk, PolicyObservation
from robotrl.core.task import Intervener
from robotrl.hardware.safety import SafeRobot
from robotrl.inference.executor import Executor, ExecutorConfig
from robotrl.inference.latency import LatencyStats
from robotrl.wire.client import ClientSocket
from robotrl.wire.messages import ChunkReply, ErrorReply, ObservationRequest


class RequestFailed(WireError):
    """The server answered a request with an error."""


def initial_delay_ticks(server_info: dict, control_rate_hz: float, network_ms: float = 2.0) -> int:
    """First guess of the inference delay d before any chunk was measured: the server's
    warm-up model time plus `network_ms` in whole ticks, plus one tick because a reply is
    taken in at the loop's next tick. Erring high only makes the first chunk's image one
    tick staler; erring low drops its first rows (a jump at the boundary)."""
    seconds = (float(server_info.get("model_ms", 0.0)) + network_ms) / 1000.0
    return math.ceil(seconds * control_rate_hz) + 1


class RemoteChunkSource:
    """Asks the server behind `client` for chunks. Several requests may be in flight
    (`ExecutorConfig.max_in_flight`); a reply supersedes every earlier request (the server
    answers a robot's newest waiting request, `RequestSlots`), whose late replies are
    left out.

    Attributes:
        stats: round trip ("rtt"), server "queue"/"model"/"total" and client "encode"
            times in ns per answered request.
    """

    def __init__(self, client: ClientSocket, robot_id: str, action_dim: int, *, reply_timeout_s: float = 2.0) -> None:
        self.client = client
        self.robot_id = robot_id
        self.action_dim = action_dim
        self.reply_timeout_s = reply_timeout_s
        self.stats = LatencyStats()
        self._next_id = 0
        self._waiting: dict[int, int] = {}  # request id -> monotonic ns when sent, oldest first

    @property
    def waiting(self) -> bool:
        """True while a request is sent and neither answered, superseded nor given up on."""
        return bool(self._waiting)

    def request(self, obs: PolicyObservation) -> None:
        self._next_id += 1
        sent_ns = time.monotonic_ns()
        msg = ObservationRequest(
            robot_id=self.robot_id,
            request_id=self._next_id,
            tick=obs.tick,
            state=np.asarray(obs.state_rad, dtype=np.float64),
            in_flight=np.zeros((0, self.action_dim)),  # the executor forwarded the state already
            prefix=None if obs.prefix_rad is None else np.asarray(obs.prefix_rad, dtype=np.float64),
            images=obs.images,
            instruction=obs.instruction,
            delay_ticks=obs.delay_ticks,
            sent_time_ns=sent_ns,
            env_state=None if obs.env_state is None else np.asarray(obs.env_state, dtype=np.float32),
        )
        self.client.send(msg, timeout_s=0.0)
        self.stats.add(encode=self.client.last_encode_ns)
        self._waiting[self._next_id] = sent_ns

    def poll(self, now_tick: int, wait_s: float = 0.0) -> ActionChunk | None:
        """A reply that has arrived (waiting up to `wait_s` for the first message), or None."""
        while True:
            msg = self.client.poll(wait_s)
            wait_s = 0.0
            if msg is None:
                break
            chunk = self._take(msg)
            if chunk is not None:
                return chunk
        oldest_ns = min(self._waiting.values(), default=None)
        if oldest_ns is not None and (time.monotonic_ns() - oldest_ns) / 1e9 > self.reply_timeout_s:
            self._waiting.clear()
            raise TransportTimeout(f"no chunk from {self.client.endpoint} within {self.reply_timeout_s:.3g} s")
        return None

    def _take(self, msg) -> ActionChunk | None:
        if isinstance(msg, ErrorReply):
            if msg.request_id in self._waiting:
                del self._waiting[msg.request_id]
                raise RequestFailed(f"server refused request {msg.request_id}: {msg.code}: {msg.message}")
            return None
        if not isinstance(msg, ChunkReply) or msg.request_id not in self._waiting:
            return None  # a late reply to a request given up on or superseded
        sent_ns = self._waiting[msg.request_id]
        self._waiting = {i: ns for i, ns in self._waiting.items() if i > msg.request_id}
        self.stats.add(rtt=time.monotonic_ns() - sent_ns, **msg.timings_ns)
        return ActionChunk(
            actions_rad=np.asarray(msg.actions, dtype=np.float64), start_tick=msg.start_tick, version=msg.version
        )


class SteppedRemoteSource:
    """A `RemoteChunkSource` on a stepped (simulated) clock: every chunk becomes available
    exactly `delay_ticks` after its request tick, however long the server took in wall
    time; at that tick `poll` waits for the reply (up to the remote's reply timeout).

    Makes runs through the real server (wire, batching, weight swaps) as reproducible in
    ticks as `LocalChunkSource`, and lets a simulated arm run faster than real time. A lost
    server raises a `WireError` as for `RemoteChunkSource` (the executor holds); each later
    request first waits up to the reply timeout for the reconnect, and the first reply
    after it resumes the arm.
    """

    def __init__(self, remote: RemoteChunkSource, delay_ticks: int) -> None:
        if delay_ticks < 0:
            raise ValueError(f"delay_ticks must be >= 0, got {delay_ticks}")
        self.remote = remote
        self.delay_ticks = delay_ticks
        self._ready_tick: int | None = None

    def request(self, obs: PolicyObservation) -> None:
        self._ready_tick = None  # a request that fails to go out is not waited for
        self._await_connection()
        self.remote.request(obs)
        self._ready_tick = obs.tick + self.delay_ticks

    def _await_connection(self) -> None:
        """Stepped time stands still while the server is away: before a request, wait (in
        wall time, at most the reply timeout) for the client to be connected again, so a
        lost server costs a stepped arm a few held ticks rather than a burst of them."""
        client = self.remote.client
        deadline = time.monotonic() + self.remote.reply_timeout_s
        while not client.ready and time.monotonic() < deadline:
            try:
                client.poll(0.01)  # drives the reconnect; a late reply to a dropped request is stale
            except WireError:
                pass

    def poll(self, now_tick: int) -> ActionChunk | None:
        """The reply at its tick; before it, None. With no request waiting, the socket is
        still polled (heartbeats, and the reconnect after a lost server). A `WireError`
        (server lost, reply timed out) ends the wait: the executor holds and asks again."""
        if self._ready_tick is None:
            return self.remote.poll(now_tick)  # nothing awaited: a late reply, if any, is the executor's to drop
        if now_tick < self._ready_tick:
            return None
        try:
            while self.remote.waiting:
                chunk = self.remote.poll(now_tick, wait_s=0.01)
                if chunk is not None:
                    self._ready_tick = None
                    return chunk
        except BaseException:
            self._ready_tick = None
            raise
        self._ready_tick = None  # the request was given up on
        return None


def remote_executor(
    robot: SafeRobot,
    client: ClientSocket,
    server_info: dict,
    config: ExecutorConfig,
    *,
    robot_id: str,
    stepped_delay: int | None = None,
    intervener: Intervener | None = None,
) -> Executor:
    """The executor of an arm served by the server behind `client` (connected;
    `server_info` its hello reply). `stepped_delay` None: chunks arrive when they arrive
    (wall clock); an int d: each is taken in exactly d ticks after its request
    (`SteppedRemoteSource`, for a simulated arm on a `SimClock`). A mode with RTC against
    a policy that follows no RTC prefix is a `UserError`, and so are several requests in
    flight on a stepped clock (`SteppedRemoteSource` awaits one reply at a time)."""
    if stepped_delay is not None and config.max_in_flight > 1:
        raise UserError("a stepped arm keeps one request in flight: run it on the wall clock for --in-flight > 1")
    if config.mode.endswith("+rtc") and server_info.get("rtc") is False:
        raise UserError(
            f"the served {server_info.get('policy')} policy follows no RTC prefix: use --mode "
            f"{config.mode.removesuffix('+rtc')} instead of {config.mode}"
        )
    remote = RemoteChunkSource(client, robot_id, robot.spec.num_joints)
    source = remote if stepped_delay is None else SteppedRemoteSource(remote, stepped_delay)
    first = initial_delay_ticks(server_info, robot.spec.control_rate_hz) if stepped_delay is None else stepped_delay
    return Executor(
        robot,
        source,
        int(server_info["horizon"]),
        config,
        initial_delay_ticks=first,
        intervener=intervener,
        lost_errors=(WireError,),
        past_frame_ticks=int(server_info.get("past_frame_ticks", 0)),
        past_frames=int(server_info.get("past_frames", 1)),
        execute_steps=int(server_info.get("execute_steps", 0)),
    )
