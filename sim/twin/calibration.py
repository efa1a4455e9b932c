"""The twin's servo calibration, and the maps raw encoder ticks <-> lerobot units <-> URDF
radians that lerobot's driver and robotrl's `lerobot_arm.units` apply to it.

lerobot's SO follower/leader (`use_degrees=True`) reads raw ticks through the calibration's
(range_min, range_max) per motor (`FeetechMotorsBus._normalize`, STS3215: 4096 ticks a turn,
`max_res` = 4095):

- arm joints: degrees = (raw - (range_min + range_max) / 2) * 360 / 4095, not clipped;
- gripper: 0..100 = 100 * (clip(raw, range_min, range_max) - range_min) / (range_max - range_min).

robotrl then maps those onto URDF radians (`to_radians`). The twin picks the ranges so that
the mapping is the physical one: lerobot's 0 deg is raw `ZERO_TICK` (the middle of every arm
range) and the URDF angle `arm_zero_rad` (0 on the SO-101), each arm range is symmetric
around it and holds the whole URDF joint range plus `MARGIN_TICKS`, and the gripper's range
is exactly its URDF range at 4095 / 360 ticks per degree (lerobot 0 / 100 are the limits).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robotrl.core.errors import ConfigError
from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.lerobot_arm.units import LerobotUnits, to_lerobot, to_radians, units_for
from robotrl.hardware.models import get_arm
from robotrl.sim.twin.bus import write_calibration

MAX_RES = 4095
"""lerobot's `max_res` of an STS3215 (resolution 4096 - 1): ticks per 360 deg in its maths."""
ZERO_TICK = 2048
"""Raw position of lerobot's 0 deg on every arm joint (the middle of a turn)."""
MARGIN_TICKS = 16
"""Ticks (1.4 deg) each arm range reaches past the farther URDF limit."""
GRIPPER_MAX = 100.0
"""lerobot's fully open gripper."""
FOLLOWER_FOLDER = Path("robots") / "so_follower"
"""Where lerobot's SO follower looks for `<id>.json` under `$HF_LEROBOT_CALIBRATION`."""
LEADER_FOLDER = Path("teleoperators") / "so_leader"
"""Where lerobot's SO leader looks for `<id>.json` under `$HF_LEROBOT_CALIBRATION`."""


@dataclass(frozen=True)
class TwinCalibration:
    """One arm's servo calibration: servo id i + 1 drives joint i."""

    ranges: tuple[tuple[int, int], ...]
    """(range_min, range_max) raw ticks per joint, in the arm's joint order (J entries)."""
    units: LerobotUnits
    """How lerobot's units sit on the URDF joints."""

    def __post_init__(self) -> None:
        if len(self.ranges) != self.units.num_joints:
            raise ConfigError(f"TwinCalibration: {len(self.ranges)} ranges for {self.units.num_joints} joints")
        for low, high in self.ranges:
            if not 0 <= low < high <= MAX_RES:
                raise ConfigError(f"TwinCalibration: range ({low}, {high}) is not inside 0..{MAX_RES}")

    @property
    def by_id(self) -> dict[int, tuple[int, int]]:
        """Servo id -> (range_min, range_max), as `SimServoBus` and `write_calibration` take it."""
        return {i + 1: r for i, r in enumerate(self.ranges)}

    def raw_to_lerobot(self, raw: np.ndarray) -> np.ndarray:
        """(..., J) raw ticks -> (..., J) lerobot values (arm degrees, gripper 0..100)."""
        raw = np.asarray(raw, dtype=np.float64)
        low, high = (np.array(side, dtype=np.float64) for side in zip(*self.ranges))
        values = (raw - (low + high) / 2) * 360.0 / MAX_RES
        g_low, g_high = low[-1], high[-1]
        values[..., -1] = GRIPPER_MAX * (np.clip(raw[..., -1], g_low, g_high) - g_low) / (g_high - g_low)
        return values

    def lerobot_to_raw(self, values: np.ndarray) -> np.ndarray:
        """(..., J) lerobot values -> (..., J) raw ticks (int64, rounded to the nearest tick;
        the gripper clipped to 0..100 first, as lerobot does)."""
        values = np.asarray(values, dtype=np.float64)
        low, high = (np.array(side, dtype=np.float64) for side in zip(*self.ranges))
        raw = values * MAX_RES / 360.0 + (low + high) / 2
        gripper = np.clip(values[..., -1], 0.0, GRIPPER_MAX)
        raw[..., -1] = gripper / GRIPPER_MAX * (high[-1] - low[-1]) + low[-1]
        return np.rint(raw).astype(np.int64)

    def raw_to_rad(self, raw: np.ndarray) -> np.ndarray:
        """(..., J) raw ticks -> (..., J) URDF radians, as lerobot + robotrl read them."""
        return to_radians(self.raw_to_lerobot(raw), self.units)

    def rad_to_raw(self, q_rad: np.ndarray) -> np.ndarray:
        """(..., J) URDF radians -> (..., J) raw ticks (int64)."""
        return self.lerobot_to_raw(to_lerobot(q_rad, self.units))


