"""Conversions between lerobot's SO follower units and robotrl radians (pure numpy).

lerobot's `SOFollower` with `use_degrees=True` reads and takes, per motor, a float under
the key "<joint>.pos":

- the five arm joints in **degrees**, 0 at the middle of the encoder range that
  `lerobot-calibrate` recorded (`(value - (range_min + range_max) / 2) * 360 / 4095`,
  never clipped to the range by lerobot; the servo's own position limits clip);
- the gripper in **0..100**, `100 * (value - range_min) / (range_max - range_min)`,
  clipped to [0, 100] both ways (its calibration always has drive_mode 0).

robotrl works in URDF joint radians. Arm joints map as
`q_rad = arm_zero_rad + arm_sign * radians(degrees)`; the gripper maps linearly from
0..100 onto [`gripper_closed_rad`, `gripper_open_rad`].

Gripper direction: lerobot's 0 is `range_min`, which on the SO-100/101 follower is the
closed end (TheRobotStudio's SO-ARM100 simulation README: "0 = fully closed, 100 = fully
open"). In both URDFs the jaw opens towards positive angles (about 0 rad with the jaws
together, so101's upper limit of 100 deg wide open), so lerobot 0 goes to the lower URDF
limit and 100 to the upper one. The lower limit lies 10 deg (so101) / 11.5 deg (so100)
past the touching jaws, so a shut gripper reads slightly negative here: the price of a
linear map onto the whole URDF range. (A comment in
lerobot's `GripperVelocityToJoint` claims the SO100 position "increases on close"; the
SO-ARM100 docs say otherwise. On a new arm, check that a shut gripper reads near the lower
limit; if not, swap the two gripper angles in `LerobotUnits`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from robotrl.core.errors import ConfigError

NUM_ARM_JOINTS = 5
"""Joints before the gripper on an SO-100/101; the gripper is the last joint."""

LEROBOT_GRIPPER_MAX = 100.0
"""lerobot's gripper reading when fully open (0 when closed)."""


@dataclass(frozen=True)
class LerobotUnits:
    """How lerobot's units sit on one arm's URDF joints."""

    gripper_closed_rad: float
    """URDF gripper angle where lerobot reads 0 (closed), radians."""
    gripper_open_rad: float
    """URDF gripper angle where lerobot reads 100 (fully open), radians."""
    arm_zero_rad: tuple[float, ...] = (0.0,) * NUM_ARM_JOINTS
    """URDF angle of each arm joint where lerobot reads 0 degrees, radians."""
    arm_sign: tuple[float, ...] = (1.0,) * NUM_ARM_JOINTS
    """+1 where lerobot's degrees and the URDF angle grow the same way, -1 where opposite."""

    def __post_init__(self) -> None:
        if len(self.arm_zero_rad) != len(self.arm_sign):
            raise ConfigError("LerobotUnits: arm_zero_rad and arm_sign need one entry per arm joint")
        if any(s not in (1.0, -1.0) for s in self.arm_sign):
            raise ConfigError(f"LerobotUnits.arm_sign must hold only +1 or -1, got {self.arm_sign}")
        values = (self.gripper_closed_rad, self.gripper_open_rad, *self.arm_zero_rad)
        if not np.all(np.isfinite(values)):
            raise ConfigError(f"LerobotUnits has a non-finite angle: {self!r}")
        if self.gripper_closed_rad == self.gripper_open_rad:
            raise ConfigError("LerobotUnits: gripper_closed_rad and gripper_open_rad must differ")

    @property
    def num_joints(self) -> int:
        """J: arm joints plus the gripper."""
        return len(self.arm_zero_rad) + 1


# URDF angle of lerobot's zero and the direction of each arm joint, per model.
# so101: example-robot-data's so101.urdf is TheRobotStudio's "so101_new_calib", built so
# that its zero pose is lerobot's calibration pose and its axes turn with lerobot's degrees.
# so100: so100.urdf predates that convention (e.g. shoulder_lift 0..3.5 rad). lerobot's zero
# is the middle of the recorded range, taken here as the middle of the URDF limits
# (0, 3.5/2, -3.14158/2, (-2.5 + 1.2)/2, 0). The signs come from matching so100.urdf poses to
# so101.urdf poses joint by joint (the pan axis points up in so100.urdf, down in so101.urdf)
# and assume both arms mount their servos alike: not yet checked on an SO-100.
_ARM_FRAMES: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "so101": ((0.0, 0.0, 0.0, 0.0, 0.0), (1.0, 1.0, 1.0, 1.0, 1.0)),
    "so100": ((0.0, 1.75, -1.57079, -0.65, 0.0), (-1.0, 1.0, 1.0, 1.0, 1.0)),
}


def units_for(model: str, gripper_lower_rad: float, gripper_upper_rad: float) -> LerobotUnits:
    """Units of arm `model` ("so101", "so100") given its URDF gripper limits in radians."""
    try:
        zero_rad, sign = _ARM_FRAMES[model]
    except KeyError:
        known = ", ".join(sorted(_ARM_FRAMES))
        raise ConfigError(f"no lerobot unit mapping for {model!r}; known: {known}") from None
    return LerobotUnits(float(gripper_lower_rad), float(gripper_upper_rad), zero_rad, sign)


def lerobot_keys(joint_names: Sequence[str]) -> tuple[str, ...]:
    """lerobot observation/action keys in robotrl joint order: "<joint>.pos"."""
    return tuple(f"{name}.pos" for name in joint_names)


def to_radians(values: np.ndarray, units: LerobotUnits) -> np.ndarray:
    """(..., J) lerobot values (arm degrees, gripper 0..100) -> (..., J) URDF radians."""
    v = _check(values, units)
    q = np.empty_like(v)
    q[..., :-1] = np.asarray(units.arm_zero_rad) + np.asarray(units.arm_sign) * np.deg2rad(v[..., :-1])
    span_rad = units.gripper_open_rad - units.gripper_closed_rad
    q[..., -1] = units.gripper_closed_rad + v[..., -1] / LEROBOT_GRIPPER_MAX * span_rad
    return q


def to_lerobot(q_rad: np.ndarray, units: LerobotUnits) -> np.ndarray:
    """(..., J) URDF radians -> (..., J) lerobot values (arm degrees, gripper 0..100).

    Not clipped: angles outside the calibrated range give gripper values outside 0..100.
    """
    q = _check(q_rad, units)
    v = np.empty_like(q)
    v[..., :-1] = np.rad2deg((q[..., :-1] - np.asarray(units.arm_zero_rad)) * np.asarray(units.arm_sign))
    span_rad = units.gripper_open_rad - units.gripper_closed_rad
    v[..., -1] = (q[..., -1] - units.gripper_closed_rad) / span_rad * LEROBOT_GRIPPER_MAX
    return v


def _check(values: np.ndarray, units: LerobotUnits) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim == 0 or array.shape[-1] != units.num_joints:
        raise ValueError(f"expected (..., {units.num_joints}) joint values, got shape {array.shape}")
    return array
