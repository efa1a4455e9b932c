"""`ArmConfig` and `open_arm`: the arm an episode runs on, simulated or real, as the three
things the episode runner needs (a `SafeRobot`, a `Task`, a clock).

- sim: a `TaskEnv` (MuJoCo SO-101, the task and scenario named), rendering the served
  policy's cameras; wall clock, or a `SimClock` for stepped runs.
- so101 / so100: lerobot's SO follower (`LerobotArm`, radians at its boundary) behind
  `SafeRobot` with its watchdog thread, an `ArmTask` with the instruction, the policy's
  start pose and the reset period; wall clock.
  On a twin (`twin_info`), its follower bus, cameras, calibration and pid are read from
  the twin's info file when the arm opens, so a restarted twin's new buses are found;
  each episode's reset period begins by asking the twin for its next scene (SIGUSR1, as
  `robotrl twin` documents), and lasts at least `TWIN_SCENE_S`.
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from robotrl.core.clock import Clock, PacedSimClock, SimClock, WallClock
from robotrl.core.errors import UserError
from robotrl.core.robot import CameraSpec
from robotrl.core.task import Task
from robotrl.hardware.safety import SafeRobot
from robotrl.inference.runner import ArmTask
from robotrl.inference.start_pose import hold_still

if TYPE_CHECKING:
    from robotrl.hardware.camera_geometry import CameraRig
    from robotrl.record.teleop import TeleopConfig

log = logging.getLogger(__name__)

ROBOTS = ("sim", "so101", "so100")

DEFAULT_TASK = "reach"
"""The simulated arm's task when none is named."""
TWIN_SCENE_S = 0.3
"""Shortest reset period on a twin, s: it lays out the next scene at its next tick and its
cameras show it at their next frame (30 Hz each), well before the episode's first reading."""


@dataclass(frozen=True)
class ArmConfig:
    """Which arm, and what it should do."""

    robot: str = "sim"
    """sim (MuJoCo SO-101), so101 or so100 (a real arm through lerobot)."""
    task: str = ""
    """sim: the task (reach, pick_place, track), '' for `DEFAULT_TASK`; a real arm: the
    instruction, '' for the one the policy was trained on (`policy_instruction`)."""
    scenario: str = "shifted"
    """sim: nominal, shifted or camera_lag (`robotrl.sim.scenario`)."""
    port: str | None = None
    """Real arm: serial port of the follower."""
    robot_id: str = "follower"
    """Real arm: lerobot calibration id; also this robot's name for the server and learner."""
    cameras: str = ""
    """Real arm: its cameras as lerobot's `--robot.cameras` map (`hardware.lerobot_arm.cameras`)."""
    twin_info: str | None = None
    """so101 on a twin: the `robotrl twin --info` file giving the port, cameras,
    calibration folder and pid (instead of `port` and `cameras`)."""
    reset_time_s: float = 0.0
    """Real arm: seconds it holds still before each episode (after the move to the
    policy's start pose) while a person resets the scene."""

    def __post_init__(self) -> None:
        if self.robot not in ROBOTS:
            raise UserError(f"unknown robot {self.robot!r}; choose {', '.join(ROBOTS)}")
        if self.twin_info is not None and (self.robot != "so101" or self.port or self.cameras):
            raise UserError("a twin is an so101 whose port and cameras come from its info file: give neither")
        if self.reset_time_s < 0 or (self.robot == "sim" and self.reset_time_s > 0):
            raise UserError("--reset-time-s is >= 0 s, and for real arms: a simulated task resets its own scene")
        if self.robot != "sim" and not self.port and self.twin_info is None:
            raise UserError(f"--robot {self.robot} needs --port (see `robotrl devices`)")
        if self.robot == "sim":
            from robotrl.sim.scenario import SCENARIOS
            from robotrl.sim.tasks import TASKS

            object.__setattr__(self, "task", self.task or DEFAULT_TASK)
            if self.task not in TASKS:
                raise UserError(f"unknown task {self.task!r} for the simulated arm; choose {', '.join(TASKS)}")
            if self.scenario not in SCENARIOS:
                raise UserError(f"unknown scenario {self.scenario!r}; choose {', '.join(SCENARIOS)}")
            if self.cameras:
                raise UserError("--cameras is for real arms; a simulated arm renders the cameras the policy reads")
        else:
            from robotrl.hardware.lerobot_arm.cameras import parse_cameras

            parse_cameras(self.cameras)  # a bad camera map fails before anything starts

    @property
    def simulated(self) -> bool:
        return self.robot == "sim"

    @property
    def name(self) -> str:
        """The robot's name on the wire (server and learner)."""
        return f"{self.robot}-{self.robot_id}"


