"""`connect_device`: lerobot's `connect()` of an arm or leader on a Feetech bus, tried a second
time when lerobot's motor check found a servo missing.

lerobot's handshake pings each servo once and counts it missing when the reply comes later
than the Feetech SDK's packet timeout (about 34 ms at 1 Mbaud, most of it the USB adapter's
16 ms latency timer, twice). A servo answers in well under a millisecond, but the process
reading the reply must be on a CPU by then: a loaded host (a Raspberry Pi encoding video, a
2-core machine running the twin and a policy) misses it now and then, and the next ping finds
the same servo. Any other failure (no port, no permission, a camera) is raised at once.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

log = logging.getLogger(__name__)

MOTOR_CHECK_FAILED = "motor check failed"
"""What lerobot's `MotorsBus._assert_motors_exist` raises (RuntimeError) when a servo did not
answer its ping or answered with another model number."""
RETRY_AFTER_S = 0.2
"""Pause between the failed motor check and the second try."""


class _Bus(Protocol):
    @property
    def is_connected(self) -> bool: ...

    def disconnect(self, disable_torque: bool = True) -> None: ...


class LerobotDevice(Protocol):
    @property
    def bus(self) -> _Bus: ...

    def connect(self, calibrate: bool = True) -> None: ...


def connect_device(device: LerobotDevice, what: str) -> None:
    """`device.connect(calibrate=False)`, once more after `RETRY_AFTER_S` when lerobot's motor
    check fails. After a failed check the port, left open by lerobot, is closed as it is: the
    handshake comes before any torque write, and a torque-off write to a servo that is not
    there would fail and leave the port open. Raises what the last try raised; `what` names
    the device in the warning."""
    for attempt in (1, 2):
        try:
            device.connect(calibrate=False)
            return
        except RuntimeError as err:
            if MOTOR_CHECK_FAILED not in str(err):
                raise
            if device.bus.is_connected:
                device.bus.disconnect(disable_torque=False)
            if attempt == 2:
                raise
            log.warning("%s: %s; connecting once more", what, " ".join(str(err).split()))
        time.sleep(RETRY_AFTER_S)
