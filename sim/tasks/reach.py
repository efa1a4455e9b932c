"""`reach`: touch a target that jumps to a new random place at a random tick.

The reaction-time task of the benchmarks: success needs the fingertip within
`TOUCH_M` of the target after its last jump.
"""

from __future__ import annotations

import mujoco
import numpy as np

from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.sim_arm.robot import SimRobot
from robotrl.sim.experts import CartesianMover
from robotrl.sim.tasks.base import Evaluation, add_ball, place_mocap

TOUCH_M = 0.02
TARGET_LOW_M = np.array([0.16, -0.15, 0.04])
TARGET_HIGH_M = np.array([0.30, 0.15, 0.18])
MIN_JUMP_M = 0.06
JUMP_TICKS = (20, 50)
"""The jump happens at a tick drawn uniformly from this range (inclusive)."""


class ReachTask:
    name = "reach"
    instruction = "touch the red ball"
    """The instruction of every scene."""
    max_ticks = 150
    env_state_dim = 3

    def __init__(self) -> None:
        self.target_m = np.zeros(3)
        self.jump_tick = 0
        self._next_target_m = np.zeros(3)
        self._mocap = -1
        self._kin: Kinematics | None = None

    def build(self, spec: mujoco.MjSpec) -> None:
        add_ball(spec, "reach_target", [0.25, 0, 0.1])

    def reset(self, robot: SimRobot, rng: np.random.Generator) -> str:
        self._mocap = robot.model.body("reach_target").mocapid[0]
        self._kin = self._kin or Kinematics(robot.arm)
        self.target_m = rng.uniform(TARGET_LOW_M, TARGET_HIGH_M)
        while True:
            self._next_target_m = rng.uniform(TARGET_LOW_M, TARGET_HIGH_M)
            if np.linalg.norm(self._next_target_m - self.target_m) >= MIN_JUMP_M:
                break
        self.jump_tick = int(rng.integers(JUMP_TICKS[0], JUMP_TICKS[1] + 1))
        self._place(robot)
        return self.instruction

    def on_tick(self, robot: SimRobot, tick: int) -> None:
        if tick == self.jump_tick:
            self.target_m = self._next_target_m
            self._place(robot)

    def evaluate(self, robot: SimRobot) -> Evaluation:
        assert self._kin is not None
        dist = float(np.linalg.norm(self._kin.ee_position(robot.q_true_rad) - self.target_m))
        jumped = robot.sim_time_s >= self.jump_tick * robot.spec.dt_s - 1e-9
        success = jumped and dist < TOUCH_M
        return Evaluation(
            reward=-dist + (1.0 if success else 0.0),
            success=success,
            info={"distance_m": dist, "jump_tick": self.jump_tick},
        )

    def env_state(self, robot: SimRobot) -> np.ndarray:
        return self.target_m.astype(np.float32)

    def make_expert(self, robot: SimRobot, noise_m: float = 0.0) -> ReachExpert:
        return ReachExpert(self, Kinematics(robot.arm), robot.spec.dt_s, noise_m)

    def _place(self, robot: SimRobot) -> None:
        place_mocap(robot, self._mocap, self.target_m)


class ReachExpert:
    """Moves the fingertip straight at the current target (pointing down)."""

    def __init__(self, task: ReachTask, kinematics: Kinematics, dt_s: float, noise_m: float) -> None:
        self.task = task
        self.mover = CartesianMover(kinematics, speed_m_s=0.35, dt_s=dt_s, noise_m=noise_m)
        self._started = False

    def reset(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._started = False

    def act(self, q_rad: np.ndarray) -> np.ndarray:
        if not self._started:
            self.mover.reset(self._rng, q_rad)
            self._started = True
        return self.mover.step(self.task.target_m, gripper_rad=0.0, point_down=False)
