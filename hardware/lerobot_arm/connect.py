"""`connect_device`: lerobot's `connect()` of an arm or leader on a Feetech bus, tried a second
time when a servo's reply missed the handshake.

lerobot's handshake pings each servo once (its motor check) and then reads each servo's
calibration registers once (to compare them with the calibration file); either counts a
servo as missing when its reply comes later than the Feetech SDK's packet timeout (about
34 ms at 1 Mbaud, most of it the USB adapter's 16 ms latency timer, twice). A servo answers
in well under a millisecond, but the process reading the reply must be on a CPU by then: a
loaded host (a Raspberry Pi encoding video, a 2-core machine running the twin and a policy)
misses it now and then, and the next try finds the same servo. Any other failure (no port,
no permission, a camera) is raised at once.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

log = logging.getLogger(__name__)

MISSED_REPLY = ("motor check failed", "There is no status packet")
"""What lerobot raises when a servo did not answer in time: its motor check
(`MotorsBus._assert_motors_exist`, RuntimeError; also raised for another model number) and a
register read with no retry (ConnectionError with the SDK's "no status packet", which the
port's handshake wraps in its own "Could not connect on port")."""
RETRY_AFTER_S = 0.2
"""Pause between the failed handshake and the second try."""


class _Bus(Protocol):
    @property
    def is_connected(self) -> bool: ...

    def disconnect(self, disable_torque: bool = True) -> None: ...


class LerobotDevice(Protocol):
    @property
    def bus(self) -> _Bus: ...

    def connect(self, calibrate: bool = True) -> None: ...


def connect_device(device: LerobotDevice, what: str) -> None:
    """`device.connect(calibrate=False)`, once more after `RETRY_AFTER_S` when a servo's reply
    missed the handshake (`MISSED_REPLY`). After such a failure what lerobot left open is
    closed as it is: the port without the torque-off write a servo that is not there could
    not answer (which would fail and leave the port open), and any camera it connected.
    Raises what the last try raised; `what` names the device in the warning."""
    for attempt in (1, 2):
        try:
            device.connect(calibrate=False)
            return
        except (RuntimeError, ConnectionError) as err:
            if not missed_reply(err):
                raise
            if device.bus.is_connected:
                device.bus.disconnect(disable_torque=False)
            for camera in getattr(device, "cameras", {}).values():
                if camera.is_connected:
                    camera.disconnect()
            if attempt == 2:
                raise
            log.warning("%s: %s; connecting once more", what, " ".join(str(err).split()))
        time.sleep(RETRY_AFTER_S)


def missed_reply(err: BaseException) -> bool:
    """Whether `err`, or an error it was raised from, is a servo reply that came too late."""
    seen: BaseException | None = err
    while seen is not None:
        if any(reply in str(seen) for reply in MISSED_REPLY):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
