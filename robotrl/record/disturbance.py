"""Disturbance injection while recording (DART: Laskey et al., 2017).

A demonstration only shows states on the demonstrator's own path; a policy that drifts a
centimetre off it has never seen how to get back. With `robotrl record --perturb STD` the
commands sent to the arm are the teleop's targets plus a slowly varying joint offset,
so the arm really drifts, while the dataset's `teleop.action` column keeps what the
demonstrator asked for: the way back. Train on that column (`robotrl train
--action-key teleop.action`) to learn corrections.

The offset is an Ornstein-Uhlenbeck process per arm joint (the gripper is left alone):
stationary std `std_rad`, correlation time `correlation_ticks`.
"""

from __future__ import annotations

import math

import numpy as np


class Disturbance:
    def __init__(self, std_rad: float, joints: int, correlation_ticks: float = 10.0) -> None:
        if std_rad < 0 or correlation_ticks <= 0 or joints < 2:
            raise ValueError("Disturbance needs std_rad >= 0, correlation_ticks > 0 and >= 2 joints")
        self.std_rad = std_rad
        self.decay = math.exp(-1.0 / correlation_ticks)
        self._offset = np.zeros(joints)
        self._rng = np.random.default_rng(0)

    def reset(self, seed: int) -> None:
        """Start of an episode: zero offset, noise stream from `seed` (reproducible)."""
        self._offset[:] = 0.0
        self._rng = np.random.default_rng([seed, 0xD157])

    def __call__(self) -> np.ndarray:
        """(J,) offset in radians to add to this tick's target; the last joint (gripper) is 0."""
        kick = self._rng.normal(0.0, self.std_rad * math.sqrt(1.0 - self.decay**2), len(self._offset) - 1)
        self._offset[:-1] = self.decay * self._offset[:-1] + kick
        return self._offset.copy()
