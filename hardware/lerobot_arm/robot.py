"""`LerobotArm`: a real SO-100/SO-101 follower arm through lerobot, as a `Robot`.

lerobot is imported inside `connect()` only (it pulls in torch), so the spec, the unit
conversions and the port check run without it. lerobot is driven with `use_degrees=True`;
`units.py` maps its degrees and gripper 0..100 onto URDF radians.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from robotrl.core.errors import ConfigError, DeviceNotConnected
from robotrl.core.health import ArmHealth, FrameMeter, MotorReading
from robotrl.core.ratelimit import LogLimiter
from robotrl.core.robot import CameraSpec, RobotSpec, RobotState
from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.lerobot_arm.connect import connect_device
from robotrl.hardware.lerobot_arm.units import (
    LEROBOT_GRIPPER_MAX,
    LerobotUnits,
    lerobot_keys,
    to_lerobot,
    to_radians,
    units_for,
)
from robotrl.hardware.models import get_arm, velocity_limits

if TYPE_CHECKING:
    from lerobot.cameras import CameraConfig
    from lerobot.robots.so_follower import SOFollower

log = logging.getLogger(__name__)

MOTOR_READ_EVERY_S = 1.0
"""Shortest time between two reads of the motors' temperature and voltage, seconds (two
sync reads of the bus: kept off most control ticks)."""
FEETECH_VOLT_PER_UNIT = 0.1
"""Present_Voltage of a Feetech STS servo counts tenths of a volt (120 = 12.0 V)."""


class LerobotArm:
    """An SO-100/SO-101 follower arm on a Feetech motor bus, driven by lerobot.

    The arm must have been calibrated with `lerobot-calibrate` under the same `robot_id`
    and calibration folder; `connect()` never starts lerobot's interactive calibration.
    `disconnect()` switches the motor torque off (lerobot's default): the arm goes limp.

    Args:
        model: arm model, "so101" or "so100".
        port: serial port of the motor bus, e.g. "/dev/ttyACM0".
        robot_id: lerobot's robot id (`--robot.id`); names the calibration file `<id>.json`.
        calibration_dir: folder of that file; None is lerobot's default
            (`$HF_LEROBOT_CALIBRATION/robots/so_follower`).
        cameras: camera name -> lerobot camera config (e.g. `OpenCVCameraConfig`) with
            width and height set; `read()` returns their frames under these names.
        control_rate_hz: command rate advertised in the spec.
        units: how lerobot's units sit on the URDF joints; None takes `units_for(model)`.
    """

    def __init__(
        self,
        model: str = "so101",
        *,
        port: str,
        robot_id: str | None = None,
        calibration_dir: str | Path | None = None,
        cameras: Mapping[str, CameraConfig] | None = None,
        control_rate_hz: float = 30.0,
        units: LerobotUnits | None = None,
    ) -> None:
        self.arm = get_arm(model)
        self.port = port
        self.robot_id = robot_id
        self.calibration_dir = Path(calibration_dir).expanduser() if calibration_dir is not None else None
        self._camera_configs = dict(cameras or {})
        kinematics = Kinematics(self.arm)
        self._spec = RobotSpec(
            name=self.arm.name,
            joint_names=self.arm.joint_names,
            lower_rad=kinematics.lower_rad,
            upper_rad=kinematics.upper_rad,
            max_velocity_rad_s=velocity_limits(self.arm),
            control_rate_hz=control_rate_hz,
            cameras=_camera_specs(self._camera_configs),
            ee_frame=self.arm.ee_frame,
        )
        self.units = (
            units if units is not None else units_for(self.arm.name, kinematics.lower_rad[-1], kinematics.upper_rad[-1])
        )
        if self.units.num_joints != self._spec.num_joints:
            raise ConfigError(f"units cover {self.units.num_joints} joints, {model} has {self._spec.num_joints}")
        self._keys = lerobot_keys(self.arm.joint_names)
        self._follower: SOFollower | None = None
        self._low = np.zeros(self._spec.num_joints)
        self._high = np.zeros(self._spec.num_joints)
        self._last_measured: np.ndarray | None = None
        self.bus_errors = 0
        """Motor-bus transactions that failed since connect: health reads (the arm goes on)
        and commands (then raised). A failed observation is not counted: it ends the run
        with `DeviceNotConnected`, as does a camera that stalls."""
        self._frames = {cam.name: FrameMeter() for cam in self._spec.cameras}
        self._motors: dict[str, MotorReading] = {}
        self._motors_read_s = -float("inf")
        self._log_limiter = LogLimiter()

    @property
    def spec(self) -> RobotSpec:
        return self._spec

    @property
    def is_connected(self) -> bool:
        return self._follower is not None and self._follower.is_connected

    def connect(self) -> None:
        """Open the motor bus and the cameras. Raises `DeviceNotConnected` when the port
        is missing or the motors do not answer, `ConfigError` when the calibration file
        does not match the motors."""
        if self._follower is not None:
            return
        if os.name != "nt" and not Path(self.port).exists():
            raise DeviceNotConnected(
                f"no serial device at {self.port} for the {self.arm.name} arm: plug in and power "
                "its motor bus, then find the right port with `robotrl devices`"
            )
        follower = self._make_follower()
        try:
            connect_device(follower, f"the {self.arm.name} arm on {self.port}")
            if not follower.is_calibrated:
                raise ConfigError(self._calibration_hint(follower))
            self._low, self._high = _accepted_range(follower, self.arm.joint_names)
        except ConfigError:
            _release(follower)
            raise
        except (OSError, RuntimeError) as err:
            _release(follower)
            reason = " ".join(str(err).split())
            raise DeviceNotConnected(
                f"could not reach the {self.arm.name} arm on {self.port} ({reason}); check its power, "
                "the cable, your right to open the port (e.g. the `dialout` group) and `robotrl devices`"
            ) from err
        if self.arm.name == "so100":
            log.warning(
                "so100: the lerobot -> URDF joint mapping is not verified on an SO-100 yet; "
                "check joint directions at low speed before closing a control loop"
            )
        self._follower = follower
        self.bus_errors, self._motors, self._motors_read_s = 0, {}, -float("inf")
        self._frames = {cam.name: FrameMeter() for cam in self._spec.cameras}

    def disconnect(self) -> None:
        """Close the bus (torque off) and the cameras; a no-op when not connected."""
        follower, self._follower = self._follower, None
        self._last_measured = None
        if follower is not None:
            _release(follower)

    def read(self) -> RobotState:
        """Joint positions in URDF radians and the latest frame of each camera, stamped with
        `time.monotonic()` when lerobot's observation (motors first, then cameras) returns;
        each frame's age from lerobot's capture stamp (`frame_age_s`).

        A camera that stalls (no frame newer than lerobot's `read_latest` age limit) or
        whose reader died, or a bus that stops answering, holds the arm at its last
        measured position and raises `DeviceNotConnected` naming the device."""
        follower = self._require()
        try:
            obs = follower.get_observation()
        except (OSError, RuntimeError) as err:  # TimeoutError and ConnectionError are OSErrors
            if self._last_measured is not None:
                self.hold()
            reason = " ".join(str(err).split())
            raise DeviceNotConnected(
                f"the {self.arm.name} arm on {self.port} or one of its cameras stopped delivering ({reason}); "
                "the arm holds: check the camera's and the bus's cables and power"
            ) from err
        stamp_s, now_s = time.monotonic(), time.perf_counter()
        measured = np.array([obs[key] for key in self._keys], dtype=np.float64)
        self._last_measured = measured
        images = {cam.name: np.asarray(obs[cam.name], dtype=np.uint8) for cam in self._spec.cameras}
        ages = {}
        for name, meter in self._frames.items():  # lerobot's readers stamp frames with perf_counter()
            camera = follower.cameras.get(name)
            meter.note(getattr(camera, "latest_timestamp", None))
            ages[name] = frame_age_s(camera, obs[name], now_s)
        return RobotState(to_radians(measured, self.units), stamp_s, images=images, image_ages_s=ages)

    def command(self, target_rad: np.ndarray) -> np.ndarray:
        """Send (J,) URDF-radian targets; return the (J,) targets really sent, in radians.

        Targets are clipped to the range the motors accept (their calibrated limits; the
        gripper's 0..100), then lerobot reports what it sent after its own clipping.
        """
        follower = self._require()
        target = np.asarray(target_rad, dtype=np.float64)
        if target.shape != (self._spec.num_joints,):
            raise ValueError(f"command needs shape ({self._spec.num_joints},), got {target.shape}")
        values = np.clip(to_lerobot(target, self.units), self._low, self._high)
        try:
            sent = follower.send_action(dict(zip(self._keys, values.tolist(), strict=True)))
        except (OSError, RuntimeError):
            self.bus_errors += 1
            raise
        return to_radians(np.array([sent[key] for key in self._keys], dtype=np.float64), self.units)

    def hold(self) -> None:
        """Command the position of the last `read()` (reading first if there was none).
        Never raises: failures are logged."""
        try:
            if self._follower is None:
                return
            if self._last_measured is None:
                self.read()
            last = self._last_measured
            if last is None:
                raise RuntimeError("read() recorded no measurement to hold")
            self._follower.send_action(dict(zip(self._keys, last.tolist(), strict=True)))
        except Exception:  # hold() must never raise
            log.exception("LerobotArm.hold failed on %s", self.port)

    def health(self) -> ArmHealth:
        """Failed bus transactions, each motor's temperature (degrees C) and voltage (V) as
        last read, and each camera's frame rate and newest frame's age (lerobot's capture
        stamps, as seen at this arm's `read()`s: the rate is at most the control rate); {}
        when not connected. The motor registers are read here, at most every
        `MOTOR_READ_EVERY_S`; a failed read counts in `bus_errors`, keeps the last reading
        and never raises. Not thread-safe (the bus is not): call it where `read()` is
        called, or under `SafeRobot`'s lock (`SafeRobot.health`)."""
        follower = self._follower
        if follower is None:
            return {}
        if time.monotonic() - self._motors_read_s >= MOTOR_READ_EVERY_S:
            self._motors_read_s = time.monotonic()
            self._read_motors(follower)
        now = time.perf_counter()
        return {
            "bus_errors": self.bus_errors,
            "motors": dict(self._motors),
            "cameras": {name: meter.health(now) for name, meter in self._frames.items()},
        }

    def _read_motors(self, follower: SOFollower) -> None:
        """Read Present_Temperature and Present_Voltage of every motor (one sync read each,
        no retry) into the last reading; a failure is counted and logged (rate-limited)."""
        try:
            temperature = follower.bus.sync_read("Present_Temperature")
            voltage = follower.bus.sync_read("Present_Voltage")
        except Exception as err:  # any failure of a health read: the arm goes on
            self.bus_errors += 1
            if self._log_limiter.due("motor health"):
                log.warning("could not read the motors' temperature and voltage on %s: %s", self.port, err)
            return
        self._motors = {
            name: {
                "temperature_c": float(temperature[name]),
                "voltage_v": round(float(voltage[name]) * FEETECH_VOLT_PER_UNIT, 2),
            }
            for name in temperature
            if name in voltage
        }

    def _make_follower(self) -> SOFollower:
        from lerobot.robots.so_follower import SOFollower, SOFollowerRobotConfig

        config = SOFollowerRobotConfig(
            port=self.port,
            id=self.robot_id,
            calibration_dir=self.calibration_dir,
            cameras=dict(self._camera_configs),
            use_degrees=True,
        )
        return SOFollower(config)

    def _calibration_hint(self, follower: SOFollower) -> str:
        return (
            f"the motors on {self.port} do not match the calibration {follower.calibration_fpath} "
            "(missing or from another arm); run `lerobot-calibrate "
            f"--robot.type={self.arm.name}_follower --robot.port={self.port} "
            f"--robot.id={self.robot_id or '<id>'}` and pass the same id here"
        )

    def _require(self) -> SOFollower:
        if self._follower is None:
            raise DeviceNotConnected(f"LerobotArm on {self.port} is not connected: call connect() first")
        return self._follower


def _camera_specs(configs: Mapping[str, Any]) -> tuple[CameraSpec, ...]:
    """Camera specs from lerobot camera configs (output width/height, after rotation)."""
    specs = []
    for name, config in configs.items():
        if config.fps is None or config.width is None or config.height is None:
            raise ConfigError(f"camera {name!r}: set fps, width and height in its lerobot config")
        specs.append(CameraSpec(name, height_px=int(config.height), width_px=int(config.width)))
    return tuple(specs)


def _accepted_range(follower: SOFollower, joint_names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(J,) lowest and highest lerobot values the motors accept.

    `lerobot-calibrate` writes each motor's recorded range to its position limits and the
    servo stops there; in degrees that range is +-half its width around lerobot's zero.
    """
    bus = follower.bus
    low, high = [], []
    for name in joint_names[:-1]:
        cal = bus.calibration[name]
        max_tick = bus.model_resolution_table[bus.motors[name].model] - 1  # lerobot: 360 deg = 4095
        half_deg = (cal.range_max - cal.range_min) / 2 * 360.0 / max_tick
        low.append(-half_deg)
        high.append(half_deg)
    return np.array([*low, 0.0]), np.array([*high, LEROBOT_GRIPPER_MAX])


def _release(follower: SOFollower) -> None:
    """Close whatever of the bus and cameras is open; never raises."""
    for device in (follower.bus, *follower.cameras.values()):
        try:
            if device.is_connected:
                device.disconnect()
        except Exception:  # closing must go on for the other devices
            log.exception("could not close %s", device)


NEWEST_FRAME_ATTRIBUTES = ("latest_frame", "latest_color_frame")
"""Where lerobot 0.6's camera readers keep the frame `latest_timestamp` stamps (OpenCV and
ZMQ; RealSense)."""


def frame_age_s(camera: Any, frame: Any, now_s: float) -> float:
    """Seconds from the capture of `frame` to `now_s` (`time.perf_counter()`), from the stamp
    lerobot's camera reader keeps with its newest frame (`latest_timestamp` beside
    `latest_frame`, a RealSense's `latest_color_frame`, under `frame_lock`): the time the
    frame reached the computer, which a camera's constant exposure-to-delivery latency
    precedes. NaN where the camera keeps no stamp or a newer frame has replaced `frame`
    since it was read."""
    lock = getattr(camera, "frame_lock", None)
    if lock is None:
        return float("nan")
    with lock:
        stamped = [getattr(camera, name, None) for name in NEWEST_FRAME_ATTRIBUTES]
        stamp = getattr(camera, "latest_timestamp", None)
    if stamp is None or not any(latest is frame for latest in stamped):
        return float("nan")
    return max(now_s - float(stamp), 0.0)
