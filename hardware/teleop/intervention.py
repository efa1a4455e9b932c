"""`TeleopIntervention`: a teleop device as the executor's intervention hook
(human in the loop, docs/algorithms.md section 4).

While the device reports `intervene` (keyboard `i` toggles it, a gamepad button holds it,
a leader arm's pedal/key), its target drives the arm and the tick is flagged; when the
human lets go the policy resumes from where the arm is. The device's success / failure
events end the episode with that label (a real arm has no automatic success signal).
Robot side: no torch, no mujoco.
"""

from __future__ import annotations

import numpy as np

from robotrl.core.robot import Robot, RobotState
from robotrl.hardware.teleop.base import TeleopDevice


class TeleopIntervention:
    """An `Intervener`: a person with a teleop device, read every tick.

    Args:
        device: a connected `TeleopDevice`.
        robot: what the device reads the state from (`read() -> RobotState`).

    Attributes:
        outcome: None while the episode runs; True / False once the human marked it
            successful / failed.
        episode_takeovers, episode_ticks: takeovers and intervened ticks this episode.
    """

    def __init__(self, device: TeleopDevice, robot: Robot) -> None:
        self.device, self.robot = device, robot
        self.outcome: bool | None = None
        self.episode_takeovers = self.episode_ticks = 0
        self._active = False

    def begin_episode(self, seed: int) -> None:
        self.device.reset(self.robot.read())
        self.outcome = None
        self.episode_takeovers = self.episode_ticks = 0
        self._active = False

    def end_episode(self, success: bool) -> None:
        self._active = False

    def __call__(self, tick: int, requested_rad: np.ndarray, state: RobotState) -> np.ndarray | None:
        command = self.device.read(state)
        events = command.events
        if events.success or events.failure:
            self.outcome = bool(events.success)
        if not events.intervene:
            self._active = False
            return None
        if not self._active:
            self._active = True
            self.episode_takeovers += 1
        self.episode_ticks += 1
        return np.asarray(command.target_rad, dtype=np.float64)