@dataclass
class OpenArm:
    """An arm ready for the episode runner; `close()` disconnects it."""

    robot: SafeRobot
    task: Task
    clock: Clock

    def close(self) -> None:
        self.robot.disconnect()


def open_arm(
    config: ArmConfig, server_info: dict, *, stepped: bool = False, stepped_speed: float | None = None
) -> OpenArm:
    """Connect the arm of `config` with the cameras the served policy reads
    (`server_info`: the server's hello reply). `stepped`: a simulated arm on a `SimClock`,
    as fast as the work allows, or paced at `stepped_speed` x real time (`PacedSimClock`)."""
    if server_info.get("env_state_dim") and not config.simulated:
        raise UserError(
            "this policy reads privileged simulation state (trained with --env-state); it cannot drive a real arm"
        )
    start = server_info.get("start_state_rad") or None
    start_rad = None if start is None else np.asarray(start, np.float64)
    if config.simulated:
        from robotrl.sim.env import TaskEnv

        size = int(server_info.get("image_size_px") or 0)
        cameras = tuple(CameraSpec(name, size, size) for name in server_info.get("cameras", ()))
        clock = WallClock()
        if stepped:
            clock = SimClock() if stepped_speed is None else PacedSimClock(stepped_speed)
        env = TaskEnv(config.task, config.scenario, cameras=cameras, clock=clock, start_rad=start_rad)
        try:
            check_control_rate(server_info, env.spec.control_rate_hz)
            if env.task.instruction is not None:  # a task whose every scene asks the same
                policy_instruction(env.task.instruction, server_info, f"--task {config.task} asks")
        except UserError:
            env.close()
            raise
        return OpenArm(env.robot, env, env.clock)
    if stepped:
        raise UserError("stepped runs are for simulated arms (--robot sim)")
    from robotrl.hardware.lerobot_arm.cameras import parse_cameras
    from robotrl.hardware.lerobot_arm.robot import LerobotArm

    port, camera_map, calibration_dir, twin_pid = config.port, config.cameras, None, None
    if config.twin_info is not None:
        port, camera_map, calibration_dir, twin_pid = twin_resources(Path(config.twin_info))
    cameras = parse_cameras(camera_map)
    missing = sorted(set(server_info.get("cameras", ())) - set(cameras))
    if missing:
        given = ", ".join(sorted(cameras)) or "none"
        raise UserError(
            f"the policy reads cameras {missing}; --cameras gives {given}: name them as the policy was trained"
        )
    instruction = policy_instruction(config.task, server_info)
    clock = WallClock()
    assert port is not None  # checked by ArmConfig
    arm = LerobotArm(
        config.robot, port=port, robot_id=config.robot_id, cameras=cameras, calibration_dir=calibration_dir
    )
    check_control_rate(server_info, arm.spec.control_rate_hz)
    robot = SafeRobot(arm, clock=clock)
    robot.connect(watchdog_thread=True)
    if start_rad is not None and len(start_rad) != robot.spec.num_joints:
        robot.disconnect()
        joints = robot.spec.num_joints
        raise UserError(f"the policy's start pose has {len(start_rad)} joints, the {config.robot} arm has {joints}")
    reset_s, on_reset = config.reset_time_s, None
    if twin_pid is not None:  # the twin lays out each episode's scene
        reset_s, on_reset = max(reset_s, TWIN_SCENE_S), partial(next_twin_scene, twin_pid)
    return OpenArm(robot, ArmTask(robot, instruction, clock, start_rad, reset_s, on_reset), clock)


