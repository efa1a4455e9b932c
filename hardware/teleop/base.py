"""The `TeleopDevice` protocol and what a device reports each control tick.

A device turns the robot's current state into a joint target (radians, robot command
order) plus episode events. Targets go through `SafeRobot` like any other command; the
recorder stores both the device's target and what was really sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from robotrl.core.robot import RobotState


@dataclass(frozen=True)
class TeleopEvents:
    """Episode events a person (or script) can raise on any tick."""

    intervene: bool = False
    """The human is in control this tick (human-in-the-loop runs)."""
    success: bool = False
    """End the episode and mark it successful."""
    failure: bool = False
    """End the episode and mark it failed."""
    rerecord: bool = False
    """Discard the current episode and record it again."""
    stop: bool = False
    """Finish the current episode and stop recording."""

    @property
    def ends_episode(self) -> bool:
        return self.success or self.failure or self.rerecord or self.stop


@dataclass
class TeleopCommand:
    target_rad: np.ndarray
    """(J,) joint target in radians for this tick."""
    events: TeleopEvents = field(default_factory=TeleopEvents)


@runtime_checkable
class TeleopDevice(Protocol):
    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    def reset(self, state: RobotState) -> None:
        """Start of an episode: take `state` as the starting pose."""
        ...

    def read(self, state: RobotState) -> TeleopCommand:
        """Target and events for the tick that starts at `state`."""
        ...
