"""What a control loop sees each tick, for simulated and real arms alike."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from robotrl.core.robot import RobotState


@dataclass
class Observation:
    state: RobotState
    env_state: np.ndarray
    """(E,) privileged task features (sim: object positions in metres); (0,) on real arms."""
    instruction: str
    tick: int


@dataclass
class Step:
    obs: Observation
    """The observation after the step."""
    sent_rad: np.ndarray
    """(J,) what SafeRobot really sent for the action."""
    reward: float
    success: bool
    done: bool
    info: dict = field(default_factory=dict)
