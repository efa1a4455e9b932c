"""`KeyboardTeleop`: jog the end effector from a plain terminal (no X server needed).

Key map (also `KEY_MAP`, key name -> `KeyBinding`, for `--help`):

    w / s        +x / -x   one `step_m` (default 5 mm) per press, robot base frame
    a / d        +y / -y   (arrow keys: up/down = +x/-x, left/right = +y/-y)
    r / f        +z / -z
    q / e        wrist roll - / +   one `roll_step_rad` (default 0.05 rad) per press
    space        toggle the gripper (open <-> closed)
    i            toggle intervention (human in control until pressed again)
    enter        end the episode: success
    backspace, x end the episode: failure
    z            discard the episode and record it again
    escape       stop recording

Holding a key repeats it at the terminal's auto-repeat rate; all presses since the last
tick are applied in that tick. Letters are case-insensitive. Keys come from a `KeySource`:
`TerminalKeys` reads the terminal, `QueueKeys` takes keys pushed by a program or a test.
"""

from __future__ import annotations

import atexit
import logging
import os
import select
import sys
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from robotrl.core.errors import DeviceNotConnected
from robotrl.core.robot import RobotState
from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.teleop.base import TeleopCommand, TeleopEvents
from robotrl.hardware.teleop.cartesian import CartesianJogger

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeyBinding:
    """What one key does; steps are in units of the jogger's `step_m` / `roll_step_rad`."""

    help: str
    dxyz_steps: tuple[float, float, float] = (0.0, 0.0, 0.0)
    droll_steps: float = 0.0
    toggle_gripper: bool = False
    toggle_intervene: bool = False
    event: str | None = None
    """Name of the `TeleopEvents` flag the key raises for one tick."""


def _move(help_: str, x: float = 0.0, y: float = 0.0, z: float = 0.0) -> KeyBinding:
    return KeyBinding(help_, dxyz_steps=(x, y, z))


KEY_MAP: dict[str, KeyBinding] = {
    "w": _move("+x (forward)", x=1),
    "s": _move("-x (back)", x=-1),
    "a": _move("+y (left)", y=1),
    "d": _move("-y (right)", y=-1),
    "r": _move("+z (up)", z=1),
    "f": _move("-z (down)", z=-1),
    "up": _move("+x (forward)", x=1),
    "down": _move("-x (back)", x=-1),
    "left": _move("+y (left)", y=1),
    "right": _move("-y (right)", y=-1),
    "q": KeyBinding("wrist roll -", droll_steps=-1),
    "e": KeyBinding("wrist roll +", droll_steps=1),
    "space": KeyBinding("toggle gripper open/closed", toggle_gripper=True),
    "i": KeyBinding("toggle intervention (human in control)", toggle_intervene=True),
    "enter": KeyBinding("end episode: success", event="success"),
    "backspace": KeyBinding("end episode: failure", event="failure"),
    "x": KeyBinding("end episode: failure", event="failure"),
    "z": KeyBinding("discard episode and re-record", event="rerecord"),
    "escape": KeyBinding("stop recording", event="stop"),
}
"""Key name (as `KeySource.poll` reports it) -> what it does."""


def key_help() -> str:
    """The key map as aligned text lines, for `--help` and start-up banners."""
    return "\n".join(f"  {key:<10} {binding.help}" for key, binding in KEY_MAP.items())


@runtime_checkable
class KeySource(Protocol):
    """Where key presses come from. Key names: single lower-case characters ("w"), or
    "space", "enter", "backspace", "escape", "tab", "up", "down", "left", "right"."""

    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    def poll(self) -> list[str]:
        """Keys pressed since the last call, oldest first; never blocks."""
        ...


class QueueKeys:
    """A `KeySource` fed by `push`, for tests and programs that make their own keys."""

    def __init__(self) -> None:
        self._keys: deque[str] = deque()

    def connect(self) -> None:
        pass

    def disconnect(self) -> None:
        pass

    def push(self, *keys: str) -> None:
        self._keys.extend(keys)

    def poll(self) -> list[str]:
        keys = list(self._keys)
        self._keys.clear()
        return keys


# -- terminal decoding ----------------------------------------------------------------
ESC = "\x1b"
_ARROWS = {"A": "up", "B": "down", "C": "right", "D": "left"}
_CONTROL = {"\r": "enter", "\n": "enter", "\x7f": "backspace", "\x08": "backspace", " ": "space", "\t": "tab"}


def decode_keys(text: str, *, final: bool = True) -> tuple[list[str], str]:
    """Terminal input -> (key names, undecoded tail).

    A lone ESC is "escape"; "ESC [ ... X" (CSI) and "ESC O X" (SS3) sequences are
    arrows (A/B/C/D -> up/down/right/left) or ignored (function keys, mouse). With
    `final=False`, an escape sequence cut off at the end is returned as the tail, to be
    completed by the next read; with `final=True` its ESC counts as a lone "escape".
    Other control characters are ignored; letters come out lower-case.
    """
    keys: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == ESC:
            end, key = _escape_sequence(text, i)
            if end is None:  # cut off
                if not final:
                    return keys, text[i:]
                keys.append("escape")
                i += 1
                continue
            if key is not None:
                keys.append(key)
            i = end
        elif ch in _CONTROL:
            keys.append(_CONTROL[ch])
            i += 1
        else:
            if ch.isprintable():
                keys.append(ch.lower())
            i += 1
    return keys, ""


