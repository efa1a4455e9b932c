"""`PolicyServer`: serves a `ChunkPolicy` to many robots over ZMQ.

Threads:
- I/O thread: owns the ROUTER socket (`robotrl.wire.transport.ServerSocket`): answers
  hellos and heartbeats, queues observation requests, sends replies. It never waits on
  the model.
- model workers (`model_workers`, one by default): each takes the waiting requests (the
  newest of each robot, `RequestSlots`), waits at most `batch_wait_ms` for requests of
  other robots, forwards each state to the tick its chunk starts (VLASH), runs the
  policy (batched when it offers `predict_chunks`) and hands the replies back (with a
  `ReplyHold`, each d ticks after its request arrived: an injected delay). Several
  workers run their batches side by side (a robot with several requests in flight gets
  them answered concurrently). New weights are swapped in only while no batch runs, so
  one chunk never mixes versions; the version goes out in every reply.
- weight subscriber (with `weights_from`, `robotrl.wire.weights.WeightSubscriber`):
  takes the learner's published weights and queues them through `set_weights`; for a
  `StagedReloadablePolicy` it also parses them and copies them onto the policy's device,
  so the model worker only swaps them in (a device-local copy). Slow latents made by
  older weights are recomputed after a swap, so no chunk mixes versions.
- slow pathway (policies with `encode_slow`, e.g. the fast/slow VLA): refreshes each
  robot's latent from its newest images at `slow_rate_hz` (all due robots in one model
  call for a `BatchedSlowPolicy`), and at once when the robot's instruction changes or
  its episode restarts (ticks go back); the fast pathway answers every request with the
  newest latent and its age in ticks (0 without images: the latent of the instruction
  alone never ages).
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from robotrl.core.devices import DEFAULT_DEVICE, check_device
from robotrl.core.errors import PeerLost, ProtocolError, TransportTimeout, WrongRobotId
from robotrl.core.health import GpuHealth, gpu_report
from robotrl.core.policy import (
    ActionChunk,
    BatchedPolicy,
    ChunkPolicy,
    PolicyObservation,
    ReloadablePolicy,
    SlowFastPolicy,
    StagedReloadablePolicy,
)
from robotrl.core.ratelimit import LogLimiter
from robotrl.inference.chunking import forward_state
from robotrl.inference.delayed import DelaySpec, ReplyHold
from robotrl.inference.latency import LatencyStats
from robotrl.inference.latents import LatentCache
from robotrl.inference.request_slots import RequestSlots
from robotrl.inference.requests import request_problem
from robotrl.wire.keys import ServerKeys, client_keys
from robotrl.wire.messages import ChunkReply, ErrorReply, HealthReply, HealthRequest, Message, ObservationRequest
from robotrl.wire.transport import MAX_MESSAGE_BYTES, ServerSocket
from robotrl.wire.weights import WeightSubscriber, weight_endpoints

log = logging.getLogger(__name__)

RECEIVE_PER_LOOP = 64
"""Messages the I/O thread takes in before it sends the replies waiting."""
HEALTH_WINDOW_S = 10.0
"""Window of the batches-per-second figure in `health()`."""
"""After the first error of a kind, one log line per this many."""


@dataclass(frozen=True)
class ServerConfig:
    endpoint: str = "tcp://127.0.0.1:5555"
    """Where to bind ("tcp://*:5555" to accept other machines, with CURVE keys)."""
    batch_wait_ms: float = 2.0
    """Longest wait for requests of other robots before running a batch."""
    max_batch: int = 16
    """Most requests per model call."""
    model_workers: int = 1
    """Model threads running batches side by side: as many as a robot keeps requests in
    flight (`ExecutorConfig.max_in_flight`) answers each without waiting for the one before;
    the policy must allow concurrent calls (torch inference does)."""
    slow_rate_hz: float = 3.0
    """Rate of the slow (vision-language) pathway per robot, for policies that have one."""
    max_step_rad: tuple[float, ...] | None = None
    """Per-joint step limit applied while forwarding states (the robot's safety clamp)."""
    warmup_calls: int = 3
    """Model calls made before robots are accepted (excluded from latency statistics)."""
    max_message_bytes: int = MAX_MESSAGE_BYTES
    """Largest request accepted; a robot that sends a larger one is disconnected."""
    weights_from: str | None = None
    """The learner's weight endpoint "tcp://host:port" (its PUB socket; port + 1 answers
    requests for the latest weights), or None to serve fixed weights."""
    weights_keys: Path | None = None
    """Folder with this server's `client.key_secret` and the learner's `server.key`: the
    weights channel is encrypted and the learner only talks to allowed keys (CURVE)."""

    def __post_init__(self) -> None:
        if self.model_workers < 1 or self.max_batch < 1:
            raise ValueError(f"model_workers and max_batch must be >= 1, got {self.model_workers}, {self.max_batch}")


STEP_RAD = 0.1
"""Default per-tick joint step for forwarding states: the safety step of 3 rad/s at 30 Hz."""


@dataclass(frozen=True)
class ServeJob:
    """One `robotrl serve` process (`robotrl learn` and `robotrl deploy` write one to a
    file for their server child)."""

    policy: Path
    """Checkpoint folder (robotrl train output or a lerobot pretrained_model folder)."""
    server: ServerConfig = ServerConfig()
    step_rad: float = STEP_RAD
    """Per-tick joint step used to clamp forwarded states (every joint)."""
    seed: int = 0
    """Seed of the policy's sampling noise."""
    curve_keys: Path | None = None
    """Folder with server.key_secret and allowed_clients/ (CURVE), or None."""
    device: str = DEFAULT_DEVICE
    """Where the policy runs: auto (a free GPU, else the CPU), cpu, cuda or cuda:N."""
    delay: DelaySpec | None = None
    """Each reply held until d control ticks of the policy's rate after its request
    (`robotrl.inference.delayed`): an arm rehearses a slower model; None: the policy's own."""
    noise_scale: float = 1.0
    """A flow-matching policy's initial noise scale (`load_policy`; 0: its central chunk)."""

    def __post_init__(self) -> None:
        check_device(self.device)


@dataclass
class _Pending:
    identity: bytes
    request: ObservationRequest
    received_ns: int


class PolicyServer:
    """Serve `policy` at `config.endpoint`; `start()` returns once it accepts robots."""

    def __init__(
        self,
        policy: ChunkPolicy,
        config: ServerConfig = ServerConfig(),
        *,
        curve: ServerKeys | None = None,
        version: int = 0,
        device: str | None = None,
        hold: ReplyHold | None = None,
    ) -> None:
        self.policy = policy
        self.hold = hold
        """An injected delay: every reply waits until d ticks after its request arrived."""
        self.device = device
        """Where the policy computes ("cpu", "cuda:N"), for `health()`; None: not said."""
        self.config = config
        self.curve = curve
        self.version = version
        self.stats = LatencyStats()
        self.endpoint = config.endpoint
        self._requests: RequestSlots[_Pending] = RequestSlots()
        self._gate = threading.Condition()  # weight swaps wait for running batches
        self._running = 0  # batches being computed
        self._replies: queue.Queue[tuple[bytes, Message]] = queue.Queue()
        self._pending_weights: tuple[int, Any] | None = None  # (version, bytes or staged weights)
        self._latents = LatentCache(policy) if isinstance(policy, SlowFastPolicy) else None
        self._slow_refresh = self._latents is not None and policy.metadata.max_latent_age_ticks != 0
        """Whether the slow loop runs: a policy trained on fresh latents only (J = 0) has its
        frames encoded with every request instead (`LatentCache`)."""
        self._newest_obs: dict[str, PolicyObservation] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._threads: list[threading.Thread] = []
        self._startup_error: BaseException | None = None
        self._max_step = None if config.max_step_rad is None else np.asarray(config.max_step_rad)
        self.model_ms = 0.0
        """Median model time of the warm-up calls, sent to clients in the hello reply."""
        self.swapped_at_ns: dict[int, int] = {}
        """Weight version -> `time.monotonic_ns()` when it went into service."""
        self.stage_ms: dict[int, float] = {}
        """Weight version -> ms staging it took off the serving thread (`StagedReloadablePolicy`)."""
        self.swap_ms: dict[int, float] = {}
        """Weight version -> ms the serving thread spent putting it in service, between batches."""
        self.first_chunk_ns: dict[int, int] = {}
        """Weight version -> `time.monotonic_ns()` when its first chunk was ready."""
        self.subscriber: WeightSubscriber | None = None
        self._model_lock = threading.Lock()  # slow pathway vs weight swap
        self.errors: dict[str, int] = {}
        """Unexpected errors by kind ("model thread", "policy", "slow pathway", "bad request")."""
        self.last_error = ""
        self.refused = 0
        """Malformed requests answered with an error."""
        self._batches: collections.deque[tuple[float, int]] = collections.deque(maxlen=10_000)  # (monotonic s, size)
        self._log_limiter = LogLimiter()
        self._socket: ServerSocket | None = None  # the I/O thread's, once bound

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, timeout_s: float = 30.0) -> None:
        endpoints = None
        if self.config.weights_from is not None:
            endpoints = weight_endpoints(self.config.weights_from)
            if not isinstance(self.policy, ReloadablePolicy):
                raise ValueError(
                    f"{self.policy.metadata.policy_type} policies cannot load new weights: "
                    "serve without weights_from (--weights-from)"
                )
        self._warm_up()
        self._threads = [threading.Thread(target=self._io_loop, name="robotrl-server-io", daemon=True)]
        self._threads += [
            threading.Thread(target=self._model_loop, name=f"robotrl-server-model-{i}", daemon=True)
            for i in range(self.config.model_workers)
        ]
        if self._slow_refresh:
            self._threads.append(threading.Thread(target=self._slow_loop, name="robotrl-server-slow", daemon=True))
        for thread in self._threads:
            thread.start()
        if not self._ready.wait(timeout_s) or self._startup_error is not None:
            self.stop()
            raise RuntimeError(f"policy server failed to start: {self._startup_error}")
        if endpoints is not None:
            keys = None if self.config.weights_keys is None else client_keys(self.config.weights_keys)
            self.subscriber = WeightSubscriber(*endpoints, self.set_weights, newer_than=self.version, curve=keys)
            self.subscriber.start()

    def stop(self) -> None:
        if self.subscriber is not None:
            self.subscriber.stop()
            self.subscriber = None
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2.0)
        self._threads = []

    def __enter__(self) -> PolicyServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def set_weights(self, version: int, weights: bytes) -> None:
        """Queue new weights; they take effect before the next batch, never inside a chunk.
        A `StagedReloadablePolicy` stages them here, in the caller's thread (the weight
        subscriber's): parsed, checked and on the policy's device before they are queued,
        so the serving thread only swaps them in (weights that do not fit are logged here
        and the server keeps its version). Other policies load them on the serving thread."""
        queued: Any = weights
        if isinstance(self.policy, StagedReloadablePolicy):
            start = time.perf_counter()
            try:
                queued = self.policy.stage_weights(weights)
            except Exception:
                log.exception("weights version %d could not be staged; still serving version %d", version, self.version)
                return
            self.stage_ms[version] = (time.perf_counter() - start) * 1000.0
        with self._lock:
            self._pending_weights = (version, queued)

    def latent_ages(self) -> list[int]:
        """Latent ages in ticks used for the answered requests (fast/slow policies)."""
        return [] if self._latents is None else self._latents.ages()

    # -- threads -------------------------------------------------------------------------
    def _warm_up(self) -> None:
        meta = self.policy.metadata
        obs = PolicyObservation(
            state_rad=np.zeros(meta.state_dim),
            tick=0,
            images={key: np.zeros((meta.image_size_px, meta.image_size_px, 3), np.uint8) for key in meta.image_keys},
            env_state=np.zeros(meta.env_state_dim, np.float32) if meta.env_state_dim else None,
        )
        times_ms = []
        for _ in range(self.config.warmup_calls):
            start = time.perf_counter()
            self._predict([obs], ["warmup"])
            times_ms.append((time.perf_counter() - start) * 1000.0)
        if self._latents is not None:
            self._latents.clear()
        # The last warm-up calls tell clients how long a chunk takes (first guess of d).
        self.model_ms = float(np.median(times_ms[1:] or times_ms)) if times_ms else 0.0
        if self.hold is not None:
            self.model_ms = max(self.model_ms, self.hold.mean_s * 1000.0)

    def _io_loop(self) -> None:
        info = {
            "policy": self.policy.metadata.policy_type,
            "horizon": self.policy.metadata.horizon,
            "action_dim": self.policy.metadata.action_dim,
            "version": self.version,
            "model_ms": self.model_ms,
            "cameras": list(self.policy.metadata.cameras),
            "image_size_px": self.policy.metadata.image_size_px,
            "env_state_dim": self.policy.metadata.env_state_dim,
            "control_rate_hz": self.policy.metadata.control_rate_hz,
            "rtc": self.policy.metadata.follows_rtc_prefix,
            "start_state_rad": list(self.policy.metadata.start_state_rad),
            "instructions": list(self.policy.metadata.instructions),
            "past_frame_ticks": self.policy.metadata.past_frame_ticks,
            "past_frames": self.policy.metadata.past_frames,
            "execute_steps": self.policy.metadata.execute_steps,
        }
        try:
            server = ServerSocket(
                self.config.endpoint,
                curve=self.curve,
                server_info=info,
                max_message_bytes=self.config.max_message_bytes,
            )
        except BaseException as exc:  # surfaced by start()
            self._startup_error = exc
            self._ready.set()
            return
        self.endpoint = server.endpoint
        self._socket = server
        wake = server.context.socket(zmq.PULL)
        wake.bind(f"inproc://robotrl-wake-{id(self)}")
        self._wake_push = server.context.socket(zmq.PUSH)
        self._wake_push.connect(f"inproc://robotrl-wake-{id(self)}")
        poller = zmq.Poller()
        poller.register(server.socket, zmq.POLLIN)
        poller.register(wake, zmq.POLLIN)
        self._ready.set()
        try:
            while not self._stop.is_set():
                events = dict(poller.poll(100))
                if wake in events:
                    while wake.poll(0):
                        wake.recv()
                if server.socket in events:
                    self._receive(server)
                self._send_replies(server)
        finally:
            wake.close(linger=0)
            self._wake_push.close(linger=0)
            server.close()

    def _receive(self, server: ServerSocket) -> None:
        """Take in at most `RECEIVE_PER_LOOP` messages (then the replies go out, so a flood
        from one peer cannot starve the others' answers)."""
        for _ in range(RECEIVE_PER_LOOP):
            if not server.socket.poll(0, zmq.POLLIN):
                return
            try:
                identity, msg = server.recv(timeout_s=0.0)
            except TransportTimeout:
                continue  # it was a hello or heartbeat, answered already
            except WrongRobotId as exc:
                self._note_error("wrong robot id", exc, traceback=False)
                continue
            except ProtocolError as exc:
                self._note_error("protocol", exc, traceback=False)
                continue
            if isinstance(msg, ObservationRequest):  # its robot id is its connection's (see ServerSocket)
                self._requests.put(msg.robot_id, _Pending(identity, msg, time.perf_counter_ns()))
            elif isinstance(msg, HealthRequest):
                self._reply(identity, HealthReply(health=self.health()))
            else:
                server.send(
                    identity,
                    ErrorReply(
                        request_id=getattr(msg, "request_id", -1),
                        code="protocol",
                        message=f"a robot may not send {type(msg).__name__}",
                    ),
                    0.0,
                )

    def _send_replies(self, server: ServerSocket) -> None:
        while True:
            try:
                identity, reply = self._replies.get_nowait()
            except queue.Empty:
                return
            try:
                server.send(identity, reply, timeout_s=0.0)
            except (PeerLost, TransportTimeout) as exc:
                log.debug("reply dropped: %s", exc)

    def _model_loop(self) -> None:
        """Batch and answer requests until stopped. An unexpected error is logged (with its
        traceback the first time of each kind) and counted, and the loop goes on: one
        request never stops the model thread for the other robots."""
        while not self._stop.is_set():
            try:
                self._serve_next_batch()
            except Exception as exc:
                self._note_error("model thread", exc)

    def _serve_next_batch(self) -> None:
        batch = self._requests.take(self.config.max_batch, timeout_s=0.02)
        if not batch:
            with self._gate:
                if not self._running:
                    self._apply_pending_weights()  # idle: swap now, the next chunk needs no wait
            return
        deadline = time.perf_counter() + self.config.batch_wait_ms / 1000.0
        while len(batch) < self.config.max_batch:
            more = self._requests.take(self.config.max_batch - len(batch), max(0.0, deadline - time.perf_counter()))
            if not more:
                break
            self._requests.count_superseded(len(batch.keys() & more.keys()))
            batch.update(more)  # a robot's newest request wins
        with self._gate:
            while self._running and self._pending_weights is not None:
                self._gate.wait(0.1)  # new weights: let the running batches finish
            self._apply_pending_weights()
            self._running += 1
        try:
            self._answer(list(batch.values()))
        finally:
            with self._gate:
                self._running -= 1
                self._gate.notify_all()

    def _answer(self, batch: list[_Pending]) -> None:
        """Refuse the malformed requests (an error to each sender alone), answer the rest."""
        valid = []
        for p in batch:
            problem = request_problem(p.request, self.policy.metadata)
            if problem is None:
                valid.append(p)
                continue
            self.refused += 1
            self._note_error("bad request", ValueError(f"from {p.request.robot_id!r}: {problem}"), traceback=False)
            self._reply(p.identity, ErrorReply(request_id=p.request.request_id, code="bad_request", message=problem))
        if valid:
            self._answer_valid(valid)

    def _answer_valid(self, batch: list[_Pending]) -> None:
        start_ns = time.perf_counter_ns()
        try:
            chunks = self._predict([self._observation(p.request) for p in batch], [p.request.robot_id for p in batch])
        except Exception as exc:
            if len(batch) > 1:  # find the request the policy fails on: the others still get their chunks
                for p in batch:
                    self._answer_valid([p])
                return
            self._note_error("policy", exc)
            request = batch[0].request
            self._reply(batch[0].identity, ErrorReply(request_id=request.request_id, code="server", message=str(exc)))
            return
        model_ns = time.perf_counter_ns() - start_ns
        self._batches.append((time.monotonic(), len(batch)))
        self.first_chunk_ns.setdefault(self.version, time.monotonic_ns())
        hold_ns = 0 if self.hold is None else self.hold.draw_ns()
        for p, chunk in sorted(zip(batch, chunks), key=lambda pair: pair[0].received_ns):
            if hold_ns:
                time.sleep(max(0, p.received_ns + hold_ns - time.perf_counter_ns()) / 1e9)
            queue_ns = start_ns - p.received_ns
            total_ns = time.perf_counter_ns() - p.received_ns
            self.stats.add(queue=queue_ns, model=model_ns, total=total_ns)
            self._reply(
                p.identity,
                ChunkReply(
                    request_id=p.request.request_id,
                    start_tick=chunk.start_tick,
                    actions=np.asarray(chunk.actions_rad, dtype=np.float32),
                    version=self.version,
                    timings_ns={"queue": queue_ns, "model": model_ns, "total": total_ns},
                ),
            )

    def _note_error(self, kind: str, exc: BaseException, *, traceback: bool = True) -> None:
        """Count an error of `kind`; log the first one (with its traceback when asked) and
        then at most one line per `LOG_EVERY_S` per kind, with the count, so a flood makes
        few lines."""
        with self._lock:
            self.errors[kind] = count = self.errors.get(kind, 0) + 1
            self.last_error = f"{kind}: {exc}"
            due = self._log_limiter.due(kind)
        if due:
            log.warning("%s (%d so far): %s", kind, count, exc, exc_info=exc if traceback and count == 1 else None)

    def health(self) -> dict:
        """Threads alive, errors by kind, the last error, requests waiting (at most one per
        robot), requests superseded by a newer one of their robot, model batches per second
        and their mean size (requests per model call) over the last `HEALTH_WINDOW_S`,
        `chunk_ms` (p50 / p99 of the time from a request's arrival to its reply, ms, over
        the last 10,000 chunks), the weight version,
        requests refused, messages dropped from quarantined connections, `gpu` (the
        device's memory and utilisation, `GpuHealth`; None when the device was not given),
        and (with `weights_from`) the learner connection: answering, and why it was given up."""
        with self._lock:
            errors, last = dict(self.errors), self.last_error
        sub = self.subscriber
        recent = time.monotonic() - HEALTH_WINDOW_S
        sizes = [size for at, size in list(self._batches) if at >= recent]
        return {
            "threads_alive": {t.name: t.is_alive() for t in self._threads},
            "errors": errors,
            "last_error": last,
            "queued_requests": len(self._requests),
            "superseded_requests": self._requests.superseded,
            "batches_per_s": len(sizes) / HEALTH_WINDOW_S,
            "batch_size": sum(sizes) / len(sizes) if sizes else 0.0,
            "chunk_ms": self.stats.percentiles_ms("total", (50, 99)),
            "gpu": self._gpu_health(),
            "version": self.version,
            "refused": self.refused,
            "quarantined_drops": 0 if self._socket is None else self._socket.quarantined_drops,
            "learner": None if sub is None else {"connected": sub.learner_connected, "failure": sub.failure},
        }

    def _gpu_health(self) -> GpuHealth | None:
        if self.device is None:
            return None
        if not self.device.startswith("cuda"):
            return gpu_report(self.device)
        from robotrl.policies.device import gpu_health

        return gpu_health(self.device)

    def _reply(self, identity: bytes, reply: Message) -> None:
        self._replies.put((identity, reply))
        try:
            self._wake_push.send(b"", zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # the I/O loop polls every 100 ms anyway

    def _observation(self, req: ObservationRequest) -> PolicyObservation:
        """The policy's view of a request: the state forwarded to the chunk's first tick."""
        s_hat = forward_state(
            np.asarray(req.state, dtype=np.float64),
            np.asarray(req.in_flight, dtype=np.float64),
            req.delay_ticks,
            max_step_rad=self._max_step,
        )
        prefix = np.asarray(req.prefix, dtype=np.float64) if req.prefix is not None and len(req.prefix) else None
        obs = PolicyObservation(
            state_rad=s_hat,
            tick=req.tick,
            instruction=req.instruction,
            images=dict(req.images),
            delay_ticks=req.delay_ticks,
            prefix_rad=prefix,
            env_state=req.env_state,
        )
        if self._slow_refresh and obs.images:
            with self._lock:
                self._newest_obs[req.robot_id] = obs
        return obs

    def _predict(self, observations: list[PolicyObservation], robot_ids: list[str]) -> list[ActionChunk]:
        policy = self.policy
        if self._latents is None:
            if isinstance(policy, BatchedPolicy):
                return policy.predict_chunks(observations)
            return [policy.predict_chunk(obs) for obs in observations]
        assert isinstance(policy, SlowFastPolicy)
        pairs = self._latents.latents_for(robot_ids, observations, self.version)
        latents, ages = [value for value, _ in pairs], [age for _, age in pairs]
        if isinstance(policy, BatchedPolicy):
            return policy.predict_chunks(observations, latents, ages)
        return [policy.predict_chunk(obs, latent, age) for obs, latent, age in zip(observations, latents, ages)]

    def _slow_loop(self) -> None:
        assert self._latents is not None
        period_s = 1.0 / self.config.slow_rate_hz
        while not self._stop.wait(period_s):
            with self._lock:
                newest = dict(self._newest_obs)
                self._newest_obs.clear()
            if newest:  # one call for all; a robot that fails keeps its latent, the thread goes on
                with self._model_lock:
                    self._latents.refresh_many(
                        newest, self.version, on_error=lambda _, exc: self._note_error("slow pathway", exc)
                    )

    def _apply_pending_weights(self) -> None:
        with self._lock:
            pending, self._pending_weights = self._pending_weights, None
        if pending is not None:
            version, weights = pending
            start = time.perf_counter()
            with self._model_lock:
                try:
                    if isinstance(self.policy, StagedReloadablePolicy):
                        self.policy.swap_weights(weights)
                    else:
                        assert isinstance(self.policy, ReloadablePolicy)
                        self.policy.load_weights(weights)
                except Exception:
                    log.exception(
                        "weights version %d could not be loaded; still serving version %d", version, self.version
                    )
                    return
                self.version = version
            self.swapped_at_ns[version] = time.monotonic_ns()
            self.swap_ms[version] = (time.perf_counter() - start) * 1000.0
            log.info("weights version %d in service", version)
