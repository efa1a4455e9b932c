"""Weight flow from the learner to the policy servers over ZMQ.

The learner's `WeightPublisher` binds two sockets:
- a PUB socket (`pub_endpoint`, e.g. "tcp://*:5561") that sends one `WeightsAnnouncement`
  (version + safetensors bytes + protocol version, one frame) per `publish`;
- a `transport.ServerSocket` (`latest_endpoint`, by convention the PUB port + 1, see
  `weight_endpoints`): hello with the protocol version, heartbeats, CURVE allow-list; it
  answers a `WeightsRequest` with the newest announcement, or an `ErrorReply` when it has
  nothing newer than asked (code "none_newer").

A server's `WeightSubscriber` connects to both: it takes announcements from the PUB
socket (conflated: only the newest waiting one counts) and, through a `ClientSocket`
(role "server"), asks for the latest after every hello (at start and after the learner
comes back) and every `refresh_s` (a late joiner, or an announcement dropped by a slow
link, still gets the newest weights). Heartbeats on that connection tell it within about
half a second that the learner is gone (`learner_connected`). Each version newer than
the last one handed over goes to `on_weights(version, safetensors_bytes)` once, in
version order, never an older one. A learner of another protocol version is refused with
one line, and no weights are taken from it.

Robot/server side: no torch, no mujoco. Every wait is bounded; `stop()` joins.
Times are `time.monotonic_ns()` (comparable between processes of one machine).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import zmq

from robotrl.core.errors import PeerLost, ProtocolError, TransportTimeout, VersionMismatch, WireError
from robotrl.wire import codec
from robotrl.wire.client import ClientSocket
from robotrl.wire.keys import ClientKeys, ServerKeys, curve_client, curve_server
from robotrl.wire.messages import PROTOCOL_VERSION, ErrorReply, WeightsAnnouncement, WeightsRequest
from robotrl.wire.transport import ServerSocket, send_frames

log = logging.getLogger(__name__)

POLL_MS = 50
"""Longest wait of the background threads before they look at their stop flag."""


def weight_endpoints(endpoint: str) -> tuple[str, str]:
    """(PUB endpoint, latest-weights endpoint) for a learner's weight endpoint
    "tcp://host:port": the PUB socket is on `port`, the latest-weights ROUTER on
    `port + 1` ("tcp://*:5561" -> "tcp://*:5561", "tcp://*:5562")."""
    parts = urlsplit(endpoint)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "tcp" or port is None or not parts.hostname:
        raise ValueError(
            f"weight endpoint must look like tcp://host:port (the latest-weights socket "
            f"is on port + 1), got {endpoint!r}"
        )
    return f"tcp://{parts.hostname}:{port}", f"tcp://{parts.hostname}:{port + 1}"


REQUEST_MAX_BYTES = 64 * 1024
"""Largest message the latest-weights socket takes in (a `WeightsRequest` is tiny)."""


class WeightPublisher:
    """Learner side: publishes weights and answers requests for the newest.

    Args:
        pub_endpoint: where the PUB socket binds ("tcp://*:5561"; "tcp://127.0.0.1:*"
            picks a free port, see `self.pub_endpoint`).
        latest_endpoint: where the ROUTER answering `WeightsRequest` binds.

    Attributes:
        pub_endpoint, latest_endpoint: the bound endpoints (real ports).
        published_at_ns: version -> `time.monotonic_ns()` when it was sent.
        requests_answered: `WeightsRequest`s answered with weights.
    """

    def __init__(self, pub_endpoint: str, latest_endpoint: str, *, curve: ServerKeys | None = None) -> None:
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.setsockopt(zmq.SNDHWM, 4)  # weights are big; subscribers only need the newest
        self._auth = None
        self._latest_server: ServerSocket | None = None
        try:
            if curve is not None:  # encrypted; only allowed servers subscribe
                self._auth = curve_server(self._ctx, curve, self._pub)
            self.pub_endpoint = _bind(self._pub, pub_endpoint)
            self._latest_server = ServerSocket(
                latest_endpoint, curve=curve, max_message_bytes=REQUEST_MAX_BYTES, server_info={"role": "learner"}
            )
        except BaseException:
            self._close_sockets()
            raise
        self.latest_endpoint = self._latest_server.endpoint
        self.published_at_ns: dict[int, int] = {}
        self.requests_answered = 0
        self._latest: tuple[int, bytes] | None = None  # (version, encoded announcement)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve_latest, name="robotrl-weights-latest", daemon=True)
        self._thread.start()

    def publish(self, version: int, safetensors_bytes: bytes) -> None:
        """Send weights `version` to every subscriber and keep them for late joiners.
        Versions must increase; never blocks (a subscriber that is behind misses this
        announcement and gets a newer one, or asks for the latest)."""
        with self._lock:
            if self._latest is not None and version <= self._latest[0]:
                raise ValueError(f"weight version {version} is not newer than the published {self._latest[0]}")
            frame = _single_frame(WeightsAnnouncement(version=version, safetensors=bytes(safetensors_bytes)))
            self._latest = (version, frame)
            try:
                self._pub.send(frame, zmq.NOBLOCK)
            except zmq.Again:
                log.debug("weights %d: a subscriber queue is full, it will ask for the latest", version)
            self.published_at_ns[version] = time.monotonic_ns()

    @property
    def latest_version(self) -> int:
        """Newest published version (-1 before the first)."""
        with self._lock:
            return -1 if self._latest is None else self._latest[0]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        self._close_sockets()

    def __enter__(self) -> WeightPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _close_sockets(self) -> None:
        if self._latest_server is not None:
            self._latest_server.close()
        if self._auth is not None:
            self._auth.stop()
        self._pub.close(linger=0)
        self._ctx.term()

    def _serve_latest(self) -> None:
        assert self._latest_server is not None  # set before this thread starts
        server = self._latest_server
        while not self._stop.is_set():
            try:
                identity, msg = server.recv(POLL_MS / 1000)
            except TransportTimeout:
                continue
            except ProtocolError as exc:  # already answered by the socket
                log.debug("latest-weights socket: %s", exc)
                continue
            if not isinstance(msg, WeightsRequest):
                text = f"the weights socket answers WeightsRequest only, not {type(msg).__name__}"
                self._answer(server, identity, ErrorReply(request_id=-1, code="protocol", message=text))
                continue
            with self._lock:
                latest = self._latest
            if latest is None or latest[0] <= msg.newer_than:
                newest = -1 if latest is None else latest[0]
                text = f"newest weights are version {newest}"
                self._answer(server, identity, ErrorReply(request_id=-1, code="none_newer", message=text))
                continue
            try:  # the announcement as encoded once for the PUB socket
                send_frames(server.socket, [identity, latest[1]], 0.0, self.latest_endpoint, identity)
                self.requests_answered += 1
            except (PeerLost, TransportTimeout) as exc:  # gone or not reading: it asks again
                log.debug("weights reply dropped: %s", exc)

    @staticmethod
    def _answer(server: ServerSocket, identity: bytes, reply: ErrorReply) -> None:
        try:
            server.send(identity, reply, timeout_s=0.0)
        except (PeerLost, TransportTimeout) as exc:
            log.debug("weights reply dropped: %s", exc)


class WeightSubscriber:
    """Server side: a thread that receives weights and hands each newer version to
    `on_weights(version, safetensors_bytes)` (called from that thread).

    Args:
        pub_endpoint: the learner's PUB endpoint ("tcp://learner:5561").
        latest_endpoint: its latest-weights endpoint ("tcp://learner:5562").
        on_weights: called once per version newer than `newer_than`, in increasing order.
        newer_than: versions up to this one are ignored (the server's current version).
        refresh_s: period of the "anything newer?" request that backs up the PUB stream.

    Attributes:
        version: newest version handed over (`newer_than` before any).
        received_at_ns: version -> `time.monotonic_ns()` when it arrived.
        handed_over: versions passed to `on_weights`, in order.
        learner_connected: the learner answers on the latest-weights connection.
        failure: why the thread gave up (a learner of another protocol version), or "".
    """

    def __init__(
        self,
        pub_endpoint: str,
        latest_endpoint: str,
        on_weights: Callable[[int, bytes], None],
        *,
        newer_than: int = -1,
        refresh_s: float = 5.0,
        curve: ClientKeys | None = None,
    ) -> None:
        if refresh_s <= 0:
            raise ValueError(f"refresh_s={refresh_s} must be positive")
        self.pub_endpoint, self.latest_endpoint = pub_endpoint, latest_endpoint
        self.on_weights = on_weights
        self.version = newer_than
        self.refresh_s = refresh_s
        self.curve = curve
        self.received_at_ns: dict[int, int] = {}
        self.handed_over: list[int] = []
        self.learner_connected = False
        self.failure = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="robotrl-weights-sub", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None

    def __enter__(self) -> WeightSubscriber:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the thread ----------------------------------------------------------------------
    def _run(self) -> None:
        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.CONFLATE, 1)  # keep only the newest waiting announcement
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        if self.curve is not None:
            curve_client(sub, self.curve)
        sub.connect(self.pub_endpoint)
        latest = ClientSocket(self.latest_endpoint, role="server", curve=self.curve, max_message_bytes=None)
        next_ask = 0.0  # monotonic s of the next "anything newer?" request
        lost_logged = False
        try:
            while not self._stop.is_set():
                was_connected = self.learner_connected
                try:
                    reply = latest.poll(0.0)
                    self.learner_connected = latest.ready
                    if reply is not None:
                        self._take(reply)
                    if latest.ready and (not was_connected or time.monotonic() >= next_ask):
                        latest.send(WeightsRequest(newer_than=self.version), timeout_s=0.0)
                        next_ask = time.monotonic() + self.refresh_s
                        lost_logged = False
                except PeerLost as exc:
                    self.learner_connected = False
                    if not lost_logged:  # once per outage
                        log.warning("weights: %s", exc)
                        lost_logged = True
                except TransportTimeout:
                    pass  # the request could not be queued: asked again at the next refresh
                if sub.poll(POLL_MS, zmq.POLLIN):
                    try:
                        self._take(codec.decode([sub.recv()]))
                    except ProtocolError as exc:
                        log.warning("undecodable message on the weights PUB socket: %s", exc)
        except ProtocolError as exc:  # the hello was refused: another protocol version
            self.failure = str(exc)
            log.error("weights from %s refused, no weight updates: %s", self.latest_endpoint, exc)
        except Exception:
            self.failure = "unexpected error (see the log)"
            log.exception("weight subscriber failed; no more weight updates")
        finally:
            latest.close()
            sub.close(linger=0)
            ctx.term()

    def _take(self, msg: object) -> None:
        if isinstance(msg, ErrorReply):
            if msg.code != "none_newer":
                log.warning("learner refused a weights request: %s: %s", msg.code, msg.message)
            return
        if not isinstance(msg, WeightsAnnouncement) or msg.version <= self.version:
            return
        if msg.protocol_version != PROTOCOL_VERSION:
            log.error(
                "%s: weights version %d ignored", VersionMismatch(PROTOCOL_VERSION, msg.protocol_version), msg.version
            )
            return
        self.received_at_ns[msg.version] = time.monotonic_ns()
        try:
            self.on_weights(msg.version, msg.safetensors)
        except Exception:
            log.exception("weights version %d were not taken", msg.version)
            return
        self.version = msg.version
        self.handed_over.append(msg.version)


def _bind(sock: zmq.Socket, endpoint: str) -> str:
    try:
        sock.bind(endpoint)
    except zmq.ZMQError as exc:
        raise WireError(f"cannot bind {endpoint}: {exc} (another learner there? pick another port)") from None
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


def _single_frame(msg) -> bytes:
    """`msg` encoded as one frame (these messages carry no arrays)."""
    frames = codec.encode(msg)
    assert len(frames) == 1, "weights messages carry no out-of-band arrays"
    return bytes(frames[0])
