"""The `Robot` protocol every arm implements, and the plain data it exchanges.

Joint positions are radians (prismatic joints would be metres), times are seconds from
`time.monotonic()` or a simulated `Clock`, images are HxWx3 uint8 RGB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class CameraSpec:
    """One camera as the robot reports it."""

    name: str
    """Key of the frame in `RobotState.images`, e.g. "front" or "wrist"."""
    height_px: int = 224
    """Image height in pixels."""
    width_px: int = 224
    """Image width in pixels."""

    def __post_init__(self) -> None:
        if not self.name or self.height_px <= 0 or self.width_px <= 0:
            raise ValueError(f"bad camera spec {self!r}: need a name and positive size")


@dataclass(frozen=True)
class RobotSpec:
    """What a robot offers, readable before `connect()`.

    Arrays have shape (J,) with J = len(joint_names); the last joint of an arm with a
    gripper is the gripper.
    """

    name: str
    """Model name, e.g. "so101"."""
    joint_names: tuple[str, ...]
    """Actuated joints in command order."""
    lower_rad: np.ndarray
    """(J,) lower position limits, radians."""
    upper_rad: np.ndarray
    """(J,) upper position limits, radians."""
    max_velocity_rad_s: np.ndarray
    """(J,) velocity limits used by the safety step clamp, rad/s."""
    control_rate_hz: float
    """Rate at which the robot expects commands."""
    cameras: tuple[CameraSpec, ...] = ()
    """Cameras whose frames `read()` returns."""
    ee_frame: str = "gripper_frame_link"
    """Kinematic frame used as the end effector (pinocchio / URDF name)."""

    def __post_init__(self) -> None:
        j = len(self.joint_names)
        for key in ("lower_rad", "upper_rad", "max_velocity_rad_s"):
            value = np.asarray(getattr(self, key), dtype=np.float64)
            if value.shape != (j,):
                raise ValueError(f"RobotSpec.{key} has shape {value.shape}, expected ({j},)")
            object.__setattr__(self, key, value)
        if np.any(self.lower_rad >= self.upper_rad):
            raise ValueError("RobotSpec: every lower limit must be below its upper limit")
        if self.control_rate_hz <= 0:
            raise ValueError("RobotSpec.control_rate_hz must be positive")

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    @property
    def dt_s(self) -> float:
        """Control period in seconds."""
        return 1.0 / self.control_rate_hz


@dataclass
class RobotState:
    """One reading of the robot."""

    q_rad: np.ndarray
    """(J,) measured joint positions, radians."""
    timestamp_s: float
    """Monotonic time of the reading (wall or simulated clock), seconds."""
    dq_rad_s: np.ndarray | None = None
    """(J,) measured joint velocities if the robot reports them, rad/s."""
    images: dict[str, np.ndarray] = field(default_factory=dict)
    """Camera name -> (H, W, 3) uint8 RGB frame."""
    image_ages_s: dict[str, float] = field(default_factory=dict)
    """Camera name -> seconds its frame was captured before `timestamp_s` (a real arm's
    from lerobot's capture stamps; NaN where the camera keeps none). A camera not listed
    captured its frame at the reading (the simulated arm renders then)."""


@runtime_checkable
class Robot(Protocol):
    """An arm. The MuJoCo arm and every real driver implement exactly this.

    Only `SafeRobot` may call `command` on a real robot; everything else talks to the
    `SafeRobot` wrapper, which implements this same protocol.
    """

    @property
    def spec(self) -> RobotSpec: ...

    @property
    def is_connected(self) -> bool: ...

    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    def read(self) -> RobotState: ...

    def command(self, target_rad: np.ndarray) -> np.ndarray:
        """Send (J,) joint position targets; return the (J,) targets really sent."""
        ...

    def hold(self) -> None:
        """Stop moving: keep the current position. Never raises."""
        ...
