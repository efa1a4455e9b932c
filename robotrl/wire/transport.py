"""ZMQ transport: one ROUTER server (`ServerSocket`, here), many DEALER clients
(`robotrl.wire.client.ClientSocket`, one per robot), carrying frames from `codec`.

Every wait is bounded (a dead peer never hangs a loop), sockets close with LINGER=0.
Protocol on a connection: the client sends `Hello` first and the server answers
`HelloReply` (refusing another protocol version, with both versions named on both
sides); afterwards the client sends requests and the server replies to its identity.
An idle client sends `Heartbeat` every `heartbeat_s` and the server answers
`HeartbeatAck`; after `missed_heartbeats` unanswered ones the client raises `PeerLost`
and, on its next `poll()`, recreates its socket and says hello again. The server
answers requests and heartbeats from identities that never said hello (it restarted)
with `ErrorReply(code="hello_required")`, on which clients say hello again by themselves.

Misbehaving peers: a connection that sends `QUARANTINE_STRIKES` invalid messages
(undecodable, or for a robot id it does not own) within `STRIKE_WINDOW_S` is quarantined
for `QUARANTINE_S`: its messages are then dropped unread and unanswered (counted in
`quarantined_drops`), so a flood costs the server a receive, not a decode and a reply.

Robot ids: a message naming a robot (`robot_id`) is taken only from the connection that
owns that id, the newest one that said hello with it (a robot that reconnects gets a new
connection and takes its id over); anything else gets `ErrorReply(code="wrong_robot_id")`.
Under CURVE an id is also bound to the client key that first said hello with it, for the
server's lifetime: a client with another key is refused that id at hello, so one allowed
robot cannot take over another's. Without CURVE any peer that reaches the port can take
an id over: use CURVE on a shared network.

With CURVE (`keys.ServerKeys` / `keys.ClientKeys`) traffic is encrypted and the server
only talks to clients whose public key is in its allowed-clients folder; any other
client never gets an answer (its requests time out).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import zmq
import zmq.auth.thread

from robotrl.core.errors import PeerLost, ProtocolError, TransportTimeout, VersionMismatch, WireError, WrongRobotId
from robotrl.wire import codec
from robotrl.wire.keys import ServerKeys, curve_server
from robotrl.wire.messages import PROTOCOL_VERSION, ErrorReply, Heartbeat, HeartbeatAck, Hello, HelloReply, Message

log = logging.getLogger(__name__)

_SEND_RETRY_S = 0.0005
QUARANTINE_STRIKES = 20
STRIKE_WINDOW_S = 1.0
QUARANTINE_S = 10.0
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Largest message a `ServerSocket` accepts (ZMQ_MAXMSGSIZE; a peer sending a larger one
is disconnected before it is buffered): two raw 1080p RGB frames fit."""


