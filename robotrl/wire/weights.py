"""Weight flow from the learner to the policy servers over ZMQ.

The learner's `WeightPublisher` binds two sockets:
- a PUB socket (`pub_endpoint`, e.g. "tcp://*:5561") that sends one `WeightsAnnouncement`
  (version + safetensors bytes, one frame) per `publish`;
- a ROUTER socket (`latest_endpoint`, by convention the PUB port + 1, see
  `weight_endpoints`) that answers a `WeightsRequest` with the newest announcement, or
  an `ErrorReply` when it has nothing newer than asked (code "none_newer").

A server's `WeightSubscriber` connects to both: it takes announcements from the PUB
socket (conflated: only the newest waiting one counts) and asks the ROUTER for the
latest when it starts, after every reconnect of the PUB connection, and every
`refresh_s` (a late joiner, or an announcement dropped by a slow link, still gets the
newest weights). Each version newer than the last one handed over goes to
`on_weights(version, safetensors_bytes)` once, in version order, never an older one.

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
from zmq.utils.monitor import recv_monitor_message

from robotrl.core.errors import ProtocolError, VersionMismatch, WireError
from robotrl.wire import codec
from robotrl.wire.keys import ClientKeys, ServerKeys, curve_client, curve_server
from robotrl.wire.messages import PROTOCOL_VERSION, ErrorReply, WeightsAnnouncement, WeightsRequest

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
        self._router = self._ctx.socket(zmq.ROUTER)
        for sock in (self._pub, self._router):
            sock.setsockopt(zmq.LINGER, 0)
        self._pub.setsockopt(zmq.SNDHWM, 4)  # weights are big; subscribers only need the newest
        self._router.setsockopt(zmq.MAXMSGSIZE, REQUEST_MAX_BYTES)
        self._auth = None
        try:
            if curve is not None:  # encrypted; only allowed servers subscribe or ask
                self._auth = curve_server(self._ctx, curve, self._pub, self._router)
            self.pub_endpoint = _bind(self._pub, pub_endpoint)
            self.latest_endpoint = _bind(self._router, latest_endpoint)
        except BaseException:
            self._close_sockets()
            raise
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
        if self._auth is not None:
            self._auth.stop()
        self._pub.close(linger=0)
        self._router.close(linger=0)
        self._ctx.term()

    def _serve_latest(self) -> None:
        while not self._stop.is_set():
            if not self._router.poll(POLL_MS, zmq.POLLIN):
                continue
            identity, *frames = self._router.recv_multipart()
            try:
                msg = codec.decode(frames)
            except ProtocolError as exc:
                self._answer(identity, _single_frame(ErrorReply(request_id=-1, code="protocol", message=str(exc))))
                continue
            if not isinstance(msg, WeightsRequest):
                reply = ErrorReply(
                    request_id=-1,
                    code="protocol",
                    message=f"the weights socket answers WeightsRequest only, not {type(msg).__name__}",
                )
                self._answer(identity, _single_frame(reply))
                continue
            with self._lock:
                latest = self._latest
            if latest is None or latest[0] <= msg.newer_than:
                newest = -1 if latest is None else latest[0]
                self._answer(
                    identity,
                    _single_frame(
                        ErrorReply(request_id=-1, code="none_newer", message=f"newest weights are version {newest}")
                    ),
                )
            else:
                self._answer(identity, latest[1])
                self.requests_answered += 1

    def _answer(self, identity: bytes, frame: bytes) -> None:
        try:
            self._router.send_multipart([identity, frame], zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # gone or not reading: it asks again
            log.debug("weights reply dropped: %s", exc)


class WeightSubscriber:
    """Server side: a thread that receives weights and hands each newer version to
    `on_weights(version, safetensors_bytes)` (called from that thread).

    Args:
        pub_endpoint: the learner's PUB endpoint ("tcp://learner:5561").
        latest_endpoint: its latest-weights endpoint ("tcp://learner:5562").
        on_weights: called once per version newer than `newer_than`, in increasing order.
        newer_than: versions up to this one are ignored (the server's current version).
        request_timeout_s: a request unanswered for this long is given up (socket
            reopened) and asked again.
        refresh_s: period of the "anything newer?" request that backs up the PUB stream.

    Attributes:
        version: newest version handed over (`newer_than` before any).
        received_at_ns: version -> `time.monotonic_ns()` when it arrived.
        handed_over: versions passed to `on_weights`, in order.
    """

    def __init__(
        self,
        pub_endpoint: str,
        latest_endpoint: str,
        on_weights: Callable[[int, bytes], None],
        *,
        newer_than: int = -1,
        request_timeout_s: float = 2.0,
        refresh_s: float = 5.0,
        curve: ClientKeys | None = None,
    ) -> None:
        if request_timeout_s <= 0 or refresh_s <= 0:
            raise ValueError(f"request_timeout_s={request_timeout_s} and refresh_s={refresh_s} must be positive")
        self.pub_endpoint, self.latest_endpoint = pub_endpoint, latest_endpoint
        self.on_weights = on_weights
        self.version = newer_than
        self.request_timeout_s, self.refresh_s = request_timeout_s, refresh_s
        self.curve = curve
        self.received_at_ns: dict[int, int] = {}
        self.handed_over: list[int] = []
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
        monitor = sub.get_monitor_socket(zmq.EVENT_CONNECTED)
        sub.connect(self.pub_endpoint)
        dealer = None
        asked_at = None  # monotonic s of the request in flight
        next_ask = time.monotonic()  # ask for the latest at start
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if asked_at is not None and now - asked_at > self.request_timeout_s:
                    if dealer is not None:  # always: asked_at is only set once a dealer exists
                        dealer.close(linger=0)  # lazy pirate: a fresh socket, ask again
                    dealer, asked_at, next_ask = None, None, now
                if asked_at is None and now >= next_ask:
                    dealer = dealer or _dealer(ctx, self.latest_endpoint, self.curve)
                    try:
                        dealer.send_multipart(codec.encode(WeightsRequest(newer_than=self.version)), zmq.NOBLOCK)
                    except zmq.Again:
                        pass  # not connected yet: counts as unanswered, asked again after the timeout
                    asked_at, next_ask = now, now + self.refresh_s
                poller = zmq.Poller()
                for sock in (sub, monitor) + ((dealer,) if dealer is not None else ()):
                    poller.register(sock, zmq.POLLIN)
                events = dict(poller.poll(POLL_MS))
                if monitor in events:
                    recv_monitor_message(monitor)
                    next_ask = time.monotonic() if asked_at is None else next_ask  # (re)connected
                if sub in events:
                    self._take(sub.recv())
                if dealer is not None and dealer in events:
                    self._take(*dealer.recv_multipart())
                    asked_at = None
        except Exception:
            log.exception("weight subscriber failed; no more weight updates")
        finally:
            sub.disable_monitor()
            monitor.close(linger=0)
            sub.close(linger=0)
            if dealer is not None:
                dealer.close(linger=0)
            ctx.term()

    def _take(self, *frames: bytes) -> None:
        try:
            msg = codec.decode(list(frames))
        except ProtocolError as exc:
            log.warning("undecodable message on the weights sockets: %s", exc)
            return
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


def _dealer(ctx: zmq.Context, endpoint: str, curve: ClientKeys | None) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        curve_client(sock, curve)
    sock.connect(endpoint)
    return sock


def _single_frame(msg) -> bytes:
    """`msg` encoded as one frame (these messages carry no arrays)."""
    frames = codec.encode(msg)
    assert len(frames) == 1, "weights messages carry no out-of-band arrays"
    return bytes(frames[0])
