"""Choosing a teleop device: `TeleopConfig` and `make_teleop` (`robotrl record --teleop`,
`robotrl actor --intervene`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from pathlib import Path

from robotrl.core.errors import UserError
from robotrl.core.robot import RobotState
from robotrl.hardware.safety import SafeRobot
from robotrl.hardware.teleop.base import TeleopCommand, TeleopDevice
from robotrl.record.loop import Session

TELEOPS = ("expert", "keyboard", "gamepad", "leader", "replay")


@dataclass(frozen=True)
class TeleopConfig:
    """Which teleop device, and its settings."""

    name: str
    """One of `TELEOPS` (recording) or keyboard / gamepad / leader (interventions)."""
    leader_port: str | None = None
    """leader: serial port of the leader arm."""
    leader_id: str = "leader"
    """leader: lerobot calibration id."""
    leader_calibration_dir: Path | None = None
    """leader: folder of its `<leader_id>.json`; None is lerobot's default (under
    `$HF_LEROBOT_CALIBRATION`)."""
    replay_root: Path | None = None
    """replay: dataset whose actions are replayed."""
    replay_episode: int = 0
    """replay: episode index."""
    noise_m: float = 0.003
    """expert: std of the noise on its end-effector reference per tick, metres."""


def make_teleop(cfg: TeleopConfig, session: Session | SafeRobot) -> TeleopDevice:
    """The teleop device `cfg.name` for `session` (a `TaskEnv` or `RobotSession`)."""
    name = cfg.name
    if name == "expert":
        from robotrl.sim.env import TaskEnv

        if not isinstance(session, TaskEnv):
            raise UserError(f"teleop {name} needs --robot sim (the scripted expert knows the sim task)")
        from robotrl.sim.teleop import ExpertTeleop

        return ExpertTeleop(session, noise_m=cfg.noise_m)
    if name == "replay":
        if cfg.replay_root is None:
            raise UserError("the replay teleop needs --replay-root")
        from robotrl.hardware.teleop.replay import ReplayTeleop

        return ReplayTeleop(cfg.replay_root, cfg.replay_episode)
    if name == "leader":
        if not cfg.leader_port:
            raise UserError("the leader teleop needs --leader-port")
        from robotrl.hardware.teleop.leader import LeaderArmTeleop

        return LeaderArmTeleop(
            session.spec.name, port=cfg.leader_port, robot_id=cfg.leader_id, calibration_dir=cfg.leader_calibration_dir
        )
    from robotrl.hardware.kinematics import Kinematics
    from robotrl.hardware.models import get_arm

    kinematics = Kinematics(get_arm(session.spec.name))
    if name == "keyboard":
        from robotrl.hardware.teleop.keyboard import KeyboardTeleop, TerminalKeys

        return KeyboardTeleop(kinematics, TerminalKeys())
    from robotrl.hardware.teleop.gamepad import GamepadTeleop, PygameAxes

    return GamepadTeleop(kinematics, PygameAxes())


class StopOnSignal:
    """`device`, plus a stop event (`TeleopEvents.stop`: the episode in progress ends at
    this tick and is kept or discarded as a stop key's would be, then recording ends) on
    every tick after `stop` is set, e.g. by `robotrl record`'s SIGTERM / SIGINT handler, so
    a supervisor stopping the recorder (`robotrl up`) loses no saved episode and no
    half-written one."""

    def __init__(self, device: TeleopDevice, stop: threading.Event) -> None:
        self.device, self.stop = device, stop

    def connect(self) -> None:
        self.device.connect()

    def disconnect(self) -> None:
        self.device.disconnect()

    def reset(self, state: RobotState) -> None:
        self.device.reset(state)

    def read(self, state: RobotState) -> TeleopCommand:
        cmd = self.device.read(state)
        if self.stop.is_set():
            cmd = replace(cmd, events=replace(cmd.events, stop=True))
        return cmd
