"""Every typed error of robotrl, by subsystem; each message says what to do next.

The CLI prints a `USER_ERRORS` exception as one line and exits 2 (no traceback).
"""

from __future__ import annotations


# -- hardware ------------------------------------------------------------------------------
class HardwareError(RuntimeError):
    """Base class for hardware-layer errors."""


class DeviceNotConnected(HardwareError):
    """A device was used before `connect()` or could not be reached."""


class SafetyTrip(HardwareError):
    """The e-stop latch is set; the arm was told to hold before this was raised."""


class ConfigError(ValueError):
    """A configuration (fleet file, robot name, limits, policy or learner config) is
    invalid; names the field."""


# -- wire ----------------------------------------------------------------------------------
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


class WrongRobotId(ProtocolError):
    """A peer used a robot id it does not own: not the one its connection said hello
    with, one a newer connection has taken over, or (under CURVE) one bound to another
    client key."""


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
            "computer and the inference server",
            identity,
        )
        self.local_version = local_version
        self.remote_version = remote_version


# -- user input ----------------------------------------------------------------------------
class UserError(Exception):
    """Bad input from the user (arguments, files, devices); the message says what to fix."""


USER_ERRORS = (UserError, ConfigError, DeviceNotConnected, SafetyTrip, WireError, FileNotFoundError)
"""Errors the CLI prints as one line (exit 2): bad input, unreachable devices or peers."""
