"""`GamepadTeleop`: jog the end effector with a game controller.

Mapping (stick up counts as positive; see `GamepadSnapshot`):

    left stick up/down       +x / -x      speed proportional to the stick:
    left stick left/right    +y / -y      full deflection = `step_m` (5 mm) per tick
    right stick up/down      +z / -z
    right / left trigger     wrist roll + / -   (full = `roll_step_rad` per tick)
    right / left bumper      wrist roll + / -   (full speed)
    a                        toggle the gripper (on press)
    b (held)                 intervention: human in control while held
    y                        end the episode: success
    x                        end the episode: failure
    back                     discard the episode and record it again
    start                    stop recording

Axes inside the dead zone (|v| < 0.1) count as 0; beyond it speed grows linearly from 0
to full. Buttons other than b act once per press, not while held.

`PygameAxes` reads a real controller through pygame (optional: `pip install pygame`);
`ScriptedAxes` plays back snapshots for tests.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from robotrl.core.errors import DeviceNotConnected
from robotrl.core.robot import RobotState
from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.teleop.base import TeleopCommand, TeleopEvents
from robotrl.hardware.teleop.cartesian import CartesianJogger

log = logging.getLogger(__name__)

DEADZONE = 0.1
"""Stick and trigger values with |v| below this count as 0."""
BUTTON_EVENTS: dict[str, str] = {"y": "success", "x": "failure", "back": "rerecord", "start": "stop"}
"""Button -> `TeleopEvents` flag raised on the tick the button goes down."""
GRIPPER_BUTTON = "a"
INTERVENE_BUTTON = "b"


@dataclass(frozen=True)
class GamepadSnapshot:
    """Controller state at one instant.

    axes: "left_x", "left_y", "right_x", "right_y" in [-1, 1] with right and *up* positive;
    "left_trigger", "right_trigger" in [0, 1] (0 released). Missing axes read 0.
    buttons: names of the buttons held: "a", "b", "x", "y", "back", "start",
    "left_bumper", "right_bumper".
    """

    axes: dict[str, float] = field(default_factory=dict)
    buttons: frozenset[str] | set[str] = frozenset()


@runtime_checkable
class AxisSource(Protocol):
    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    def poll(self) -> GamepadSnapshot:
        """The controller's current state; never blocks."""
        ...


def apply_deadzone(value: float, deadzone: float = DEADZONE) -> float:
    """0 inside the dead zone, then linear from 0 at |v| = deadzone to +-1 at |v| = 1."""
    v = float(np.clip(value, -1.0, 1.0))
    if abs(v) < deadzone:
        return 0.0
    return float(np.sign(v) * (abs(v) - deadzone) / (1.0 - deadzone))


def gamepad_motion(snapshot: GamepadSnapshot, deadzone: float = DEADZONE) -> tuple[np.ndarray, float]:
    """(dxyz (3,), droll) in steps, each in [-1, 1]: the fraction of a full step this tick.

    x = left stick up, y = left stick *left* (robot +y is to the left), z = right stick up,
    roll = right - left trigger, bumpers add a full step each way.
    """

    def axis(name: str) -> float:
        return apply_deadzone(snapshot.axes.get(name, 0.0), deadzone)

    dxyz = np.array([axis("left_y"), -axis("left_x"), axis("right_y")])
    roll = axis("right_trigger") - axis("left_trigger")
    roll += float("right_bumper" in snapshot.buttons) - float("left_bumper" in snapshot.buttons)
    return dxyz, float(np.clip(roll, -1.0, 1.0))


class GamepadTeleop:
    """A `TeleopDevice` that jogs the end effector with a controller (module docstring).

    Args:
        kinematics: the arm's `Kinematics`.
        axes: where controller snapshots come from, e.g. `PygameAxes()`.
        jogger: step sizes and gripper angles; None takes the defaults.
        deadzone: stick values below this count as 0.
    """

    def __init__(
        self,
        kinematics: Kinematics,
        axes: AxisSource,
        jogger: CartesianJogger | None = None,
        deadzone: float = DEADZONE,
    ) -> None:
        if not 0.0 <= deadzone < 1.0:
            raise ValueError(f"deadzone must lie in [0, 1), got {deadzone}")
        self.axes = axes
        self.jogger = jogger if jogger is not None else CartesianJogger(kinematics)
        self.deadzone = deadzone
        self._held: frozenset[str] | None = frozenset()

    def connect(self) -> None:
        self.axes.connect()

    def disconnect(self) -> None:
        self.axes.disconnect()

    def reset(self, state: RobotState) -> None:
        """Start from the measured pose. Buttons held down at the first tick (e.g. the "y"
        that ended the last episode) act only once released and pressed again."""
        self.jogger.reset(state.q_rad)
        self._held = None

    def read(self, state: RobotState) -> TeleopCommand:
        if not self.jogger.has_target:
            self.jogger.reset(state.q_rad)
        snapshot = self.axes.poll()
        if self._held is None:
            self._held = frozenset(snapshot.buttons)
        pressed = frozenset(snapshot.buttons) - self._held
        self._held = frozenset(snapshot.buttons)
        if GRIPPER_BUTTON in pressed:
            self.jogger.toggle_gripper()
        dxyz, droll = gamepad_motion(snapshot, self.deadzone)
        self.jogger.jog(dxyz * self.jogger.step_m, droll * self.jogger.roll_step_rad)
        events = {flag: True for button, flag in BUTTON_EVENTS.items() if button in pressed}
        return TeleopCommand(
            self.jogger.target_rad, TeleopEvents(intervene=INTERVENE_BUTTON in snapshot.buttons, **events)
        )