def _escape_sequence(text: str, start: int) -> tuple[int | None, str | None]:
    """(index after the sequence or None when cut off, key name or None) at text[start] == ESC."""
    if start + 1 >= len(text):
        return None, None
    kind = text[start + 1]
    if kind == "O":  # SS3: ESC O <final>
        if start + 2 >= len(text):
            return None, None
        return start + 3, _ARROWS.get(text[start + 2])
    if kind != "[":  # ESC then another key (e.g. ESC ESC, or Alt+key): a lone escape
        return start + 1, "escape"
    for j in range(start + 2, len(text)):  # CSI: parameter/intermediate bytes, then a final byte
        code = ord(text[j])
        if 0x40 <= code <= 0x7E:
            return j + 1, _ARROWS.get(text[j])  # modifiers ("ESC [ 1 ; 2 A") keep the arrow
        if not 0x20 <= code <= 0x3F:
            return j, None  # malformed: drop what came so far
    return None, None


class TerminalKeys:
    """Keys typed into a terminal, read without Enter or echo (cbreak mode) via termios
    and select; never blocks. Ctrl-C still interrupts. Works over ssh; needs no X server.

    The terminal's settings are restored by `disconnect()`, on leaving a `with` block, and
    at interpreter exit (atexit) if neither ran.

    Args:
        fd: file descriptor of the terminal; None is standard input.
    """

    def __init__(self, fd: int | None = None) -> None:
        self._fd = fd
        self._saved: list | None = None
        self._pending = ""

    def connect(self) -> None:
        import termios
        import tty

        if self._saved is not None:
            return
        fd = self._fd if self._fd is not None else sys.stdin.fileno()
        if not os.isatty(fd):
            raise DeviceNotConnected(
                f"keyboard teleop needs a terminal, but file descriptor {fd} is not one: run it "
                "in an interactive shell (not piped or under nohup), or use the gamepad"
            )
        self._fd = fd
        self._saved = termios.tcgetattr(fd)
        atexit.register(self.disconnect)
        tty.setcbreak(fd, termios.TCSANOW)

    def disconnect(self) -> None:
        """Restore the terminal settings; a no-op when not connected."""
        import termios

        saved, self._saved = self._saved, None
        atexit.unregister(self.disconnect)
        if saved is not None and self._fd is not None:
            try:
                termios.tcsetattr(self._fd, termios.TCSADRAIN, saved)
            except termios.error:  # terminal already gone (ssh dropped)
                log.warning("could not restore the terminal settings of fd %d", self._fd)

    def __enter__(self) -> TerminalKeys:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()

    def poll(self) -> list[str]:
        if self._saved is None or self._fd is None:
            raise DeviceNotConnected("TerminalKeys is not connected: call connect() first")
        chunks = []
        while select.select([self._fd], [], [], 0.0)[0]:
            data = os.read(self._fd, 1024)
            if not data:
                break
            chunks.append(data.decode("utf-8", errors="ignore"))
        if not chunks and self._pending:  # nothing followed a cut-off sequence: it was a lone ESC
            keys, self._pending = decode_keys(self._pending, final=True)
            return keys
        keys, self._pending = decode_keys(self._pending + "".join(chunks), final=False)
        return keys


class KeyboardTeleop:
    """A `TeleopDevice` that jogs the end effector with keys (see the module docstring).

    Args:
        kinematics: the arm's `Kinematics`.
        keys: where key presses come from, e.g. `TerminalKeys()` or `QueueKeys()`.
        jogger: end-effector step sizes and gripper angles; None takes the defaults
            (5 mm, 0.05 rad, gripper 0.9 / -0.15 rad).
    """

    def __init__(self, kinematics: Kinematics, keys: KeySource, jogger: CartesianJogger | None = None) -> None:
        self.keys = keys
        self.jogger = jogger if jogger is not None else CartesianJogger(kinematics)
        self.intervening = False

    def connect(self) -> None:
        self.keys.connect()

    def disconnect(self) -> None:
        self.keys.disconnect()

    def reset(self, state: RobotState) -> None:
        """Start from the measured pose; intervention off. Keys already typed still count."""
        self.jogger.reset(state.q_rad)
        self.intervening = False

    def read(self, state: RobotState) -> TeleopCommand:
        if not self.jogger.has_target:
            self.jogger.reset(state.q_rad)
        return self.apply(self.keys.poll())

    def apply(self, keys: Iterable[str]) -> TeleopCommand:
        """Apply key names in order; the target and the events they make."""
        dxyz_steps = np.zeros(3)
        droll_steps = 0.0
        events: dict[str, bool] = {}
        for key in keys:
            binding = KEY_MAP.get(key)
            if binding is None:
                log.debug("key %r is not bound", key)
                continue
            dxyz_steps += binding.dxyz_steps
            droll_steps += binding.droll_steps
            if binding.toggle_gripper:
                self.jogger.toggle_gripper()
            if binding.toggle_intervene:
                self.intervening = not self.intervening
            if binding.event is not None:
                events[binding.event] = True
        self.jogger.jog(dxyz_steps * self.jogger.step_m, droll_steps * self.jogger.roll_step_rad)
        return TeleopCommand(self.jogger.target_rad, TeleopEvents(intervene=self.intervening, **events))
