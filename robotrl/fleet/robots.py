"""`[robots.NAME]` and its `[robots.NAME.record]`: one arm, what `robotrl up` runs on it,
and its recorder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from robotrl.fleet.checks import (
    ARM_ROLES,
    DRIVERS,
    ROBOT_ROLES,
    _count,
    _entry,
    _expect,
    _fail,
    _number,
    _optional,
    _roles,
)
from robotrl.hardware.models import ARMS
from robotrl.inference.executor import MODES
from robotrl.learn.actor import INTERVENERS
from robotrl.record.teleop import TELEOPS

UP_TELEOPS = ("expert", "gamepad", "leader")
"""The teleop devices of a recorder under `robotrl up` (of `robotrl.record.teleop.TELEOPS`:
keyboard needs a terminal, which `up`'s roles have not, and replay a dataset to replay)."""


@dataclass(frozen=True)
class RecordEntry:
    """`[robots.NAME.record]`: the dataset `robotrl up` records on a robot with the recorder
    role (`robotrl record --fleet FILE --fleet-robot NAME`), with the robot's task and
    scenario; before its deploy_client or actor role, if it has one."""

    TOML_KEYS: ClassVar[dict[str, str]] = {
        "dataset": "dataset",
        "episodes": "episodes",
        "teleop": "teleop",
        "leader_port": "leader_port",
        "leader_id": "leader_id",
        "max_seconds": "max_seconds",
        "seed": "seed",
        "image_size": "image_size_px",
        "cameras": "cameras",
        "keep_failed": "keep_failed",
    }
    robot: str
    """The robot's table name, e.g. "left_arm"."""
    driver: str
    """The robot's driver (what the defaults and the keys allowed depend on)."""
    dataset: str
    """Folder of the LeRobotDataset written; appended to when it exists."""
    episodes: int = 10
    """Episodes the dataset holds when the role is done: each start records those missing."""
    teleop: str | None = None
    """expert (the task's scripted expert; driver sim only), gamepad or leader; None: expert
    on a simulated arm, leader on a real one."""
    leader_port: str | None = None
    """teleop leader: serial port of the leader arm, e.g. "/dev/ttyACM1"."""
    leader_id: str = "leader"
    """teleop leader: lerobot calibration id of the leader arm."""
    max_seconds: float = 20.0
    """Longest episode, seconds."""
    seed: int = 0
    """sim: seed of the first episode (a restart goes on from the seed after the last one tried)."""
    image_size_px: int | None = None
    """sim: camera height and width (TOML key `image_size`), pixels; None: 224."""
    cameras: str | None = None
    """sim: the cameras recorded, comma-separated ("" for none); None: "front,wrist". A real
    arm records its `[cameras.*]`."""
    keep_failed: bool = False
    """sim: also store the episodes that did not succeed (a real arm has no success: it
    stores every episode)."""

    def __post_init__(self) -> None:
        at = f"robots.{self.robot}.record"
        sim = self.driver == "sim"
        if self.driver == "twin":
            _fail(at, "not for driver 'twin': run `robotrl twin --info INFO` and `robotrl record --twin INFO` instead")
        _expect(f"{at}.dataset", self.dataset, str, "a dataset folder")
        if not self.dataset:
            _fail(f"{at}.dataset", "must not be empty")
        _count(f"{at}.episodes", self.episodes, 1)
        _number(f"{at}.max_seconds", self.max_seconds)
        _count(f"{at}.seed", self.seed, 0)
        _expect(f"{at}.keep_failed", self.keep_failed, bool, "true or false")
        self._check_teleop(at, sim)
        if self.image_size_px is not None:
            _count(f"{at}.image_size", self.image_size_px, 1)
        if self.cameras is not None:
            _expect(f"{at}.cameras", self.cameras, str, 'a comma-separated list of cameras, e.g. "front,wrist"')
        for key in ("image_size", "cameras"):
            if getattr(self, self.TOML_KEYS[key]) is not None and not sim:
                _fail(f"{at}.{key}", "only for driver 'sim' (a real arm records its [cameras.*])")

    def _check_teleop(self, at: str, sim: bool) -> None:
        """A teleop device `up` can run on this driver, and the leader arm's keys for it."""
        _optional(f"{at}.teleop", self.teleop, str, "a teleop device")
        if self.teleop is not None and self.teleop not in TELEOPS:
            _fail(f"{at}.teleop", f"{self.teleop!r} is not a teleop device ({', '.join(TELEOPS)})")
        if self.teleop is not None and self.teleop not in UP_TELEOPS:
            _fail(
                f"{at}.teleop",
                f"{self.teleop!r} is not for `robotrl up` (keyboard needs a terminal, replay a dataset): "
                f"use {', '.join(UP_TELEOPS)}, or record with `robotrl record`",
            )
        if self.device == "expert" and not sim:
            _fail(f"{at}.teleop", "'expert' (the task's scripted expert) is for driver 'sim'")
        _optional(f"{at}.leader_port", self.leader_port, str, "a device path")
        if self.device == "leader" and self.leader_port is None:
            _fail(
                f"{at}.leader_port",
                "missing; teleop 'leader' reads the leader arm, e.g. leader_port = \"/dev/ttyACM1\"",
            )
        if self.leader_port is not None and self.device != "leader":
            _fail(f"{at}.leader_port", "only for teleop 'leader'")
        _optional(f"{at}.leader_id", self.leader_id, str, "a calibration id")

    @property
    def device(self) -> str:
        """The teleop device: `teleop`, else expert on a simulated arm and leader on a real one."""
        return self.teleop or ("expert" if self.driver == "sim" else "leader")


@dataclass(frozen=True)
class RobotEntry:
    """`[robots.NAME]`: one arm."""

    TOML_KEYS: ClassVar[dict[str, str]] = {
        "model": "model",
        "driver": "driver",
        "port": "port",
        "id": "calibration_id",
        "roles": "roles",
        "task": "task",
        "instruction": "instruction",
        "scenario": "scenario",
        "mode": "mode",
        "episodes": "episodes",
        "max_seconds": "max_seconds",
        "seed": "seed",
        "stepped_delay": "stepped_delay",
        "intervene": "intervene",
        "budget_ticks": "budget_ticks",
        "taper_episodes": "taper_episodes",
        "curve_keys": "curve_keys",
        "learner_keys": "learner_keys",
        "record": "record",
    }
    name: str
    """Table name, e.g. "left_arm"."""
    model: str
    """Arm model, a key of `robotrl.hardware.models.ARMS` (e.g. "so101")."""
    driver: str
    """"lerobot" (a real arm through lerobot), "sim" (the MuJoCo arm) or "twin" (the MuJoCo
    arm behind simulated buses and cameras, through lerobot; `robotrl up` starts it)."""
    port: str | None = None
    """Serial device of the motor bus, e.g. "/dev/ttyACM0"; required for driver "lerobot"."""
    calibration_id: str | None = None
    """lerobot calibration id (TOML key `id`), e.g. "left_follower"."""
    roles: tuple[str, ...] = ()
    """What the robot is used for: "recorder" and/or one of "deploy_client", "actor"."""
    task: str | None = None
    """sim: the task (reach, pick_place, track); twin: its scene (the same names); real arm:
    the instruction. None: the command's default (reach; a real arm: the policy's
    instruction when it was trained on one)."""
    instruction: str | None = None
    """twin: what the policy is told; None: the scene's own instruction (reach, track; a
    pick_place scene names a new cube each time, so give it)."""
    scenario: str | None = None
    """sim: nominal, shifted or camera_lag; None: the command's default (shifted)."""
    mode: str | None = None
    """Execution mode (`robotrl deploy --mode`); None: the default (vlash)."""
    episodes: int | None = None
    """Episodes `robotrl up` runs on this arm before its role is done; None: the default (3)."""
    max_seconds: float | None = None
    """Longest episode, seconds; None: the default (20)."""
    seed: int | None = None
    """sim: seed of the first episode; None: 100000 x the robot's place among the started arms."""
    stepped_delay: int | None = None
    """sim: a simulated clock, each chunk taken in exactly this many ticks after its request
    (faster than real time); None: the wall clock."""
    intervene: str | None = None
    """actor: who may take over (none, scripted or gamepad: keyboard and leader take a
    terminal's keys, which `robotrl up` does not give its arms); None: scripted on a
    simulated arm, else none."""
    budget_ticks: int | None = None
    """intervene "scripted": the expert's intervention ticks in the arm's first episode;
    None: the default (150)."""
    taper_episodes: int | None = None
    """intervene "scripted": episodes over which that budget falls to 0; None: the default (100)."""
    curve_keys: str | None = None
    """Folder with this robot's client.key_secret and the server's server.key (CURVE)."""
    learner_keys: str | None = None
    """actor: folder with this robot's client.key_secret and the learner's server.key (CURVE)."""
    record: RecordEntry | None = None
    """recorder: its `[robots.NAME.record]` table (built into a `RecordEntry` here)."""

    def __post_init__(self) -> None:
        at = f"robots.{self.name}"
        _expect(f"{at}.model", self.model, str, "a string")
        if self.model not in ARMS:
            _fail(f"{at}.model", f"{self.model!r} is not a known arm model ({', '.join(sorted(ARMS))})")
        _expect(f"{at}.driver", self.driver, str, "a string")
        if self.driver not in DRIVERS:
            _fail(f"{at}.driver", f"{self.driver!r} is not a driver ({', '.join(DRIVERS)})")
        if self.driver == "twin" and self.model != "so101":
            _fail(f"{at}.model", f"the twin is an SO-101; driver 'twin' needs model 'so101', got {self.model!r}")
        if self.port is not None:
            _expect(f"{at}.port", self.port, str, "a device path")
            if self.driver != "lerobot":
                _fail(f"{at}.port", f"only used with driver 'lerobot'; remove it for a {self.driver} robot")
        elif self.driver == "lerobot":
            _fail(f"{at}.port", "missing; driver 'lerobot' needs the motor bus, e.g. port = \"/dev/ttyACM0\"")
        if self.calibration_id is not None:
            _expect(f"{at}.id", self.calibration_id, str, "a string")
        object.__setattr__(self, "roles", _roles(f"{at}.roles", self.roles, ROBOT_ROLES, "robot"))
        self._check_bringup(at)
        self._check_record(at)

    def _check_bringup(self, at: str) -> None:
        """The keys `robotrl up` reads: what the arm does and how it is run."""
        _optional(f"{at}.task", self.task, str, "a task name or an instruction")
        sim = self.driver == "sim"
        if self.driver in ("sim", "twin") and self.task is not None:
            from robotrl.sim.tasks import TASKS

            if self.task not in TASKS:
                _fail(f"{at}.task", f"{self.task!r} is not a simulated task ({', '.join(TASKS)})")
        _optional(f"{at}.instruction", self.instruction, str, "a string")
        if self.instruction is not None and self.driver != "twin":
            _fail(f"{at}.instruction", "only for driver 'twin' (a real arm's task is its instruction)")
        for key in ("scenario", "stepped_delay"):
            if getattr(self, key) is not None and not sim:
                _fail(f"{at}.{key}", "only for driver 'sim'")
        if self.scenario is not None:
            from robotrl.sim.scenario import SCENARIOS

            _expect(f"{at}.scenario", self.scenario, str, "a scenario name")
            if self.scenario not in SCENARIOS:
                _fail(f"{at}.scenario", f"{self.scenario!r} is not a scenario ({', '.join(SCENARIOS)})")
        for key, choices in (("mode", MODES), ("intervene", INTERVENERS)):
            value = getattr(self, key)
            _optional(f"{at}.{key}", value, str, "a string")
            if value is not None and value not in choices:
                _fail(f"{at}.{key}", f"{value!r} is not one of {', '.join(choices)}")
        if self.intervene == "scripted" and not sim:
            _fail(f"{at}.intervene", "'scripted' (the task's expert) is for driver 'sim'")
        if self.intervene in ("keyboard", "leader"):
            _fail(
                f"{at}.intervene",
                f"{self.intervene!r} takes the terminal's keys, and `robotrl up` runs its arms without a terminal: "
                f"use 'gamepad', or run `robotrl actor --intervene {self.intervene}` in a terminal",
            )
        if self.episodes is not None:
            _count(f"{at}.episodes", self.episodes, 1)
        if self.max_seconds is not None:
            _number(f"{at}.max_seconds", self.max_seconds)
        for key in ("seed", "stepped_delay", "budget_ticks", "taper_episodes"):
            if getattr(self, key) is not None:
                _count(f"{at}.{key}", getattr(self, key), 0)
        scripted = sim and self.intervene in (None, "scripted")
        for key in ("budget_ticks", "taper_episodes"):
            if getattr(self, key) is not None and not scripted:
                _fail(f"{at}.{key}", "only for intervene 'scripted' on driver 'sim'")
        for key in ("curve_keys", "learner_keys"):
            _optional(f"{at}.{key}", getattr(self, key), str, "a folder")

    def _check_record(self, at: str) -> None:
        """`[robots.NAME.record]` (its table made a `RecordEntry`) comes with the recorder role."""
        if self.record is not None and not isinstance(self.record, RecordEntry):
            record = _entry(RecordEntry, f"{at}.record", self.record, robot=self.name, driver=self.driver)
            object.__setattr__(self, "record", record)
        if "recorder" in self.roles and self.record is None:
            _fail(f"{at}.record", f'missing; the recorder role needs [{at}.record] with its dataset = "FOLDER"')
        if self.record is not None and "recorder" not in self.roles:
            _fail(f"{at}.record", "only for a robot with the 'recorder' role")

    @property
    def arm_role(self) -> str | None:
        """ "actor" or "deploy_client" (what `robotrl up` runs on this arm), or None."""
        return next((role for role in self.roles if role in ARM_ROLES), None)
