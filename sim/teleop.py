"""The scripted expert of a simulated task as a `TeleopDevice` (for `robotrl record`)."""

from __future__ import annotations

from robotrl.core.robot import RobotState
from robotrl.hardware.teleop.base import TeleopCommand
from robotrl.sim.env import TaskEnv
from robotrl.sim.tasks.base import Expert


class ExpertTeleop:
    """Drives `env` with its task's expert; `noise_m` (std of end-effector noise per
    tick, metres) makes demonstrations diverse. Call `reset` after `env.reset(seed)`."""

    def __init__(self, env: TaskEnv, noise_m: float = 0.0) -> None:
        self.env = env
        self.noise_m = noise_m
        self._expert: Expert | None = None

    def connect(self) -> None:
        pass

    def disconnect(self) -> None:
        pass

    def reset(self, state: RobotState) -> None:
        self._expert = self.env.make_expert(noise_m=self.noise_m)

    def read(self, state: RobotState) -> TeleopCommand:
        assert self._expert is not None, "call reset() at the start of each episode"
        return TeleopCommand(self._expert.act(state.q_rad))
