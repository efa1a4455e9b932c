"""`LeaderArmTeleop`: an SO-100/SO-101 leader arm through lerobot, and `CombinedTeleop`,
which takes targets from one device and events from another.

The leader's joint readings are the follower's targets: lerobot reads the leader with
`use_degrees=True` (arm joints in degrees around the calibrated middle, gripper 0..100,
the same units as the follower) and `lerobot_arm.units` maps them onto URDF radians.
lerobot is imported inside `connect()` only (it pulls in torch).

A leader arm has no buttons, so its events are always empty. To end episodes while
teleoperating with it, pair it with the keyboard (or a gamepad):

    CombinedTeleop(LeaderArmTeleop(port="/dev/ttyACM1", robot_id="leader"),
                   KeyboardTeleop(kinematics, TerminalKeys()))
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from robotrl.core.errors import ConfigError, DeviceNotConnected
from robotrl.core.robot import RobotState
from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.lerobot_arm.connect import connect_device
from robotrl.hardware.lerobot_arm.units import LerobotUnits, lerobot_keys, to_radians, units_for
from robotrl.hardware.models import get_arm
from robotrl.hardware.teleop.base import TeleopCommand, TeleopDevice, TeleopEvents

if TYPE_CHECKING:
    from lerobot.teleoperators.so_leader import SOLeader

log = logging.getLogger(__name__)

MAX_READ_FAILURES = 10
"""Consecutive failed leader reads (the last target is held meanwhile) before giving up."""


class LeaderArmTeleop:
    """A `TeleopDevice` reading an SO-100/SO-101 leader arm (torque off, moved by hand).

    The leader must have been calibrated with `lerobot-calibrate --teleop.type=<model>_leader`
    under the same `robot_id`; `connect()` never starts lerobot's interactive calibration.

    Args:
        model: arm model of the follower, "so101" or "so100" (sets the joint mapping).
        port: serial port of the leader's motor bus, e.g. "/dev/ttyACM1".
        robot_id: lerobot's teleoperator id (`--teleop.id`); names the file `<id>.json`.
        calibration_dir: folder of that file; None is lerobot's default
            (`$HF_LEROBOT_CALIBRATION/teleoperators/so_leader`).
        units: how lerobot's units sit on the URDF joints; None takes `units_for(model)`.
    """

    def __init__(
        self,
        model: str = "so101",
        *,
        port: str,
        robot_id: str | None = None,
        calibration_dir: str | Path | None = None,
        units: LerobotUnits | None = None,
    ) -> None:
        self.arm = get_arm(model)
        self.port = port
        self.robot_id = robot_id
        self.calibration_dir = Path(calibration_dir).expanduser() if calibration_dir is not None else None
        kinematics = Kinematics(self.arm)
        self._lower, self._upper = kinematics.lower_rad, kinematics.upper_rad
        self.units = units if units is not None else units_for(self.arm.name, self._lower[-1], self._upper[-1])
        if self.units.num_joints != len(self.arm.joint_names):
            raise ConfigError(f"units cover {self.units.num_joints} joints, {model} has {len(self.arm.joint_names)}")
        self._keys = lerobot_keys(self.arm.joint_names)
        self._leader: SOLeader | None = None
        self._last_target: np.ndarray | None = None
        self._failures = 0

    def connect(self) -> None:
        """Open the leader's bus. `DeviceNotConnected` when the port is missing or the
        motors do not answer; `ConfigError` when the calibration does not match."""
        if self._leader is not None:
            return
        if os.name != "nt" and not Path(self.port).exists():
            raise DeviceNotConnected(
                f"no serial device at {self.port} for the {self.arm.name} leader arm: plug in its "
                "USB cable and power, then find the right port with `robotrl devices`"
            )
        from lerobot.teleoperators.so_leader import SOLeader, SOLeaderTeleopConfig

        config = SOLeaderTeleopConfig(
            port=self.port, id=self.robot_id, calibration_dir=self.calibration_dir, use_degrees=True
        )
        leader = SOLeader(config)
        try:
            connect_device(leader, f"the {self.arm.name} leader arm on {self.port}")
            if not leader.is_calibrated:
                raise ConfigError(
                    f"the leader on {self.port} does not match the calibration "
                    f"{leader.calibration_fpath} (missing or from another arm); run `lerobot-calibrate "
                    f"--teleop.type={self.arm.name}_leader --teleop.port={self.port} "
                    f"--teleop.id={self.robot_id or '<id>'}` and pass the same id"
                )
        except ConfigError:
            _close(leader)
            raise
        except (OSError, RuntimeError) as err:
            _close(leader)
            reason = " ".join(str(err).split())
            raise DeviceNotConnected(
                f"could not reach the {self.arm.name} leader arm on {self.port} ({reason}); check its "
                "power, the cable and your right to open the port (e.g. the `dialout` group)"
            ) from err
        self._leader = leader

    def disconnect(self) -> None:
        leader, self._leader = self._leader, None
        self._last_target = None
        if leader is not None:
            _close(leader)

    def reset(self, state: RobotState) -> None:
        """Nothing to do: the leader's pose is the target. (Move the leader near the
        follower's pose first; `SafeRobot` limits the first step.)"""
        self._failures = 0

    def read(self, state: RobotState) -> TeleopCommand:
        """The leader's joints as (J,) URDF radians, clipped to the follower's limits.

        A failed bus read holds the last target (logged); after `MAX_READ_FAILURES` in a
        row, or with no target yet, it raises `DeviceNotConnected`.
        """
        if self._leader is None:
            raise DeviceNotConnected(f"LeaderArmTeleop on {self.port} is not connected: call connect() first")
        try:
            action = self._leader.get_action()
        except (OSError, RuntimeError) as err:
            self._failures += 1
            if self._last_target is None or self._failures >= MAX_READ_FAILURES:
                raise DeviceNotConnected(f"leader arm on {self.port} stopped answering ({err})") from err
            log.warning("leader read failed on %s (%s); holding the last target", self.port, err)
            return TeleopCommand(self._last_target.copy())
        self._failures = 0
        values = np.array([action[key] for key in self._keys], dtype=np.float64)
        self._last_target = np.clip(to_radians(values, self.units), self._lower, self._upper)
        return TeleopCommand(self._last_target.copy())


