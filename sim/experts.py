"""Building blocks of the scripted experts: a Cartesian mover that walks the end effector
toward a waypoint at a bounded speed and turns it into joint targets with pinocchio IK.

Waypoints are end-effector positions in metres (robot base frame) with the fingers
pointing straight down and the jaws turned to `yaw_rad` (jaw closing axis in the world).
"""

from __future__ import annotations

import numpy as np

from robotrl.hardware.kinematics import Kinematics

DOWN = np.array([0.0, 0.0, -1.0])
ROLL = 4
"""Index of the wrist roll joint."""
GRIPPER_STEP_RAD = 0.12
"""Largest gripper target change per tick (under the safety step limit of 5 rad/s)."""
JOINT_STEP_RAD = 0.08
"""Largest arm joint target change per tick (under the safety step limit of 3 rad/s)."""


def wrap_quarter(angle_rad: float) -> float:
    """Wrap an angle into [-pi/4, pi/4): the symmetry of a square cube."""
    return (angle_rad + np.pi / 4) % (np.pi / 2) - np.pi / 4


class CartesianMover:
    """Turns end-effector waypoints into joint targets one control tick at a time.

    Args:
        kinematics: the arm's pinocchio model.
        speed_m_s: largest end-effector speed of the reference point.
        dt_s: control period.
        noise_m: std of Gaussian noise added to the reference point each tick (diverse
            demonstrations); 0 for a clean expert.
    """

    def __init__(
        self, kinematics: Kinematics, *, speed_m_s: float = 0.3, dt_s: float = 1 / 30, noise_m: float = 0.0
    ) -> None:
        self.kin = kinematics
        self.max_step_m = speed_m_s * dt_s
        self.noise_m = noise_m
        self.rng = np.random.default_rng(0)
        self._ref: np.ndarray | None = None
        self._q: np.ndarray | None = None

    def reset(self, rng: np.random.Generator, q_rad: np.ndarray) -> None:
        self.rng = rng
        self._q = np.array(q_rad, dtype=np.float64)
        self._ref = self.kin.ee_position(self._q)

    def reanchor_joints(self, q_rad: np.ndarray) -> None:
        """Go on from joint state `q_rad` (the IK seed and where the per-tick joint step
        limit starts) with the reference point where it is (the plan carries over). Before
        the first `reset` there is no plan yet: nothing changes."""
        if self._ref is not None:
            self._q = np.array(q_rad, dtype=np.float64)

    def jaw_yaw(self, q_rad: np.ndarray) -> float:
        """World yaw of the jaw closing axis (the end-effector frame's x axis)."""
        rot = self.kin.forward(q_rad)[1]
        return float(np.arctan2(rot[1, 0], rot[0, 0]))

    def step(
        self, waypoint_m: np.ndarray, gripper_rad: float, yaw_rad: float | None = None, point_down: bool = True
    ) -> np.ndarray:
        """Advance the reference point toward `waypoint_m`; (J,) joint target. With
        `point_down` the fingers point straight down (grasping), else only the position
        is controlled (reaching: the wrist limits forbid pointing down far out)."""
        assert self._ref is not None and self._q is not None, "call reset() first"
        delta = np.asarray(waypoint_m) - self._ref
        dist = float(np.linalg.norm(delta))
        if dist > self.max_step_m:
            delta *= self.max_step_m / dist
        self._ref = self._ref + delta
        ref = self._ref + (self.rng.normal(0.0, self.noise_m, 3) if self.noise_m > 0 else 0.0)
        q = self._q.copy()
        for _ in range(2):  # roll changes the fingertip position a little: solve twice
            if yaw_rad is not None:
                # Pointing down, rolling the wrist by +x turns the jaw axis by +x in yaw.
                q[ROLL] = np.clip(
                    q[ROLL] - wrap_quarter(self.jaw_yaw(q) - yaw_rad),
                    self.kin.lower_rad[ROLL] + 0.05,
                    self.kin.upper_rad[ROLL] - 0.05,
                )
            q = self.kin.ik(ref, q, approach_axis=DOWN if point_down else None, joints=slice(0, 4), max_iters=30).q_rad
        q[:-1] = self._q[:-1] + np.clip(q[:-1] - self._q[:-1], -JOINT_STEP_RAD, JOINT_STEP_RAD)
        q[-1] = self._q[-1] + np.clip(gripper_rad - self._q[-1], -GRIPPER_STEP_RAD, GRIPPER_STEP_RAD)
        self._q = q
        return q

    @property
    def reference_m(self) -> np.ndarray:
        assert self._ref is not None
        return self._ref.copy()


class JointMover:
    """Walks joint targets toward a joint-space goal, each joint at most `step_rad` a
    tick, starting from the measured joints on the first `step` after `forget`."""

    def __init__(self, kinematics: Kinematics, step_rad: float) -> None:
        self.kin = kinematics
        self.step_rad = step_rad
        self._q: np.ndarray | None = None

    def forget(self) -> None:
        self._q = None

    def reanchor_joints(self, q_rad: np.ndarray) -> None:
        """Go on from joint state `q_rad` (no change before the first `step`)."""
        if self._q is not None:
            self._q = np.array(q_rad, dtype=np.float64)

    def step(self, q_rad: np.ndarray, goal_rad: np.ndarray) -> np.ndarray:
        """(J,) joint target one tick closer to (J,) `goal_rad` from measured `q_rad`."""
        if self._q is None:
            self._q = np.array(q_rad, dtype=np.float64)
        self._q = self._q + np.clip(np.asarray(goal_rad) - self._q, -self.step_rad, self.step_rad)
        return self._q.copy()

    @property
    def reference_m(self) -> np.ndarray:
        """(3,) end-effector position at the current joint target, metres."""
        assert self._q is not None, "call step() first"
        return self.kin.ee_position(self._q)
