"""End-effector action rows: what `action_mode = "ee_delta"` predicts instead of joints.

A joint row [pan, lift, elbow, wrist_flex, wrist_roll, gripper] (radians) becomes
[x, y, z, wrist_flex, wrist_roll, gripper]: the gripper position that row commands
(forward kinematics, metres, base frame) replaces the three joints that mostly place it.
The policy then predicts where the gripper goes, in the frame of object positions, instead
of learning the arm's kinematics from a hundred demonstrations (grasps landed 2-3 cm off
the cube in joint space). Back to joints: IK of the three placing joints for the
position with the wrist fixed at its predicted angles (a well-posed 3 x 3 problem), each
row seeded with the previous row's solution, so chunks stay on one IK branch.
"""

from __future__ import annotations

import numpy as np

PLACING_JOINTS = slice(0, 3)
"""Joints solved by IK for the position (pan, shoulder lift, elbow)."""


class EndEffectorActions:
    """Converts (N, A) joint rows <-> (N, A) end-effector rows for one arm model."""

    def __init__(self, arm: str) -> None:
        from robotrl.hardware.kinematics import Kinematics
        from robotrl.hardware.models import get_arm

        self.arm = arm
        self._kin = Kinematics(get_arm(arm))
        if len(self._kin.lower_rad) < 4:
            raise ValueError(f"{arm}: end-effector actions need an arm with a wrist (>= 4 joints)")

    def to_ee(self, rows_rad: np.ndarray) -> np.ndarray:
        """(..., A) joint rows (radians) -> (..., A) rows with columns 0..2 replaced by the
        commanded gripper position (metres). float32."""
        rows = np.asarray(rows_rad, dtype=np.float64)
        flat = rows.reshape(-1, rows.shape[-1])
        out = flat.copy()
        for i, q in enumerate(flat):
            out[i, :3] = self._kin.ee_position(q)
        return out.reshape(rows.shape).astype(np.float32)

    def to_joints(self, rows_ee: np.ndarray, seed_rad: np.ndarray) -> np.ndarray:
        """(H, A) end-effector rows -> (H, A) joint rows (radians). Row i's placing joints
        come from IK seeded with row i-1's solution (row 0: `seed_rad` (A,), the state the
        chunk starts from); wrist and gripper columns are taken as predicted. An
        unreachable position gives the closest reachable one (damped least squares)."""
        rows = np.asarray(rows_ee, dtype=np.float64)
        out = np.empty_like(rows)
        q = np.asarray(seed_rad, dtype=np.float64).copy()
        for i, row in enumerate(rows):
            q[3:] = row[3:]
            q = self._kin.ik(row[:3], q, joints=PLACING_JOINTS, max_iters=40, max_step_rad=0.2, tol_m=1e-4).q_rad
            q[3:] = row[3:]  # IK clips every joint to its limits; the wrist and gripper stay as predicted
            out[i] = q
        return out
