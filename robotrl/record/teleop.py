"""Choosing a teleop device from command-line options (`robotrl record --teleop`,
`robotrl deploy --intervene`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from robotrl.errors import UserError

TELEOPS = ("expert", "keyboard", "gamepad", "leader", "replay")


def add_device_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the leader and replay devices."""
    parser.add_argument("--leader-port", help="leader teleop: serial port of the leader arm")
    parser.add_argument("--leader-id", default="leader", help="leader teleop: lerobot calibration id")
    parser.add_argument("--replay-root", type=Path, help="replay teleop: dataset whose actions are replayed")
    parser.add_argument("--replay-episode", type=int, default=0, help="replay teleop: episode index")


def make_teleop(name: str, args: argparse.Namespace, session):
    """The teleop device `name` (one of `TELEOPS`) for `session`, from the options of
    `add_device_arguments` (+ `--noise` for the expert)."""
    if name == "expert":
        if args.robot != "sim":
            raise UserError(f"teleop {name} needs --robot sim (the scripted expert knows the sim task)")
        from robotrl.sim.teleop import ExpertTeleop

        return ExpertTeleop(session, noise_m=args.noise)
    if name == "replay":
        if args.replay_root is None:
            raise UserError("the replay teleop needs --replay-root")
        from robotrl.hardware.teleop.replay import ReplayTeleop

        return ReplayTeleop(args.replay_root, args.replay_episode)
    if name == "leader":
        if not args.leader_port:
            raise UserError("the leader teleop needs --leader-port")
        from robotrl.hardware.teleop.leader import LeaderArmTeleop

        return LeaderArmTeleop(session.spec.name, port=args.leader_port, robot_id=args.leader_id)
    from robotrl.hardware.kinematics import Kinematics
    from robotrl.hardware.models import get_arm

    kinematics = Kinematics(get_arm(session.spec.name))
    if name == "keyboard":
        from robotrl.hardware.teleop.keyboard import KeyboardTeleop, TerminalKeys

        return KeyboardTeleop(kinematics, TerminalKeys())
    from robotrl.hardware.teleop.gamepad import GamepadTeleop, PygameAxes

    return GamepadTeleop(kinematics, PygameAxes())