def policy_instruction(given: str, server_info: dict, source: str = "--task gives") -> str:
    """The instruction an arm's episodes tell the served policy: `given`, or with '' the one
    the policy was trained on (`server_info["instructions"]`, the server's hello reply; ''
    when it names none, e.g. a lerobot checkpoint). One line (`UserError`) when `given` is
    not one the policy was trained on (its words would mean nothing to it: the arm would
    move at random), or when '' leaves a choice."""
    known = [str(i) for i in server_info.get("instructions") or ()]
    if not given and len(known) == 1:
        log.info("instruction: %r (the one the policy was trained on)", known[0])
        return known[0]
    if not given and known:
        raise UserError(f"--task: tell the policy what to do, one of {', '.join(map(repr, known))}")
    if not given:
        log.warning("the policy names no instruction it was trained on and --task gives none: it is told ''")
    if known and given not in known:
        raise UserError(
            f"{source} {given!r}; the policy was trained on {', '.join(map(repr, known))} only: it would act at random"
        )
    return given


def twin_resources(info: Path) -> tuple[str, str, str, int]:
    """(follower port, cameras map, follower calibration folder, pid) of the twin whose
    `--info` file is `info`; one line when there is none or it is not a twin's."""
    data = _twin_info(info, ("follower_port", "cameras", "follower_calibration_dir"))
    if not isinstance(data.get("pid"), int):
        raise _no_twin(info)
    return data["follower_port"], data["cameras"], data["follower_calibration_dir"], data["pid"]


def twin_camera_rig(info: Path) -> CameraRig:
    """The cameras' exact intrinsics and poses (its calibration file) of the twin whose
    `--info` file is `info`; one line when there is no twin's info file there."""
    from robotrl.hardware.camera_geometry import load_rig

    path = Path(_twin_info(info, ("camera_calibration",))["camera_calibration"])
    if not path.is_file():
        raise _no_twin(info)
    return load_rig(path)


def twin_leader(info: Path) -> TeleopConfig:
    """The leader teleop of the twin whose `--info` file is `info`: its bus, id and
    calibration folder (what `robotrl record --teleop leader` is told); one line when there
    is no twin's info file there."""
    from robotrl.record.teleop import TeleopConfig
    from robotrl.sim.twin.calibration import LEADER_FOLDER

    data = _twin_info(info, ("leader_port", "leader_id", "calibration_dir"))
    calibration_dir = Path(data["calibration_dir"]) / LEADER_FOLDER
    return TeleopConfig("leader", data["leader_port"], data["leader_id"], calibration_dir)


def _twin_info(info: Path, keys: tuple[str, ...]) -> dict:
    """The twin's info file `info`, holding a string under each of `keys`."""
    from robotrl.fsutil import read_json

    data = read_json(info)
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in keys):
        raise _no_twin(info)
    return data


def _no_twin(info: Path) -> UserError:
    return UserError(f"{info}: no running twin's info file there (start it with `robotrl twin --info {info}`)")


def next_twin_scene(pid: int) -> None:
    """Ask the twin of process `pid` for its next scene (what a person resetting the table
    does); a twin that is gone is logged, its arm's bus fails on the next reading."""
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError as exc:
        log.warning("could not ask the twin (pid %d) for a new scene: %s", pid, exc)


def new_twin_scene(robot: SafeRobot, clock: Clock, pid: int) -> None:
    """A person's reset on the twin of process `pid`, for a recorder: the arm commanded to
    stay where it stands (driven, so the twin scores the scene from its first tick), the twin
    asked for its next scene, and `TWIN_SCENE_S` of holding still while it lays it out."""
    here = robot.read().q_rad
    robot.command(here)
    next_twin_scene(pid)
    hold_still(robot, clock, here, TWIN_SCENE_S)


def check_control_rate(server_info: dict, robot_rate_hz: float) -> None:
    """Refuse a policy trained at another control rate than the arm runs (its chunks would
    play at the wrong speed). Servers that do not say are taken at their word."""
    policy_rate_hz = server_info.get("control_rate_hz")
    if policy_rate_hz is not None and abs(float(policy_rate_hz) - robot_rate_hz) > 1e-6:
        raise UserError(
            f"the policy was trained at {float(policy_rate_hz):g} Hz and the arm runs at {robot_rate_hz:g} Hz: "
            "record and train at the arm's rate"
        )
