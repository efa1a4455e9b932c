"""The transitions channel: each robot's `TransitionBatch`es to the learner, over `transport`.

Robot side, `TransitionSender`: a `ClientSocket` (role "actor") in its own thread, so the learner gets a
hello with the protocol version and the robot id, heartbeats tell the robot when the
learner is gone, and the socket reconnects by itself. Batches wait in a bounded queue
while the learner is away or slow; beyond `queue_batches` the oldest are dropped and
counted. Batches already handed to ZMQ when a connection dies are lost (the learner sees
a gap in `seq`).

Learner side, `TransitionInbox`: a `ServerSocket` served by its own thread, so hellos
and heartbeats are answered while the learner is busy with a long update or a
checkpoint. A batch from a connection that does not own its robot id, of another
protocol version, or that is not a `TransitionBatch` is refused (counted per kind, logged
at most once per `core.ratelimit.LOG_EVERY_S` per kind); good batches are handed over in arrival order.

Never blocks the robot's control loop: `TransitionSender.send` only queues.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque

from robotrl.core.errors import PeerLost, ProtocolError, TransportTimeout, VersionMismatch, WrongRobotId
from robotrl.core.ratelimit import LogLimiter
from robotrl.wire.client import ClientSocket
from robotrl.wire.keys import ClientKeys, ServerKeys
from robotrl.wire.messages import PROTOCOL_VERSION, ErrorReply, TransitionBatch
from robotrl.wire.transport import MAX_MESSAGE_BYTES, ServerSocket

log = logging.getLogger(__name__)

POLL_S = 0.05
"""Longest wait of the inbox thread before it looks at its stop flag."""


class TransitionSender:
    """Robot side of the transitions channel, for one robot (`robot_id`): a thread owns the
    connection (hello, heartbeats, reconnects, sending); `send` only queues.

    Attributes: sent_batches (handed to ZMQ), dropped_batches (queue overflow),
    `connected` (the learner answered this connection's hello).
    """

    def __init__(
        self, endpoint: str, robot_id: str, *, queue_batches: int = 256, curve: ClientKeys | None = None
    ) -> None:
        if queue_batches < 1:
            raise ValueError(f"queue_batches={queue_batches} must be >= 1")
        self.endpoint, self.robot_id, self.queue_batches = endpoint, robot_id, queue_batches
        self._client = ClientSocket(endpoint, robot_id=robot_id, role="actor", curve=curve)
        self._queue: deque[TransitionBatch] = deque()
        self._lock = threading.Lock()
        self.sent_batches = self.dropped_batches = 0
        self._failure: ProtocolError | None = None
        self._linger_s = 0.0
        self._log_limiter = LogLimiter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"robotrl-transitions-{robot_id}", daemon=True)
        self._thread.start()

    @property
    def connected(self) -> bool:
        return self._client.ready

    @property
    def queued_batches(self) -> int:
        return len(self._queue)

    def send(self, batch: TransitionBatch) -> None:
        """Queue `batch` (never blocks; beyond `queue_batches` the oldest is dropped).
        Raises `ProtocolError` (one line) once the learner has refused this robot: another
        protocol version, or under CURVE a robot id bound to another key (retrying does
        not help)."""
        if self._failure is not None:
            raise self._failure
        with self._lock:
            self._queue.append(batch)
            if len(self._queue) > self.queue_batches:
                self._queue.popleft()
                self.dropped_batches += 1
                dropped = self.dropped_batches
            else:
                return
        self._warn("dropped", f"learner at {self.endpoint} not taking transitions; {dropped} batches dropped so far")

    def flush(self, timeout_s: float) -> bool:
        """Wait until the queue is empty or `timeout_s` passed; True if it is empty."""
        deadline = time.monotonic() + timeout_s
        while self._queue and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        return not self._queue

    def close(self, linger_s: float = 0.0) -> None:
        """Stop the thread and close the connection; batches still queued here are dropped
        (`flush` first), those already handed to ZMQ get up to `linger_s` to go out."""
        self._linger_s = linger_s
        self._stop.set()
        self._thread.join(timeout=2.0 + linger_s)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._pump()
        except ProtocolError as exc:
            log.error("robot %r: the learner at %s refused this robot: %s", self.robot_id, self.endpoint, exc)
            self._failure = exc
        finally:
            self._client.close(self._linger_s)

    def _pump(self) -> None:
        """Send what is queued while connected, then wait briefly for the learner (driving
        the hello, heartbeats and reconnects)."""
        try:
            while self._queue and self._client.ready:
                self._client.send(self._queue[0], timeout_s=0.0)
                with self._lock:
                    self._queue.popleft()
                self.sent_batches += 1
            reply = self._client.poll(0.002 if self._queue and self._client.ready else POLL_S)
            if isinstance(reply, ErrorReply):
                self._warn(reply.code, f"learner at {self.endpoint} refused a batch: {reply.code}: {reply.message}")
        except PeerLost as exc:
            self._warn("lost", f"{exc}; {len(self._queue)} batches waiting")
        except TransportTimeout:
            pass  # ZMQ's queue is full: the batch stays in ours

    def _warn(self, kind: str, message: str) -> None:
        if self._log_limiter.due(kind):
            log.warning("robot %r: %s", self.robot_id, message)


class TransitionInbox:
    """Learner side of the transitions channel: binds `endpoint` at construction (raising
    `WireError` for a bad endpoint or a port in use) and receives in a thread.

    Args:
        capacity: batches held for `take`; when the learner falls that far behind, newer
            batches are dropped (counted in `refused["learner behind"]`).

    Attributes: endpoint (bound, real port), received (good batches), refused (kind ->
    count of batches or messages refused).
    """

    def __init__(
        self,
        endpoint: str,
        *,
        curve: ServerKeys | None = None,
        capacity: int = 1000,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self._server = ServerSocket(endpoint, curve=curve, max_message_bytes=max_message_bytes)
        self.endpoint = self._server.endpoint
        self._batches: queue.Queue[TransitionBatch] = queue.Queue(maxsize=capacity)
        self.received = 0
        self.refused: dict[str, int] = {}
        self._log_limiter = LogLimiter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="robotrl-transitions-in", daemon=True)
        self._thread.start()

    def take(self, timeout_s: float, max_batches: int) -> list[TransitionBatch]:
        """Up to `max_batches` batches in arrival order, waiting at most `timeout_s` for
        the first."""
        try:
            batches = [self._batches.get(timeout=timeout_s) if timeout_s > 0 else self._batches.get_nowait()]
        except queue.Empty:
            return []
        while len(batches) < max_batches:
            try:
                batches.append(self._batches.get_nowait())
            except queue.Empty:
                break
        return batches

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        self._server.close()

    def __enter__(self) -> TransitionInbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._receive_one()
            except Exception as exc:  # never silently: log it, count it, keep receiving
                self._refuse("inbox error", f"unexpected error in the transitions inbox: {exc!r}")
                log.debug("transitions inbox error", exc_info=True)

    def _receive_one(self) -> None:
        try:
            identity, msg = self._server.recv(POLL_S)
        except TransportTimeout:
            return
        except WrongRobotId as exc:
            self._refuse("wrong robot id", str(exc))
            return
        except ProtocolError as exc:
            self._refuse("protocol", str(exc))
            return
        if not isinstance(msg, TransitionBatch):
            text = f"the transitions socket takes TransitionBatch only, not {type(msg).__name__}"
            self._server.send(identity, ErrorReply(request_id=-1, code="protocol", message=text), 0.0)
            self._refuse("protocol", f"client {identity.hex()}: {text}")
            return
        if msg.protocol_version != PROTOCOL_VERSION:
            mismatch = VersionMismatch(PROTOCOL_VERSION, msg.protocol_version)
            self._refuse("protocol version", f"robot {msg.robot_id!r}: {mismatch}")
            return
        try:
            self._batches.put_nowait(msg)
        except queue.Full:
            self._refuse(
                "learner behind",
                f"learner {self._batches.maxsize} batches behind; robot {msg.robot_id!r}'s batch dropped",
            )
            return
        self.received += 1

    def _refuse(self, kind: str, message: str) -> None:
        self.refused[kind] = count = self.refused.get(kind, 0) + 1
        if self._log_limiter.due(kind):
            log.error("transitions refused (%s, %d so far): %s", kind, count, message)
