"""`RobotSession`: a real arm behind `SafeRobot` with the same reset/step interface as
the simulated `TaskEnv`, so one recording loop serves both."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from robotrl.core.clock import Clock, Rate
from robotrl.core.episode import Observation, Step
from robotrl.core.robot import RobotSpec
from robotrl.hardware.safety import SafeRobot


class RobotSession:
    """Paces `robot` at its control rate on `clock`. A real arm has no reward or automatic
    success: episodes end by teleop events or the tick limit. `on_reset`, if given, runs at
    each episode's start before its first reading (a twin lays out its next scene)."""

    env_state_dim = 0

    def __init__(
        self, robot: SafeRobot, instruction: str, clock: Clock, on_reset: Callable[[], None] | None = None
    ) -> None:
        self.robot = robot
        self.instruction = instruction
        self.clock = clock
        self.on_reset = on_reset
        self.tick = 0
        self._rate = Rate(clock, robot.spec.control_rate_hz)

    @property
    def spec(self) -> RobotSpec:
        return self.robot.spec

    @property
    def overruns(self) -> int:
        return self._rate.overruns

    def reset(self, seed: int) -> Observation:
        """Start an episode where the arm stands (a person resets the scene)."""
        if self.on_reset is not None:
            self.on_reset()
        self.robot.resync()
        self.tick = 0
        self._rate.restart()
        return self._observe()

    def step(self, target_rad: np.ndarray) -> Step:
        sent = self.robot.command(target_rad)
        self._rate.sleep()
        self.tick += 1
        return Step(self._observe(), sent, 0.0, False, False)

    def close(self) -> None:
        self.robot.disconnect()

    def _observe(self) -> Observation:
        return Observation(self.robot.read(), np.zeros(0, np.float32), self.instruction, self.tick)