def twin_calibration(model: str = "so101") -> TwinCalibration:
    """The twin's calibration of arm `model` from its URDF limits (see the module docstring).

    On the SO-101 (URDF limits in ticks at 4095 / (2 pi) per radian): shoulder_pan +-1.91986
    rad = +-1251.2 ticks -> (2048 - 1268, 2048 + 1268) = (780, 3316); wrist_roll -2.74385 ..
    2.84121 rad -> +-1851.7 -> (180, 3916); gripper -0.174533 .. 1.74533 rad -> (1934, 3186).
    """
    kin = Kinematics(get_arm(model))
    units = units_for(model, kin.lower_rad[-1], kin.upper_rad[-1])
    lower, upper = to_lerobot(kin.lower_rad, units), to_lerobot(kin.upper_rad, units)
    ranges = []
    for low_deg, high_deg in zip(lower[:-1], upper[:-1]):
        half = math.ceil(max(abs(low_deg), abs(high_deg)) * MAX_RES / 360.0) + MARGIN_TICKS
        ranges.append((ZERO_TICK - half, ZERO_TICK + half))
    ticks_per_rad = MAX_RES / (2 * math.pi)
    g_low, g_high = kin.lower_rad[-1], kin.upper_rad[-1]
    ranges.append((ZERO_TICK + round(g_low * ticks_per_rad), ZERO_TICK + round(g_high * ticks_per_rad)))
    return TwinCalibration(tuple(ranges), units)


def install_calibration(
    calibration_dir: Path, robot_id: str, leader_id: str, calibration: TwinCalibration
) -> tuple[Path, Path]:
    """Write `calibration` where lerobot looks with `HF_LEROBOT_CALIBRATION=calibration_dir`:
    `robots/so_follower/<robot_id>.json` and `teleoperators/so_leader/<leader_id>.json`;
    their paths. A file already there with other ranges (a real arm's calibration) is never
    overwritten: `ConfigError`."""
    paths = []
    for folder, name in ((FOLLOWER_FOLDER, robot_id), (LEADER_FOLDER, leader_id)):
        target = Path(calibration_dir) / folder
        path = target / f"{name}.json"
        if path.exists() and not _is_twin_file(path, calibration):
            raise ConfigError(
                f"{path} exists and is not the twin's calibration (a real arm's?); "
                "pass another --robot-id / --leader-id or --calibration-dir"
            )
        target.mkdir(parents=True, exist_ok=True)
        paths.append(write_calibration(target, name, calibration.by_id))
    return paths[0], paths[1]


def _is_twin_file(path: Path, calibration: TwinCalibration) -> bool:
    try:
        motors = json.loads(path.read_text())
        ranges = tuple((int(m["range_min"]), int(m["range_max"])) for m in motors.values())
        offsets = {int(m["homing_offset"]) for m in motors.values()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return False
    return ranges == calibration.ranges and offsets == {0}
