"""Which units a dataset or a checkpoint keeps joints in, and the one conversion to radians.

robotrl computes in URDF joint radians. Stored joint values follow one of two conventions:

| convention | joint names in `features[...]["names"]` | values | `robot_type` |
|---|---|---|---|
| `radians` | the URDF joints (`shoulder_pan`, ...) | radians | `so101` |
| `lerobot` | `<joint>.pos` (`shoulder_pan.pos`, ...) | degrees, gripper 0..100 | `so101_follower`, `so_follower` |

`lerobot` is what lerobot's SO follower (`use_degrees=True`, its default) reads and takes,
so it is what `lerobot-record` writes, what `lerobot-train` learns from, and what robotrl
writes for a real arm. `radians` is what robotrl writes for the simulated arm. A dataset
says which by its feature names (the names lerobot's own tools keep through edits), and its
`robot_type` names the arm model whose calibration frame maps degrees onto the URDF.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from robotrl.core.errors import ConfigError
from robotrl.hardware.lerobot_arm.units import LerobotUnits, lerobot_keys, to_lerobot, to_radians, units_for
from robotrl.hardware.models import ARMS, get_arm

RADIANS = "radians"
LEROBOT = "lerobot"
FOLLOWER_SUFFIX = "_follower"
"""lerobot's robot types for SO arms: `so101_follower`, `so100_follower`."""
LEROBOT_SO_FOLLOWER = "so_follower"
"""The `robot_type` `lerobot-record` 0.6 writes for an SO-100 and an SO-101 alike (its
`SOFollower.name`); read as an SO-101, the arm lerobot's guides set up. An SO-100
dataset written by lerobot itself needs `"robot_type": "so100_follower"` in its
meta/info.json (robotrl's own recordings name the model)."""
SO_FOLLOWER_MODEL = "so101"


@dataclass(frozen=True)
class JointConvention:
    """How one dataset or checkpoint stores an arm's joint values."""

    name: str
    """`RADIANS` or `LEROBOT`."""
    model: str
    """Arm model, e.g. "so101"."""

    def __post_init__(self) -> None:
        if self.name not in (RADIANS, LEROBOT):
            raise ConfigError(f"unknown joint convention {self.name!r}; known: {RADIANS}, {LEROBOT}")
        get_arm(self.model)

    @property
    def names(self) -> list[str]:
        """Per-joint names of a state or action feature, in the arm's joint order."""
        joints = get_arm(self.model).joint_names
        return list(lerobot_keys(joints) if self.name == LEROBOT else joints)

    @property
    def robot_type(self) -> str:
        """The dataset's `robot_type`: lerobot's name for the follower, or the model."""
        return self.model + FOLLOWER_SUFFIX if self.name == LEROBOT else self.model

    def to_radians(self, values: np.ndarray) -> np.ndarray:
        """(..., J) stored values -> (..., J) URDF radians, float64."""
        if self.name == RADIANS:
            return np.asarray(values, dtype=np.float64)
        return to_radians(values, lerobot_units(self.model))

    def from_radians(self, q_rad: np.ndarray) -> np.ndarray:
        """(..., J) URDF radians -> (..., J) stored values, float64."""
        if self.name == RADIANS:
            return np.asarray(q_rad, dtype=np.float64)
        return to_lerobot(q_rad, lerobot_units(self.model))


@cache
def lerobot_units(model: str) -> LerobotUnits:
    """lerobot's units on `model`'s URDF (gripper limits read from the URDF)."""
    from robotrl.hardware.kinematics import Kinematics

    kinematics = Kinematics(get_arm(model))
    return units_for(model, kinematics.lower_rad[-1], kinematics.upper_rad[-1])


def model_of(robot_type: str | None) -> str | None:
    """Arm model of a dataset's `robot_type` ("so101_follower" -> "so101"); None if unknown."""
    if not robot_type:
        return None
    if robot_type == LEROBOT_SO_FOLLOWER:
        return SO_FOLLOWER_MODEL
    model = robot_type.removesuffix(FOLLOWER_SUFFIX)
    return model if model in ARMS else None


def feature_convention(names: list[str] | None, robot_type: str | None, where: str) -> JointConvention:
    """The convention of a joint feature with per-joint `names` in a dataset of `robot_type`.

    Raises ConfigError, one line naming `where`, for names of neither convention, or degrees
    from an arm robotrl has no model of (radians need no model: any arm with those names).
    """
    model = model_of(robot_type)
    if model is None:  # radians need no arm model; degrees do
        for arm in sorted(ARMS):
            if list(names or []) == JointConvention(RADIANS, arm).names:
                return JointConvention(RADIANS, arm)
        known = ", ".join(f"{m}, {m}{FOLLOWER_SUFFIX}" for m in sorted(ARMS))
        raise ConfigError(f"{where}: robot_type {robot_type!r} is no arm robotrl knows ({known})")
    for name in (RADIANS, LEROBOT):
        convention = JointConvention(name, model)
        if list(names or []) == convention.names:
            return convention
    radians, lerobot = JointConvention(RADIANS, model).names, JointConvention(LEROBOT, model).names
    raise ConfigError(
        f"{where}: joint names {names} are neither robotrl's radians {radians} nor lerobot's degrees {lerobot}"
    )


def dataset_convention(features: dict[str, dict], robot_type: str | None, keys: tuple[str, ...], where: str):
    """The one convention of the joint features `keys` of a dataset (they must agree)."""
    conventions = {key: feature_convention(features[key].get("names"), robot_type, f"{where} {key}") for key in keys}
    if len(set(conventions.values())) > 1:
        listed = ", ".join(f"{k} in {c.name}" for k, c in conventions.items())
        raise ConfigError(f"{where}: joint features disagree on units ({listed})")
    return next(iter(conventions.values()))