class ServerSocket:
    """ROUTER socket bound at `endpoint` (e.g. "tcp://127.0.0.1:5555", "tcp://127.0.0.1:*"
    for a free port, "ipc:///tmp/x"). Answers hellos and heartbeats by itself; `recv`
    returns the other messages with the identity to `send` the reply to.

    Call `recv` at least every `heartbeat_s` of the clients (run the socket in its own
    thread when the model is slower), or they declare the server lost. Use it from one
    thread only (ZMQ sockets are not thread-safe). Timing of the last call for latency
    reports: `last_decode_ns` (recv), `last_encode_ns` (send).
    """

    def __init__(
        self,
        endpoint: str,
        *,
        curve: ServerKeys | None = None,
        server_info: dict[str, Any] | None = None,
        peer_expiry_s: float = 60.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.server_info = dict(server_info or {})
        self.peer_expiry_s = peer_expiry_s
        self.peers: dict[bytes, Hello] = {}
        """Identity -> the `Hello` of every client that said hello (and was seen lately)."""
        self.owners: dict[str, bytes] = {}
        """Robot id -> identity of the connection that owns it (the newest hello with it)."""
        self._id_keys: dict[str, str] = {}  # robot id -> CURVE key that first said hello with it
        self._strikes: dict[bytes, tuple[float, int]] = {}  # identity -> (window start s, invalid messages)
        self._quarantined: dict[bytes, float] = {}  # identity -> monotonic s its quarantine ends
        self.quarantined_drops = 0
        """Messages dropped unread from quarantined connections."""
        self._last_seen_s: dict[bytes, float] = {}
        self.last_decode_ns = self.last_encode_ns = 0
        self._ctx = zmq.Context()
        self._auth: zmq.auth.thread.ThreadAuthenticator | None = None
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
        try:
            if curve is not None:
                self._start_curve(curve)
            self._bind(endpoint)
        except BaseException:
            self.close()
            raise
        self.endpoint: str = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        """The bound endpoint, with the real port when `endpoint` asked for `*`."""

    def _bind(self, endpoint: str) -> None:
        try:
            self._sock.bind(endpoint)
        except zmq.ZMQError as exc:
            raise WireError(f"cannot bind {endpoint}: {exc} (another server there? pick another port)") from None

    def _start_curve(self, curve: ServerKeys) -> None:
        self._auth = curve_server(self._ctx, curve, self._sock)

    @property
    def socket(self) -> zmq.Socket:
        """The ROUTER socket, to register with a `zmq.Poller` beside other sockets (read
        it with `recv`, never directly)."""
        return self._sock

    @property
    def context(self) -> zmq.Context:
        """The socket's context, for inproc sockets that wake the same poller."""
        return self._ctx

    def recv(self, timeout_s: float) -> tuple[bytes, Message]:
        """The next request as (client identity, message).

        Raises `TransportTimeout` when none arrives within `timeout_s`, and
        `ProtocolError` (with `.identity`) when a client sent something invalid or
        (`WrongRobotId`) used a robot id it does not own; that client has already been
        told, so log it and keep serving.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            remaining_s = deadline - time.monotonic()
            if not self._sock.poll(_ms(remaining_s), zmq.POLLIN):
                if remaining_s > 0:
                    continue  # woke up early: poll counts whole milliseconds
                raise TransportTimeout(f"no request within {timeout_s:.3g} s on {self.endpoint}")
            identity, *frames = self._sock.recv_multipart(copy=False)
            if self._in_quarantine(identity.bytes):
                self.quarantined_drops += 1
                msg = None
            else:
                try:
                    msg = self._handle(identity.bytes, frames)
                except ProtocolError:
                    self._strike(identity.bytes)
                    raise
            if msg is not None:
                return identity.bytes, msg
            if time.monotonic() >= deadline:  # (a flood of hellos or dropped frames: return in time)
                raise TransportTimeout(f"no request within {timeout_s:.3g} s on {self.endpoint}")

    def send(self, identity: bytes, msg: Message, timeout_s: float = 1.0) -> None:
        """Send `msg` to the client `identity`. Raises `PeerLost` if that client is gone
        and `TransportTimeout` if its queue stays full for `timeout_s`."""
        t0 = time.perf_counter_ns()
        frames = codec.encode(msg)
        self.last_encode_ns = time.perf_counter_ns() - t0
        send_frames(self._sock, [identity, *frames], timeout_s, self.endpoint, identity)

    def close(self) -> None:
        """Close the socket (pending messages are dropped) and stop the authenticator."""
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        self._sock.close(linger=0)
        self._ctx.term()

    def __enter__(self) -> ServerSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _handle(self, identity: bytes, frames: list[zmq.Frame]) -> Message | None:
        """Decode; answer hellos and heartbeats here; return any other message."""
        t0 = time.perf_counter_ns()
        try:
            msg = codec.decode([f.buffer for f in frames])
        except VersionMismatch as exc:
            self._reply(identity, HelloReply(ok=False, protocol_version=PROTOCOL_VERSION, error=str(exc)))
            raise VersionMismatch(exc.local_version, exc.remote_version, identity) from None
        except ProtocolError as exc:
            self._reply(identity, ErrorReply(request_id=-1, code="protocol", message=str(exc)))
            raise ProtocolError(f"client {identity.hex()} sent an invalid message: {exc}", identity) from None
        self.last_decode_ns = time.perf_counter_ns() - t0
        self._last_seen_s[identity] = time.monotonic()
        if isinstance(msg, Hello):
            self._hello(identity, msg, str(frames[0].get("User-Id")) if self._auth is not None else "")
        elif identity not in self.peers:
            self._reply(
                identity,
                ErrorReply(
                    request_id=getattr(msg, "request_id", -1),
                    code="hello_required",
                    message="say hello first (the server restarted?)",
                ),
            )
        elif isinstance(msg, Heartbeat):
            self._reply(identity, HeartbeatAck(sent_time_ns=msg.sent_time_ns))
        else:
            self._check_owner(identity, msg)
            return msg
        return None

    def _hello(self, identity: bytes, hello: Hello, key: str) -> None:
        """Answer a hello; the connection takes its robot id over, unless under CURVE
        that id is bound to another key (refused)."""
        log.debug("client %s (%s %r) said hello", identity.hex(), hello.role, hello.robot_id)
        if hello.robot_id and self._id_keys.setdefault(hello.robot_id, key) != key:
            error = f"robot id {hello.robot_id!r} belongs to another client key on this server"
            self._reply(identity, HelloReply(ok=False, protocol_version=PROTOCOL_VERSION, error=error))
            raise WrongRobotId(f"client {identity.hex()} (key {key}): {error}", identity)
        self._expire_peers()
        self.peers[identity] = hello
        if hello.robot_id:
            self.owners[hello.robot_id] = identity
        self._reply(identity, HelloReply(ok=True, protocol_version=PROTOCOL_VERSION, server_info=self.server_info))

    def _check_owner(self, identity: bytes, msg: Message) -> None:
        """Refuse (`wrong_robot_id`) a message naming a robot this connection does not own."""
        robot_id = getattr(msg, "robot_id", None)
        if robot_id is None:
            return
        said = self.peers[identity].robot_id
        if robot_id != said:
            problem = f"this connection said hello as {said!r}; it may not send for {robot_id!r}"
        elif self.owners.get(robot_id) != identity:
            problem = f"a newer connection said hello as {robot_id!r}; this one may not send for it any more"
        else:
            return
        self._reply(
            identity, ErrorReply(request_id=getattr(msg, "request_id", -1), code="wrong_robot_id", message=problem)
        )
        raise WrongRobotId(f"client {identity.hex()}: {problem}", identity)

    def _reply(self, identity: bytes, msg: Message) -> None:
        try:
            self.send(identity, msg, timeout_s=0.0)
        except (PeerLost, TransportTimeout) as exc:
            log.debug("could not answer client %s: %s", identity.hex(), exc)

    def _in_quarantine(self, identity: bytes) -> bool:
        until = self._quarantined.get(identity)
        if until is None:
            return False
        if time.monotonic() < until:
            return True
        del self._quarantined[identity]
        return False

    def _strike(self, identity: bytes) -> None:
        """Count an invalid message of `identity`; quarantine it after too many too fast."""
        now = time.monotonic()
        start, count = self._strikes.get(identity, (now, 0))
        if now - start > STRIKE_WINDOW_S:
            start, count = now, 0
        self._strikes[identity] = (start, count + 1)
        if count + 1 >= QUARANTINE_STRIKES:
            del self._strikes[identity]
            self._quarantined[identity] = now + QUARANTINE_S
            log.warning(
                "client %s quarantined for %g s: %d invalid messages within %g s",
                identity.hex(),
                QUARANTINE_S,
                QUARANTINE_STRIKES,
                STRIKE_WINDOW_S,
            )

    def _expire_peers(self) -> None:
        """Forget clients not seen for `peer_expiry_s` (each reconnect leaves an old
        identity behind; run at each hello, the only time the table grows)."""
        now = time.monotonic()
        cutoff = now - self.peer_expiry_s
        self._strikes = {i: st for i, st in self._strikes.items() if now - st[0] <= STRIKE_WINDOW_S}
        self._quarantined = {i: until for i, until in self._quarantined.items() if until > now}
        for identity in [i for i, seen in self._last_seen_s.items() if seen < cutoff]:
            del self._last_seen_s[identity]
            hello = self.peers.pop(identity, None)
            if hello is not None and self.owners.get(hello.robot_id) == identity:
                del self.owners[hello.robot_id]


def check_bindable(endpoint: str) -> None:
    """Raise `WireError` (one line) if `endpoint` is malformed or its port taken, before
    anything slow (a model load) starts; the real server binds it again right after."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.ROUTER)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(endpoint)
    except zmq.ZMQError as exc:
        raise WireError(f"cannot bind {endpoint}: {exc} (another server there? pick another port)") from None
    finally:
        sock.close(linger=0)


def _ms(seconds: float) -> int:
    """A poll timeout in whole milliseconds, never shorter than `seconds` (0 if past)."""
    return max(0, math.ceil(seconds * 1000))


def send_frames(sock: zmq.Socket, frames: list, timeout_s: float, endpoint: str, identity: bytes | None = None) -> None:
    """Send `frames` as one message without blocking past `timeout_s` (large frames
    are not copied)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
            return
        except zmq.Again:
            if time.monotonic() >= deadline:
                raise TransportTimeout(
                    f"could not send on {endpoint} within {timeout_s:.3g} s: the peer is not reading (or not connected)"
                ) from None
            time.sleep(_SEND_RETRY_S)
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                raise PeerLost(
                    f"client {identity.hex() if identity else '?'} is not connected to {endpoint} any more"
                ) from None
            raise
