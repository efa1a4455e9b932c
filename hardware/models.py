"""Robot descriptions shipped by the `example-robot-data` package (no downloads).

`ARMS` names every arm robotrl knows; each entry says where its URDF lies, which joints
are actuated (in command order) and which frame is the end effector.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from robotrl.core.errors import ConfigError


@dataclass(frozen=True)
class ArmModel:
    """Static description of one arm model."""

    name: str
    urdf_relpath: str
    """Path of the URDF below `<example-robot-data>/robots/`."""
    joint_names: tuple[str, ...]
    """Actuated joints in command order; the last one is the gripper."""
    ee_frame: str
    """URDF link used as the end effector (fingertip centre where the URDF has one)."""
    max_velocity_rad_s: tuple[float, ...]
    """Velocity limit per joint used by the safety step clamp, rad/s."""


_SO_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
# STS3215 servos turn at about 4.7 rad/s unloaded; stay well under that on the arm.
_SO_VELOCITY = (3.0, 3.0, 3.0, 3.0, 3.0, 5.0)

ARMS: dict[str, ArmModel] = {
    "so101": ArmModel("so101", "so_arm_description/urdf/so101.urdf", _SO_JOINTS, "gripper_frame_link", _SO_VELOCITY),
    "so100": ArmModel("so100", "so_arm_description/urdf/so100.urdf", _SO_JOINTS, "jaw", _SO_VELOCITY),
}


def get_arm(name: str) -> ArmModel:
    """The `ArmModel` called `name`; a `ConfigError` lists the known names otherwise."""
    try:
        return ARMS[name]
    except KeyError:
        raise ConfigError(f"unknown robot model {name!r}; known: {', '.join(sorted(ARMS))}") from None


@cache
def package_share() -> Path:
    """`.../cmeel.prefix/share`, the folder that resolves `package://example-robot-data/`."""
    dist = importlib.metadata.distribution("example-robot-data")
    share = Path(str(dist.locate_file("cmeel.prefix/share")))
    if not (share / "example-robot-data").is_dir():
        raise ConfigError(f"example-robot-data is installed but {share} has no robots; reinstall it")
    return share


def urdf_path(arm: ArmModel) -> Path:
    return package_share() / "example-robot-data" / "robots" / arm.urdf_relpath


def velocity_limits(arm: ArmModel) -> np.ndarray:
    return np.asarray(arm.max_velocity_rad_s, dtype=np.float64)
