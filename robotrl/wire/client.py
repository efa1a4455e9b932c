"""`ClientSocket`: the robot's DEALER end of `transport` (hello, heartbeats, reconnects).

Never blocks longer than asked: `poll(timeout_s)` returns the next reply or None, and
drives the heartbeats and reconnects, so a control loop calls `poll(0.0)` once a tick.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import zmq

from robotrl.core.errors import PeerLost, ProtocolError, TransportTimeout, VersionMismatch
from robotrl.wire import codec
from robotrl.wire.keys import ClientKeys, load_keypair, load_public_key
from robotrl.wire.messages import (
    PROTOCOL_VERSION,
    ErrorReply,
    Heartbeat,
    HeartbeatAck,
    Hello,
    HelloReply,
    Message,
    ObservationRequest,
)
from robotrl.wire.transport import MAX_MESSAGE_BYTES, _ms, send_frames

log = logging.getLogger(__name__)


HEARTBEAT_S = 0.15
"""An idle client's heartbeat period: with `MISSED_HEARTBEATS` a dead server is noticed
within about half a second, and the arm holds from that tick."""
MISSED_HEARTBEATS = 3
CONNECT_TIMEOUT_S = 3.0
"""How long a robot waits for a server's hello reply before saying it is unreachable."""


class ClientSocket:
    """DEALER socket connected to a `ServerSocket` at `endpoint`.

    Liveness: with nothing received for `heartbeat_s`, the client sends a `Heartbeat`
    every `heartbeat_s`; when `missed_heartbeats` of them stay unanswered, `poll` raises
    `PeerLost` (so within `(missed_heartbeats + 1) * heartbeat_s` of the last message,
    when polled). The next `poll` opens a fresh socket and says hello again; `ready`
    is True once the server has answered. ZMQ itself retries the TCP connection every
    `reconnect_ivl_ms`, backing off to `reconnect_ivl_max_ms`.

    `jpeg_quality` (1-100 or None): send uint8 (H, W, 3) images as JPEG.
    `max_message_bytes`: a larger message from the server drops the connection before it is
    buffered (ZMQ_MAXMSGSIZE; None: no limit, for the weights, whose size is the model's). Use it from one
    thread only. Timing of the last call for latency reports: `last_encode_ns` (send),
    `last_decode_ns` (poll), `last_sent_bytes` (send, all frames).
    """

    def __init__(
        self,
        endpoint: str,
        *,
        robot_id: str = "",
        role: str = "robot",
        client_info: dict[str, Any] | None = None,
        curve: ClientKeys | None = None,
        heartbeat_s: float = HEARTBEAT_S,
        missed_heartbeats: int = MISSED_HEARTBEATS,
        reconnect_ivl_ms: int = 100,
        reconnect_ivl_max_ms: int = 2000,
        jpeg_quality: int | None = None,
        max_message_bytes: int | None = MAX_MESSAGE_BYTES,
    ) -> None:
        if heartbeat_s <= 0 or missed_heartbeats < 1:
            raise ValueError(f"heartbeat_s={heartbeat_s}, missed_heartbeats={missed_heartbeats}: both must be positive")
        self.endpoint = endpoint
        self.hello = Hello(
            protocol_version=PROTOCOL_VERSION, role=role, robot_id=robot_id, client_info=dict(client_info or {})
        )
        self.heartbeat_s = heartbeat_s
        self.missed_heartbeats = missed_heartbeats
        self.reconnect_ivl_ms = reconnect_ivl_ms
        self.reconnect_ivl_max_ms = reconnect_ivl_max_ms
        self.jpeg_quality = jpeg_quality
        self.max_message_bytes = max_message_bytes
        self._curve = (
            None if curve is None else (*load_keypair(curve.secret_file), load_public_key(curve.server_public_file))
        )
        self._ctx = zmq.Context.instance()
        self._sock: zmq.Socket | None = None
        self.ready = False
        """True once the server answered this connection's hello."""
        self.server_info: dict[str, Any] = {}
        """What the server said about itself in its last `HelloReply`."""
        self.last_encode_ns = self.last_decode_ns = self.last_sent_bytes = 0
        self._last_rx_s = self._last_hb_s = 0.0
        self._unanswered = 0

    def connect(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """Open the connection and wait for the server's hello; returns its `server_info`.

        Raises `TransportTimeout` without an answer within `timeout_s` (server not
        running, wrong endpoint, or with CURVE this client's key not on its allow-list)
        and `ProtocolError` / `VersionMismatch` when the server refuses this client.
        """
        deadline = time.monotonic() + timeout_s
        while not self.ready:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TransportTimeout(
                    f"no hello from a server at {self.endpoint} within {timeout_s:.3g} s: is it running "
                    "there, and with CURVE, is this client's public key in its allowed-clients folder?"
                )
            try:
                msg = self._poll(remaining, until_ready=True)
            except PeerLost:
                continue  # nobody answers yet (the server may still be starting): keep trying
            if msg is not None:
                log.debug("dropped a late %s while connecting", type(msg).__name__)
        return self.server_info

    def send(self, msg: Message, timeout_s: float = 1.0) -> None:
        """Send `msg`. Raises `PeerLost` while not `ready` (keep polling: the client
        reconnects by itself) and `TransportTimeout` if it cannot be queued in time."""
        if not self.ready:
            raise PeerLost(f"not connected to {self.endpoint} (reconnecting); poll() until ready")
        self._send(msg, timeout_s)

    def poll(self, timeout_s: float = 0.0) -> Message | None:
        """The next message from the server, or None after `timeout_s`.

        Answers to hellos and heartbeats are handled here. Raises `PeerLost` when the
        server stopped answering (see the class docstring) and `ProtocolError` when it
        refused the hello or sent something undecodable.
        """
        return self._poll(timeout_s, until_ready=False)

    def recv(self, timeout_s: float) -> Message:
        """Like `poll`, but raises `TransportTimeout` when nothing arrives in time."""
        msg = self.poll(timeout_s)
        if msg is None:
            raise TransportTimeout(f"no reply from {self.endpoint} within {timeout_s:.3g} s")
        return msg

    def request(self, msg: Message, timeout_s: float) -> Message:
        """Send `msg` (which has a `request_id`) and return the reply with that
        `request_id` (a `ChunkReply` or `ErrorReply`); late replies to older requests are
        dropped. Raises `TransportTimeout` when none arrives within `timeout_s`."""
        if not isinstance(msg, ObservationRequest):
            raise TypeError(f"request() takes an ObservationRequest (it has a request_id), not {type(msg).__name__}")
        deadline = time.monotonic() + timeout_s
        self.send(msg, timeout_s)
        while True:
            reply = self.recv(max(0.0, deadline - time.monotonic()))
            if getattr(reply, "request_id", None) == msg.request_id:
                return reply
            log.debug("dropped a late %s", type(reply).__name__)

    def close(self, linger_s: float = 0.0) -> None:
        """Close the socket; messages not yet sent are dropped, or given up to `linger_s`
        to go out."""
        if self._sock is not None:
            self._sock.close(linger=int(linger_s * 1000))
            self._sock = None
        self.ready = False

    def __enter__(self) -> ClientSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _poll(self, timeout_s: float, until_ready: bool) -> Message | None:
        """`poll`; with `until_ready`, also return (None) as soon as the hello is answered."""
        if self._sock is None:
            self._open()
        deadline = time.monotonic() + timeout_s
        while True:
            self._keepalive()
            now = time.monotonic()
            next_heartbeat_s = max(self._last_rx_s, self._last_hb_s) + self.heartbeat_s
            if self._open_sock().poll(_ms(min(deadline, next_heartbeat_s) - now), zmq.POLLIN):
                msg = self._receive()
                if msg is not None or (until_ready and self.ready):
                    return msg
            elif time.monotonic() >= deadline:
                return None

    def _open_sock(self) -> zmq.Socket:
        """The socket of `_open()`. Only `close()` clears it, and nothing uses it after that
        until the next `_open()` (`ready` is False, `_keepalive` raises right after)."""
        if self._sock is None:
            raise PeerLost(f"not connected to {self.endpoint} (reconnecting); poll() until ready")
        return self._sock

    def _open(self) -> None:
        """A fresh DEALER socket, connected, with the hello queued."""
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RECONNECT_IVL, self.reconnect_ivl_ms)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, self.reconnect_ivl_max_ms)
        if self.max_message_bytes is not None:  # a larger reply drops the connection unread
            sock.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        if self._curve is not None:
            sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = self._curve
        sock.connect(self.endpoint)
        self._sock, self.ready = sock, False
        self._last_rx_s = time.monotonic()
        self._unanswered = 0
        self._probe()

    def _send(self, msg: Message, timeout_s: float) -> None:
        t0 = time.perf_counter_ns()
        frames = codec.encode(msg, jpeg_quality=self.jpeg_quality)
        self.last_encode_ns = time.perf_counter_ns() - t0
        self.last_sent_bytes = sum(memoryview(f).nbytes for f in frames)
        send_frames(self._open_sock(), frames, timeout_s, self.endpoint)

    def _keepalive(self) -> None:
        """Probe the server when one is due; declare it lost after too many unanswered."""
        now = time.monotonic()
        if now - max(self._last_rx_s, self._last_hb_s) < self.heartbeat_s:
            return
        if self._unanswered >= self.missed_heartbeats:
            silent_s = now - self._last_rx_s
            self.close()
            raise PeerLost(
                f"server at {self.endpoint} silent for {silent_s:.2f} s "
                f"({self.missed_heartbeats} heartbeats unanswered); reconnecting on the next poll()"
            )
        self._probe()

    def _probe(self) -> None:
        """Send a `Heartbeat`, or the `Hello` again while it is unanswered; a probe that
        cannot be queued (no connection yet) counts as unanswered too."""
        probe = Heartbeat(sent_time_ns=time.monotonic_ns()) if self.ready else self.hello
        try:
            self._send(probe, timeout_s=0.0)
        except TransportTimeout:
            pass
        self._unanswered += 1
        self._last_hb_s = time.monotonic()

    def _receive(self) -> Message | None:
        """Decode one message; handle hello replies, heartbeat acks and re-hellos."""
        frames = self._open_sock().recv_multipart(copy=False)
        t0 = time.perf_counter_ns()
        msg = codec.decode([f.buffer for f in frames])
        self.last_decode_ns = time.perf_counter_ns() - t0
        self._last_rx_s, self._unanswered = time.monotonic(), 0
        if isinstance(msg, HelloReply):
            self._on_hello_reply(msg)
            return None
        if isinstance(msg, HeartbeatAck):
            return None
        if isinstance(msg, ErrorReply) and msg.code == "hello_required":
            log.info("server at %s does not know this client (restarted?): saying hello again", self.endpoint)
            self.ready = False
            self._probe()
            return msg if msg.request_id >= 0 else None
        return msg

    def _on_hello_reply(self, reply: HelloReply) -> None:
        if reply.protocol_version != PROTOCOL_VERSION:
            self.close()
            raise VersionMismatch(PROTOCOL_VERSION, reply.protocol_version)
        if not reply.ok:
            self.close()
            raise ProtocolError(f"server at {self.endpoint} refused this client: {reply.error}")
        self.ready, self.server_info = True, reply.server_info
