"""End-effector features of the proprioceptive state: cheap fresh inputs of the fast pathway.

Forward kinematics (pinocchio, a few microseconds per state) turns joint angles into the
gripper's position (metres) and the x (jaw) and z (finger) axes of its frame, so the
expert can compare the gripper with object positions (env_state) or image keypoints in
Cartesian space instead of learning the arm's kinematics from a hundred demonstrations.
"""

from __future__ import annotations

import numpy as np

EE_FEATURES = 9
"""Position (3) + jaw axis (3) + finger axis (3)."""


class EndEffectorFeatures:
    def __init__(self, arm: str) -> None:
        from robotrl.hardware.kinematics import Kinematics
        from robotrl.hardware.models import get_arm

        self.arm = arm
        self._kinematics = Kinematics(get_arm(arm))

    def __call__(self, states_rad: np.ndarray) -> np.ndarray:
        """(N, S) joint states -> (N, 9) float32 features."""
        states = np.atleast_2d(np.asarray(states_rad, dtype=np.float64))
        out = np.empty((len(states), EE_FEATURES), dtype=np.float32)
        for i, q in enumerate(states):
            position, rotation = self._kinematics.forward(q)
            out[i, :3] = position
            out[i, 3:6] = rotation[:, 0]
            out[i, 6:] = rotation[:, 2]
        return out
