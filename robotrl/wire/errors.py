"""Typed errors of the wire layer; each message says what to do about it."""

from __future__ import annotations


class WireError(Exception):
    """Base class of every error raised by `robotrl.wire`."""


class ProtocolError(WireError):
    """Bytes that are not a valid message of this protocol version.

    Raised by `codec.decode` for garbage, truncated frames, unknown message types, bad
    arrays and a protocol version mismatch in a hello. On a server, `identity` names the
    peer that sent the bad message (log it and keep serving the others).
    """

    def __init__(self, message: str, identity: bytes | None = None) -> None:
        super().__init__(message)
        self.identity = identity


class TransportTimeout(WireError, TimeoutError):
    """Nothing arrived (or could be sent) within the deadline."""


class PeerLost(WireError, ConnectionError):
    """The peer stopped answering heartbeats (or cannot be routed to).

    A `ClientSocket` reconnects by itself on the next `poll()`; keep the arm safe
    (hold or finish the current chunk) until `ready` is True again.
    """


class VersionMismatch(ProtocolError):
    """The peer speaks another protocol version (both are named in the message)."""

    def __init__(self, local_version: int, remote_version: int, identity: bytes | None = None) -> None:
        super().__init__(
            f"protocol version mismatch: this side speaks robotrl wire protocol {local_version}, "
            f"the peer speaks {remote_version}; install the same robotrl release on the robot "
            "computer and the inference server", identity)
        self.local_version = local_version
        self.remote_version = remote_version
