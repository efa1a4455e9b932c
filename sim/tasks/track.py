"""`track`: keep the fingertip on a ball that moves along a random smooth path.

The dynamic task of the latency benchmarks: the ball moves up to about 0.2 m/s, so during
an inference delay of 4 ticks (0.13 s) it goes up to 2.7 cm, more than the 2 cm the
fingertip must stay within. Success: within `TRACK_M` of the ball on at least
`TRACK_FRACTION` of the last `WINDOW_TICKS` ticks of the episode (which always runs
`max_ticks`). The path per axis is c + a sin(2 pi f t + phi), all seeded.
"""

from __future__ import annotations

import mujoco
import numpy as np

from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.sim_arm.robot import SimRobot
from robotrl.sim.experts import CartesianMover
from robotrl.sim.tasks.base import Evaluation, add_ball, place_mocap

TRACK_M = 0.02
TRACK_FRACTION = 0.8
WINDOW_TICKS = 60
"""The last 2 s at 30 Hz."""
CENTER_LOW_M = np.array([0.21, -0.04, 0.09])
CENTER_HIGH_M = np.array([0.25, 0.04, 0.12])
AMPLITUDE_LOW_M = np.array([0.02, 0.05, 0.015])
AMPLITUDE_HIGH_M = np.array([0.04, 0.09, 0.03])
FREQUENCY_HZ = (0.15, 0.35)
EXPERT_SPEED_M_S = 0.45
"""Faster than the ball, so the expert catches up after the start and after noise."""


class TrackTask:
    name = "track"
    instruction = "follow the red ball"
    """The instruction of every scene."""
    max_ticks = 180
    env_state_dim = 6
    """Ball position (m) and velocity (m/s), base frame."""

    def __init__(self) -> None:
        self.center_m = np.zeros(3)
        self.amplitude_m = np.zeros(3)
        self.frequency_hz = np.zeros(3)
        self.phase_rad = np.zeros(3)
        self.dt_s = 1 / 30
        self.tick = 0
        self._within: dict[int, bool] = {}  # tick -> fingertip within TRACK_M of the ball
        self._mocap = -1
        self._kin: Kinematics | None = None

    def build(self, spec: mujoco.MjSpec) -> None:
        add_ball(spec, "track_ball", [0.23, 0, 0.1])

    def reset(self, robot: SimRobot, rng: np.random.Generator) -> str:
        self._mocap = robot.model.body("track_ball").mocapid[0]
        self._kin = self._kin or Kinematics(robot.arm)
        self.dt_s = robot.spec.dt_s
        self.center_m = rng.uniform(CENTER_LOW_M, CENTER_HIGH_M)
        self.amplitude_m = rng.uniform(AMPLITUDE_LOW_M, AMPLITUDE_HIGH_M)
        self.frequency_hz = rng.uniform(*FREQUENCY_HZ, size=3)
        self.phase_rad = rng.uniform(0.0, 2 * np.pi, size=3)
        self.tick = 0
        self._within = {}
        self._place(robot)
        return self.instruction

    def ball_m(self, tick: float) -> np.ndarray:
        """(3,) ball position at `tick` (any real tick), metres."""
        w = 2 * np.pi * self.frequency_hz
        return self.center_m + self.amplitude_m * np.sin(w * tick * self.dt_s + self.phase_rad)

    def ball_velocity_m_s(self, tick: float) -> np.ndarray:
        w = 2 * np.pi * self.frequency_hz
        return self.amplitude_m * w * np.cos(w * tick * self.dt_s + self.phase_rad)

    def on_tick(self, robot: SimRobot, tick: int) -> None:
        self.tick = tick
        self._place(robot)

    def evaluate(self, robot: SimRobot) -> Evaluation:
        assert self._kin is not None
        dist = float(np.linalg.norm(self._kin.ee_position(robot.q_true_rad) - self.ball_m(self.tick)))
        self._within[self.tick] = dist < TRACK_M
        window = [ok for tick, ok in self._within.items() if tick > self.max_ticks - WINDOW_TICKS]
        fraction = float(np.mean(window)) if window else 0.0
        success = self.tick >= self.max_ticks and fraction >= TRACK_FRACTION
        return Evaluation(
            reward=-dist + (1.0 if success else 0.0),
            success=success,
            info={"distance_m": dist, "within_fraction": fraction},
        )

    def env_state(self, robot: SimRobot) -> np.ndarray:
        return np.concatenate([self.ball_m(self.tick), self.ball_velocity_m_s(self.tick)]).astype(np.float32)

    def make_expert(self, robot: SimRobot, noise_m: float = 0.0) -> TrackExpert:
        return TrackExpert(self, Kinematics(robot.arm), robot.spec.dt_s, noise_m)

    def _place(self, robot: SimRobot) -> None:
        place_mocap(robot, self._mocap, self.ball_m(self.tick))


class TrackExpert:
    """Moves the fingertip at the ball where it will be one tick after the target it
    computes is sent. Its clock starts at the task's tick when it first acts and advances
    one tick per `act` (a rolled-out chunk looks ahead along the path: privileged)."""

    def __init__(self, task: TrackTask, kinematics: Kinematics, dt_s: float, noise_m: float) -> None:
        self.task = task
        self.mover = CartesianMover(kinematics, speed_m_s=EXPERT_SPEED_M_S, dt_s=dt_s, noise_m=noise_m)
        self._tick: int | None = None

    def reset(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._tick = None

    def act(self, q_rad: np.ndarray) -> np.ndarray:
        if self._tick is None:
            self.mover.reset(self._rng, q_rad)
            self._tick = self.task.tick
        self._tick += 1
        return self.mover.step(self.task.ball_m(self._tick + 1), gripper_rad=0.0, point_down=False)