def _close(leader: SOLeader) -> None:
    try:
        if leader.bus.is_connected:
            leader.bus.disconnect()
    except Exception:  # closing must never mask the original error
        log.exception("could not close the leader bus")


def merge_events(a: TeleopEvents, b: TeleopEvents) -> TeleopEvents:
    """Each flag raised in either."""
    return TeleopEvents(**{f.name: getattr(a, f.name) or getattr(b, f.name) for f in dataclasses.fields(a)})


class CombinedTeleop:
    """A `TeleopDevice` taking its target from `target_device` and its events from
    `event_device` (merged with any of `target_device`'s), e.g. leader arm + keyboard.
    The event device's own target is ignored."""

    def __init__(self, target_device: TeleopDevice, event_device: TeleopDevice) -> None:
        self.target_device = target_device
        self.event_device = event_device

    def connect(self) -> None:
        self.target_device.connect()
        try:
            self.event_device.connect()
        except BaseException:
            self.target_device.disconnect()
            raise

    def disconnect(self) -> None:
        try:
            self.event_device.disconnect()
        finally:
            self.target_device.disconnect()

    def reset(self, state: RobotState) -> None:
        self.target_device.reset(state)
        self.event_device.reset(state)

    def read(self, state: RobotState) -> TeleopCommand:
        command = self.target_device.read(state)
        events = self.event_device.read(state).events
        return TeleopCommand(command.target_rad, merge_events(command.events, events))
