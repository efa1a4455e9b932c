"""The `Task` protocol: objects added to the arm's scene, a seeded reset distribution,
an instruction, reward and success, privileged features and a scripted expert."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import mujoco
import numpy as np

from robotrl.core.errors import DeviceNotConnected
from robotrl.hardware.sim_arm.robot import SimRobot


def sim_data(robot: SimRobot) -> mujoco.MjData:
    """`robot.data`, the physics state a task reads and places objects in; raises
    `DeviceNotConnected` before `robot.connect()`."""
    if robot.data is None:
        raise DeviceNotConnected("SimRobot is not connected: call connect() first")
    return robot.data


BALL_RADIUS_M = 0.015


def add_ball(spec: mujoco.MjSpec, name: str, pos_m: list[float]) -> None:
    """A red ball (`BALL_RADIUS_M`) on mocap body `name` at `pos_m`: the task moves it,
    nothing collides."""
    body = spec.worldbody.add_body(name=name, mocap=True, pos=pos_m)
    body.add_geom(
        type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[BALL_RADIUS_M, 0, 0], rgba=[0.9, 0.1, 0.1, 1], contype=0, conaffinity=0
    )


def place_mocap(robot: SimRobot, mocap_id: int, pos_m: np.ndarray) -> None:
    """Move mocap body `mocap_id` to `pos_m` (metres) and update the derived physics state."""
    data = sim_data(robot)
    data.mocap_pos[mocap_id] = pos_m
    mujoco.mj_forward(robot.model, data)


@dataclass
class Evaluation:
    reward: float
    success: bool
    info: dict = field(default_factory=dict)


class Mover(Protocol):
    """Where an expert's plan lives (`CartesianMover`, `JointMover`)."""

    def reanchor_joints(self, q_rad: np.ndarray) -> None:
        """Go on from (J,) joint state `q_rad` with the plan as it is."""
        ...

    @property
    def reference_m(self) -> np.ndarray:
        """(3,) end-effector position the plan holds now, metres."""
        ...


class Expert(Protocol):
    """A scripted expert; its plan (phase, reference) lives in `mover`, so a copy of it
    can be rolled forward without changing the original."""

    mover: Mover

    def reset(self, rng: np.random.Generator) -> None: ...

    def act(self, q_rad: np.ndarray) -> np.ndarray:
        """(J,) joint target for the next tick from measured (J,) joints."""
        ...


class Task(Protocol):
    name: str
    max_ticks: int
    """Episode length limit at the 30 Hz control rate."""
    env_state_dim: int
    instruction: str | None
    """The instruction of every scene, or None when each scene names its own."""

    def build(self, spec: mujoco.MjSpec) -> None:
        """Add the task's objects to the arm's spec before it is compiled."""
        ...

    def reset(self, robot: SimRobot, rng: np.random.Generator) -> str:
        """Randomise objects after `robot.reset()`; return the instruction."""
        ...

    def on_tick(self, robot: SimRobot, tick: int) -> None:
        """Scheduled events (e.g. the reach target jumping) before tick `tick` is observed."""
        ...

    def evaluate(self, robot: SimRobot) -> Evaluation: ...

    def env_state(self, robot: SimRobot) -> np.ndarray:
        """(env_state_dim,) privileged task features (object positions), metres."""
        ...

    def make_expert(self, robot: SimRobot, noise_m: float = 0.0) -> Expert:
        """The scripted expert; `noise_m`: noise on its Cartesian reference, metres."""
        ...
