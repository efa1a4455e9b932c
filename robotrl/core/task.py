"""What an episode is for, and who may take over: the `Task` and `Intervener` contracts.

The episode runner (`robotrl.inference.runner`) drives the arm; a `Task` resets the scene,
names the instruction and scores every tick; an `Intervener` may replace the policy's
target on any tick (a person with a teleop device, or the simulated human).
Angles are radians, times are control ticks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from robotrl.core.robot import RobotState


@dataclass(frozen=True)
class TaskOutcome:
    """The task's verdict after one tick."""

    reward: float
    success: bool
    done: bool
    """The episode is over (success, or the task's own tick limit)."""
    info: dict = field(default_factory=dict)


@runtime_checkable
class Task(Protocol):
    """Reset, instruction, reward and success of one episode on one arm.

    A simulated task (`robotrl.sim.env.TaskEnv`) moves objects, scores and ends episodes
    itself; on a real arm (`robotrl.inference.runner.ArmTask`) a person resets the scene,
    the reward is 0 and only an `Intervener`'s label or the runner's tick limit ends it.
    """

    @property
    def env_state_dim(self) -> int:
        """E, length of `env_state()`: privileged simulator features, 0 on a real arm."""
        ...

    def begin(self, seed: int) -> str:
        """Reset the scene for the episode seeded `seed`; return its instruction."""
        ...

    def env_state(self) -> np.ndarray:
        """(E,) privileged features now (sim: object positions, metres); (0,) on a real arm."""
        ...

    def score(self, tick: int) -> TaskOutcome:
        """Called once the command of tick `tick - 1` has been executed (one control
        period later): scheduled events for tick `tick`, then the verdict."""
        ...


@runtime_checkable
class Intervener(Protocol):
    """Who may take over the arm: called every tick with the policy's target.

    Attributes:
        outcome: None while the episode runs; True / False once a person marked it
            successful / failed (that label ends the episode). Always None in sim.
        episode_takeovers: times it took over in the current episode.
    """

    outcome: bool | None
    episode_takeovers: int

    def begin_episode(self, seed: int) -> None:
        """A new episode of `seed` starts (after the task's `begin`)."""
        ...

    def __call__(self, tick: int, requested_rad: np.ndarray, state: RobotState) -> np.ndarray | None:
        """(J,) target that replaces the policy's `requested_rad` (J,) on this tick, or
        None to let the policy drive; `state` is this tick's reading of the arm."""
        ...

    def end_episode(self, success: bool) -> None: ...