class ScriptedAxes:
    """An `AxisSource` that returns the given snapshots in order, then repeats the last
    (or a neutral one if none are left); `push` appends more."""

    def __init__(self, snapshots: Iterable[GamepadSnapshot] = ()) -> None:
        self._script = list(snapshots)
        self._last = GamepadSnapshot()

    def connect(self) -> None:
        pass

    def disconnect(self) -> None:
        pass

    def push(self, *snapshots: GamepadSnapshot) -> None:
        self._script.extend(snapshots)

    def poll(self) -> GamepadSnapshot:
        if self._script:
            self._last = self._script.pop(0)
        return self._last


@dataclass(frozen=True)
class PygameLayout:
    """Which pygame joystick index is which control (SDL2 joystick API, not the
    GameController API). The default is an Xbox-style pad on Linux."""

    axes: dict[str, int] = field(
        default_factory=lambda: {
            "left_x": 0,
            "left_y": 1,
            "left_trigger": 2,
            "right_x": 3,
            "right_y": 4,
            "right_trigger": 5,
        }
    )
    """Axis name -> joystick axis index."""
    buttons: dict[str, int] = field(
        default_factory=lambda: {
            "a": 0,
            "b": 1,
            "x": 2,
            "y": 3,
            "left_bumper": 4,
            "right_bumper": 5,
            "back": 6,
            "start": 7,
        }
    )
    """Button name -> joystick button index."""
    inverted: frozenset[str] = frozenset({"left_y", "right_y"})
    """Axes whose raw value is negative when pushed up."""
    trigger_axes: frozenset[str] = frozenset({"left_trigger", "right_trigger"})
    """Axes reading -1 released .. +1 pressed, mapped onto 0..1."""


class PygameAxes:
    """A game controller read through pygame's joystick API (pygame is optional).

    Args:
        index: which connected joystick to use.
        layout: axis and button numbering of the controller.
    """

    def __init__(self, index: int = 0, layout: PygameLayout | None = None) -> None:
        self.index = index
        self.layout = layout if layout is not None else PygameLayout()
        self._pygame: Any = None
        self._joystick: Any = None

    def connect(self) -> None:
        """Open the controller; `DeviceNotConnected` without pygame or a controller."""
        if self._joystick is not None:
            return
        try:
            import pygame  # pyright: ignore[reportMissingImports]  # optional, not a dependency
        except ImportError:
            raise DeviceNotConnected(
                "the gamepad needs pygame, which robotrl does not install: `pip install pygame`"
            ) from None
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # events need a video driver; no window opens
        pygame.display.init()
        pygame.joystick.init()
        count = pygame.joystick.get_count()
        if count <= self.index:
            pygame.joystick.quit()
            raise DeviceNotConnected(
                f"no game controller #{self.index} ({count} connected): plug one in (USB or paired "
                "Bluetooth), check it shows under /dev/input/js*, then retry"
            )
        joystick = pygame.joystick.Joystick(self.index)
        joystick.init()
        log.info(
            "gamepad: %s (%d axes, %d buttons)", joystick.get_name(), joystick.get_numaxes(), joystick.get_numbuttons()
        )
        self._pygame, self._joystick = pygame, joystick

    def disconnect(self) -> None:
        pygame, self._pygame, self._joystick = self._pygame, None, None
        if pygame is not None:
            pygame.joystick.quit()
            pygame.display.quit()

    def poll(self) -> GamepadSnapshot:
        if self._joystick is None:
            raise DeviceNotConnected("PygameAxes is not connected: call connect() first")
        self._pygame.event.pump()
        joystick, layout = self._joystick, self.layout
        axes = {}
        for name, i in layout.axes.items():
            if i < joystick.get_numaxes():
                value = float(joystick.get_axis(i))
                if name in layout.inverted:
                    value = -value
                if name in layout.trigger_axes:
                    value = (value + 1.0) / 2.0
                axes[name] = value
        buttons = {
            name for name, i in layout.buttons.items() if i < joystick.get_numbuttons() and joystick.get_button(i)
        }
        return GamepadSnapshot(axes, frozenset(buttons))
