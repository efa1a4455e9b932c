"""End-effector jogging: "move the fingertip by (dx, dy, dz), roll the wrist, open or
close the gripper" -> a joint target, through pinocchio inverse kinematics.

Units: positions and steps in metres in the robot base frame of the URDF (so101: x
forward, y left, z up; so100's URDF base frame has y up), angles in radians, joint
vectors (J,) in `ArmModel.joint_names` order with the gripper last.

The jogger keeps its own running joint target (the IK seed) and end-effector goal and
moves *those*, never the measured state (sensor noise and tracking lag would otherwise
creep into every step, and IK residuals would add up); the measured state is taken only
at `reset`. A request the arm cannot reach (IK position error over
`reach_tol_m`) leaves the target unchanged. Every target lies inside the joint limits
shrunk by `limit_margin_rad`, so the safety layer (margin 0.02 rad) never has to clamp.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pinocchio as pin

from robotrl.hardware.kinematics import Kinematics

log = logging.getLogger(__name__)

ARM_JOINTS = slice(0, 4)
"""Joints IK moves for position: pan, shoulder lift, elbow, wrist flex (not the roll)."""
ROLL_JOINT = 4
"""Index of the wrist roll joint; the gripper is the last joint."""
KEEP_AXIS_TOL_M = 5e-4
"""Accept the orientation-keeping solution when it lands this close, metres."""


def rotate_about(axis: np.ndarray, angle_rad: float, v: np.ndarray) -> np.ndarray:
    """Rodrigues: (3,) vector `v` turned by `angle_rad` about unit (3,) `axis`."""
    c, s = np.cos(angle_rad), np.sin(angle_rad)
    return v * c + np.cross(axis, v) * s + axis * np.dot(axis, v) * (1.0 - c)


def azimuth_change(axis: np.ndarray, origin: np.ndarray, p_from: np.ndarray, p_to: np.ndarray) -> float:
    """Signed angle (rad, right-handed about `axis`) from `p_from` to `p_to` seen from the
    line through `origin` along unit `axis`; 0 when either point lies within 1 cm of it."""
    a = p_from - origin
    b = p_to - origin
    a = a - axis * np.dot(axis, a)
    b = b - axis * np.dot(axis, b)
    if np.linalg.norm(a) < 0.01 or np.linalg.norm(b) < 0.01:
        return 0.0
    return float(np.arctan2(np.dot(axis, np.cross(a, b)), np.dot(a, b)))


def cartesian_step(
    kinematics: Kinematics,
    q_rad: np.ndarray,
    dxyz_m: np.ndarray,
    droll_rad: float = 0.0,
    *,
    from_m: np.ndarray | None = None,
    reach_tol_m: float = 0.005,
    limit_margin_rad: float = 0.03,
) -> np.ndarray | None:
    """Joint target (J,) that puts the end effector at `from_m + dxyz_m` (metres, base
    frame; `from_m` defaults to the end effector of `q_rad`) with the wrist roll of `q_rad`
    turned by `droll_rad`; None when unreachable. `q_rad` seeds the IK.

    The gripper joint keeps its value. Orientation: the fingertip axis keeps its pitch and
    turns with the shoulder pan (the only way a 5-joint arm can move sideways); where that
    cannot reach the point within `KEEP_AXIS_TOL_M`, a free-pitch solution is tried and the
    closer one kept. None when the closer one still misses by more than `reach_tol_m`.
    """
    q0 = np.asarray(q_rad, dtype=np.float64)
    lower = kinematics.lower_rad + limit_margin_rad
    upper = kinematics.upper_rad - limit_margin_rad
    start = np.clip(q0, lower, upper)
    start[ROLL_JOINT] = np.clip(q0[ROLL_JOINT] + droll_rad, lower[ROLL_JOINT], upper[ROLL_JOINT])
    pos0 = kinematics.ee_position(q0)
    base = pos0 if from_m is None else np.asarray(from_m, dtype=np.float64)
    target = base + np.asarray(dxyz_m, dtype=np.float64)
    _, rot_rolled = kinematics.forward(start)
    pan_axis, pan_origin = _pan_axis(kinematics)
    axis = rotate_about(pan_axis, azimuth_change(pan_axis, pan_origin, pos0, target), rot_rolled[:, 2])
    ik: dict[str, Any] = dict(joints=ARM_JOINTS, tol_m=2e-5, limit_margin_rad=limit_margin_rad)
    best = kinematics.ik(target, start, approach_axis=axis, **ik)
    if best.position_error_m > KEEP_AXIS_TOL_M:
        free = kinematics.ik(target, start, **ik)
        if free.position_error_m < best.position_error_m:
            best = free
    if best.position_error_m > reach_tol_m:
        return None
    q = np.clip(best.q_rad, lower, upper)
    q[-1] = start[-1]
    return q


def _pan_axis(kinematics: Kinematics) -> tuple[np.ndarray, np.ndarray]:
    """(unit axis (3,), point (3,)) of the first joint in the base frame (fixed for any q)."""
    q = np.zeros(kinematics.model.nq)
    pin.computeJointJacobians(kinematics.model, kinematics.data, q)
    jac = pin.getJointJacobian(kinematics.model, kinematics.data, 1, pin.ReferenceFrame.LOCAL_WORLD_ALIGNED)
    axis = jac[3:, 0]
    return axis / np.linalg.norm(axis), kinematics.data.oMi[1].translation.copy()


class CartesianJogger:
    """Running joint target moved by end-effector steps; shared by keyboard and gamepad.

    Args:
        kinematics: the arm's `Kinematics`.
        step_m: end-effector step for one key press / one tick of full stick, metres.
        roll_step_rad: wrist roll step for one key press / tick of full trigger, radians.
        gripper_open_rad: gripper joint target when open, radians.
        gripper_closed_rad: gripper joint target when closed, radians.
        reach_tol_m: largest IK position error accepted, metres; farther requests are dropped.
        limit_margin_rad: targets stay this far inside the URDF joint limits, radians.
    """

    def __init__(
        self,
        kinematics: Kinematics,
        step_m: float = 0.005,
        roll_step_rad: float = 0.05,
        gripper_open_rad: float = 0.9,
        gripper_closed_rad: float = -0.15,
        *,
        reach_tol_m: float = 0.005,
        limit_margin_rad: float = 0.03,
    ) -> None:
        if step_m <= 0 or roll_step_rad <= 0 or reach_tol_m <= 0:
            raise ValueError("step_m, roll_step_rad and reach_tol_m must be positive")
        self.kinematics = kinematics
        self.step_m = step_m
        self.roll_step_rad = roll_step_rad
        self.reach_tol_m = reach_tol_m
        self.limit_margin_rad = limit_margin_rad
        self._lower = kinematics.lower_rad + limit_margin_rad
        self._upper = kinematics.upper_rad - limit_margin_rad
        self.gripper_open_rad = float(np.clip(gripper_open_rad, self._lower[-1], self._upper[-1]))
        self.gripper_closed_rad = float(np.clip(gripper_closed_rad, self._lower[-1], self._upper[-1]))
        self.gripper_open = False
        self._target: np.ndarray | None = None
        self._goal_m = np.zeros(3)
        self.unreachable_count = 0
        self._last_warning_s = -np.inf

    @property
    def has_target(self) -> bool:
        return self._target is not None

    @property
    def target_rad(self) -> np.ndarray:
        """(J,) current joint target, radians (a copy)."""
        if self._target is None:
            raise RuntimeError("CartesianJogger has no target yet: call reset(q_rad) first")
        return self._target.copy()

    def reset(self, q_rad: np.ndarray) -> None:
        """Take measured (J,) `q_rad` as the target (clipped into the limits); the gripper
        keeps its measured angle and counts as open when nearer the open angle."""
        self._target = np.clip(np.asarray(q_rad, dtype=np.float64), self._lower, self._upper)
        self._goal_m = self.kinematics.ee_position(self._target)
        middle = (self.gripper_open_rad + self.gripper_closed_rad) / 2
        opens_up = self.gripper_open_rad > self.gripper_closed_rad
        self.gripper_open = bool((self._target[-1] > middle) == opens_up)

    @property
    def goal_m(self) -> np.ndarray:
        """(3,) end-effector position the target aims at, metres (IK leaves < 0.5 mm)."""
        return self._goal_m.copy()

    def jog(self, dxyz_m: np.ndarray, droll_rad: float = 0.0) -> bool:
        """Move the end-effector goal by `dxyz_m` (3,) metres and the roll by `droll_rad`.
        Returns False, leaving target and goal unchanged, when IK cannot reach it."""
        dxyz = np.asarray(dxyz_m, dtype=np.float64)
        if not np.any(dxyz) and droll_rad == 0.0:
            return True
        q = cartesian_step(
            self.kinematics,
            self.target_rad,
            dxyz,
            droll_rad,
            from_m=self._goal_m,
            reach_tol_m=self.reach_tol_m,
            limit_margin_rad=self.limit_margin_rad,
        )
        if q is None:
            self._warn_unreachable(dxyz)
            return False
        self._target = q
        self._goal_m = self._goal_m + dxyz
        return True

    def set_gripper(self, open_: bool) -> None:
        """Command the gripper fully open (True) or closed (False)."""
        target = self.target_rad
        self.gripper_open = open_
        target[-1] = self.gripper_open_rad if open_ else self.gripper_closed_rad
        self._target = target

    def toggle_gripper(self) -> None:
        self.set_gripper(not self.gripper_open)

    def _warn_unreachable(self, dxyz_m: np.ndarray) -> None:
        self.unreachable_count += 1
        now_s = time.monotonic()
        if now_s - self._last_warning_s > 2.0:  # throttled: a held key repeats 30 times a second
            self._last_warning_s = now_s
            log.warning(
                "end-effector step %s m is out of reach; target kept (%d so far)",
                np.round(dxyz_m, 4).tolist(),
                self.unreachable_count,
            )
