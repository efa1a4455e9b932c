"""Fleet file: the robots, cameras and GPUs a team runs, the role each one serves, and
what `robotrl up` needs to start them.

A fleet file is TOML with three kinds of named table (see `examples/fleet.toml`):
`[robots.NAME]`, `[cameras.NAME]` and `[gpus.NAME]`, and two optional single tables for
bring-up (`examples/fleet-sim.toml`): `[serve]` (the inference server: policy, port) and
`[learn]` (the learner: algorithm, folders, ports). Every entry validates itself in
`__post_init__` and names the bad field by its path in the file, e.g.
`fleet.toml: robots.left_arm.roles[1]: 'pilot' is not a role (...)`.

Paths in a fleet file (policy, folders, keys) are taken relative to the working
directory, as every `robotrl` path option is.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tomllib
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import ClassVar, NoReturn

from robotrl.core.devices import DEFAULT_DEVICE, FleetGpu, check_device
from robotrl.core.errors import ConfigError
from robotrl.hardware.models import ARMS
from robotrl.inference.executor import MODES
from robotrl.learn.actor import INTERVENERS

ROLES = ("recorder", "deploy_client", "actor", "inference_server", "learner")
ROBOT_ROLES = ("recorder", "deploy_client", "actor")
"""deploy_client: runs a policy on the arm through the server; actor: the same, streaming
every tick to the fleet's learner (`robotrl actor`); recorder: teleop data collection."""
ARM_ROLES = ("deploy_client", "actor")
"""The robot roles `robotrl up` starts (one process per robot)."""
GPU_ROLES = ("inference_server", "learner")
DRIVERS = ("lerobot", "sim")
ALGORITHMS = ("sac", "hil-flow", "dsrl")
"""The learners of `robotrl.learn.registry.ALGORITHMS` (named here so that reading a fleet
file does not import torch; a test keeps the two equal)."""
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
"""Host names that always mean this machine (besides its own name)."""


def _fail(path: str, message: str) -> NoReturn:
    raise ConfigError(f"{path}: {message}")


def _expect(path: str, value: object, kind: type, what: str) -> None:
    """Fail unless `value` is a `kind` (TOML booleans never pass as integers)."""
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        _fail(path, f"expected {what}, got {value!r}")


def _count(path: str, value: object, minimum: int) -> None:
    _expect(path, value, int, "an integer")
    if isinstance(value, int) and value < minimum:  # _expect raised for anything but an int
        _fail(path, f"must be at least {minimum}, got {value}")


def _number(path: str, value: object) -> None:
    """Fail unless `value` is a number above 0 (an integer or a float, not a boolean)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(path, f"expected a number, got {value!r}")
    if not value > 0:  # also refuses NaN
        _fail(path, f"must be above 0, got {value}")


def _port(path: str, value: object) -> None:
    _count(path, value, 1)
    if isinstance(value, int) and value > 65535:
        _fail(path, f"a TCP port is at most 65535, got {value}")


def _device(path: str, value: object) -> None:
    _expect(path, value, str, "a device (auto, cpu, cuda or cuda:N)")
    try:
        check_device(str(value))
    except ConfigError as exc:
        _fail(path, str(exc))


def _optional(path: str, value: object, kind: type, what: str) -> None:
    if value is not None:
        _expect(path, value, kind, what)
        if kind is str and not value:
            _fail(path, "must not be empty")


def _roles(path: str, value: object, allowed: tuple[str, ...], kind: str) -> tuple[str, ...]:
    """Checked roles as a tuple; `allowed` are the roles an entry of this `kind` can serve."""
    if not isinstance(value, (list, tuple)) or not value:
        _fail(path, f"expected a non-empty array of roles, e.g. {list(allowed)}")
    for i, role in enumerate(value):
        _expect(f"{path}[{i}]", role, str, "a role name")
        if role not in ROLES:
            _fail(f"{path}[{i}]", f"{role!r} is not a role ({', '.join(ROLES)})")
        if role not in allowed:
            _fail(f"{path}[{i}]", f"{role!r} is not a {kind} role ({', '.join(allowed)})")
        if role in value[:i]:
            _fail(f"{path}[{i}]", f"{role!r} is listed twice")
        if role in ARM_ROLES and any(other in ARM_ROLES for other in value[:i]):
            _fail(f"{path}[{i}]", "'deploy_client' and 'actor' both run the arm: give one of them")
    return tuple(value)


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
        "scenario": "scenario",
        "mode": "mode",
        "episodes": "episodes",
        "max_seconds": "max_seconds",
        "seed": "seed",
        "stepped_delay": "stepped_delay",
        "intervene": "intervene",
        "curve_keys": "curve_keys",
        "learner_keys": "learner_keys",
    }
    name: str
    """Table name, e.g. "left_arm"."""
    model: str
    """Arm model, a key of `robotrl.hardware.models.ARMS` (e.g. "so101")."""
    driver: str
    """"lerobot" (a real arm through lerobot) or "sim" (the MuJoCo arm)."""
    port: str | None = None
    """Serial device of the motor bus, e.g. "/dev/ttyACM0"; required for driver "lerobot"."""
    calibration_id: str | None = None
    """lerobot calibration id (TOML key `id`), e.g. "left_follower"."""
    roles: tuple[str, ...] = ()
    """What the robot is used for: "recorder" and/or one of "deploy_client", "actor"."""
    task: str | None = None
    """sim: the task (reach, pick_place, track); real arm: the instruction. None: the
    command's default (reach)."""
    scenario: str | None = None
    """sim: nominal or shifted physics; None: the command's default (shifted)."""
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
    """actor: who may take over (none, scripted, keyboard, gamepad, leader); None: scripted
    on a simulated arm, else none."""
    curve_keys: str | None = None
    """Folder with this robot's client.key_secret and the server's server.key (CURVE)."""
    learner_keys: str | None = None
    """actor: folder with this robot's client.key_secret and the learner's server.key (CURVE)."""

    def __post_init__(self) -> None:
        at = f"robots.{self.name}"
        _expect(f"{at}.model", self.model, str, "a string")
        if self.model not in ARMS:
            _fail(f"{at}.model", f"{self.model!r} is not a known arm model ({', '.join(sorted(ARMS))})")
        _expect(f"{at}.driver", self.driver, str, "a string")
        if self.driver not in DRIVERS:
            _fail(f"{at}.driver", f"{self.driver!r} is not a driver ({', '.join(DRIVERS)})")
        if self.port is not None:
            _expect(f"{at}.port", self.port, str, "a device path")
            if self.driver != "lerobot":
                _fail(f"{at}.port", "only used with driver 'lerobot'; remove it for a sim robot")
        elif self.driver == "lerobot":
            _fail(f"{at}.port", "missing; driver 'lerobot' needs the motor bus, e.g. port = \"/dev/ttyACM0\"")
        if self.calibration_id is not None:
            _expect(f"{at}.id", self.calibration_id, str, "a string")
        object.__setattr__(self, "roles", _roles(f"{at}.roles", self.roles, ROBOT_ROLES, "robot"))
        self._check_bringup(at)

    def _check_bringup(self, at: str) -> None:
        """The keys `robotrl up` reads: what the arm does and how it is run."""
        _optional(f"{at}.task", self.task, str, "a task name or an instruction")
        sim = self.driver == "sim"
        if sim and self.task is not None:
            from robotrl.sim.tasks import TASKS

            if self.task not in TASKS:
                _fail(f"{at}.task", f"{self.task!r} is not a simulated task ({', '.join(TASKS)})")
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
        if self.episodes is not None:
            _count(f"{at}.episodes", self.episodes, 1)
        if self.max_seconds is not None:
            _number(f"{at}.max_seconds", self.max_seconds)
        for key in ("seed", "stepped_delay"):
            if getattr(self, key) is not None:
                _count(f"{at}.{key}", getattr(self, key), 0)
        for key in ("curve_keys", "learner_keys"):
            _optional(f"{at}.{key}", getattr(self, key), str, "a folder")

    @property
    def arm_role(self) -> str | None:
        """ "actor" or "deploy_client" (what `robotrl up` runs on this arm), or None."""
        return next((role for role in self.roles if role in ARM_ROLES), None)


@dataclass(frozen=True)
class CameraEntry:
    """`[cameras.NAME]`: one camera, opened by OpenCV index or device path."""

    TOML_KEYS: ClassVar[dict[str, str]] = {
        "index": "index",
        "path": "path",
        "width": "width_px",
        "height": "height_px",
        "fps": "fps",
        "robot": "robot",
    }
    name: str
    """Table name, also the image key the robot reports, e.g. "front"."""
    index: int | None = None
    """OpenCV capture index (N of /dev/videoN); give this or `path`."""
    path: str | None = None
    """Device path, e.g. "/dev/video0" or a /dev/v4l/by-id/ link; give this or `index`."""
    width_px: int = 640
    """Capture width (TOML key `width`), pixels."""
    height_px: int = 480
    """Capture height (TOML key `height`), pixels."""
    fps: int = 30
    """Capture rate, frames per second."""
    robot: str | None = None
    """Name of the `[robots.NAME]` entry this camera belongs to."""

    def __post_init__(self) -> None:
        at = f"cameras.{self.name}"
        if self.index is None and self.path is None:
            _fail(at, 'needs index (e.g. index = 0) or path (e.g. path = "/dev/video0")')
        if self.index is not None and self.path is not None:
            _fail(f"{at}.path", "give index or path, not both")
        if self.index is not None:
            _count(f"{at}.index", self.index, 0)
        if self.path is not None:
            _expect(f"{at}.path", self.path, str, "a device path")
        for key, value in (("width", self.width_px), ("height", self.height_px), ("fps", self.fps)):
            _count(f"{at}.{key}", value, 1)
        if self.robot is not None:
            _expect(f"{at}.robot", self.robot, str, "a robot name")

    @property
    def device(self) -> str:
        """The path, or "index N"."""
        return self.path if self.path is not None else f"index {self.index}"


@dataclass(frozen=True)
class GpuEntry:
    """`[gpus.NAME]`: one GPU on some host."""

    TOML_KEYS: ClassVar[dict[str, str]] = {"index": "index", "host": "host", "roles": "roles"}
    name: str
    """Table name, e.g. "box"."""
    index: int = 0
    """CUDA device index on its host."""
    host: str = "localhost"
    """Machine that owns the GPU, as the robot computers reach it."""
    roles: tuple[str, ...] = ()
    """What the GPU runs: "inference_server" and/or "learner"."""

    def __post_init__(self) -> None:
        at = f"gpus.{self.name}"
        _count(f"{at}.index", self.index, 0)
        _expect(f"{at}.host", self.host, str, "a host name")
        if not self.host:
            _fail(f"{at}.host", "must not be empty")
        object.__setattr__(self, "roles", _roles(f"{at}.roles", self.roles, GPU_ROLES, "GPU"))


@dataclass(frozen=True)
class ServeEntry:
    """`[serve]`: the inference server `robotrl up` starts (on the fleet's inference_server
    GPU on this machine, else as `device` says)."""

    TOML_KEYS: ClassVar[dict[str, str]] = {
        "policy": "policy",
        "port": "port",
        "device": "device",
        "curve_keys": "curve_keys",
        "learner_keys": "learner_keys",
    }
    policy: str
    """Checkpoint folder served (robotrl train output or a lerobot pretrained_model folder);
    with a `[learn]` section, the policy the learner starts from: the server then serves
    the learner's copy and takes its weights."""
    port: int | None = None
    """TCP port the server binds on loopback; None: a free port."""
    device: str = DEFAULT_DEVICE
    """auto (the fleet's inference_server GPU here, else the freest GPU, else the CPU), cpu,
    cuda or cuda:N."""
    curve_keys: str | None = None
    """Folder with the server's server.key_secret and allowed_clients/ (CURVE)."""
    learner_keys: str | None = None
    """Folder with this server's client.key_secret and the learner's server.key (CURVE on
    the weights channel)."""

    def __post_init__(self) -> None:
        _expect("serve.policy", self.policy, str, "a checkpoint folder")
        if not self.policy:
            _fail("serve.policy", "must not be empty")
        if self.port is not None:
            _port("serve.port", self.port)
        _device("serve.device", self.device)
        for key in ("curve_keys", "learner_keys"):
            _optional(f"serve.{key}", getattr(self, key), str, "a folder")


@dataclass(frozen=True)
class LearnEntry:
    """`[learn]`: the online learner `robotrl up` starts; the fleet's actors stream to it."""

    TOML_KEYS: ClassVar[dict[str, str]] = {
        "algo": "algo",
        "preset": "preset",
        "overrides": "overrides",
        "demo_datasets": "demo_datasets",
        "buffer": "buffer",
        "out": "out",
        "transitions_port": "transitions_port",
        "weights_port": "weights_port",
        "device": "device",
        "min_transitions": "min_transitions",
        "publish_every": "publish_every",
        "checkpoint_every": "checkpoint_every",
        "fsync": "fsync",
        "curve_keys": "curve_keys",
    }
    algo: str = "hil-flow"
    """sac (RLPD / HIL-SERL), hil-flow (weighted flow fine-tuning) or dsrl (SAC over the noise)."""
    preset: str = "default"
    """The algorithm's preset (`robotrl learner --preset`)."""
    overrides: dict = field(default_factory=dict)
    """Preset fields replaced, e.g. {batch_size = 128} (`robotrl learner --set`)."""
    demo_datasets: tuple[str, ...] = ()
    """LeRobotDataset folders loaded as demo transitions."""
    buffer: str | None = None
    """Online buffer folder; None: RUN/buffer of `robotrl up --out RUN`."""
    out: str | None = None
    """Learner run folder (checkpoint/, served/, updates.csv); None: RUN/learner."""
    transitions_port: int | None = None
    """TCP port of the transitions socket on loopback; None: a free port."""
    weights_port: int | None = None
    """TCP port of the weights PUB socket (the latest-weights socket takes the next one);
    None: two free ports."""
    device: str = DEFAULT_DEVICE
    """auto (the fleet's learner GPU here, else the freest GPU, else the CPU), cpu, cuda or cuda:N."""
    min_transitions: int | None = None
    """Samplable transitions before the first update; None: the learner's default (500)."""
    publish_every: int | None = None
    """Updates between weight versions; None: the learner's default (20)."""
    checkpoint_every: int | None = None
    """Updates between checkpoints; None: the learner's default (200)."""
    fsync: bool = True
    """fsync the buffer log (crash-safe); false is faster."""
    curve_keys: str | None = None
    """Folder with the learner's server.key_secret and allowed_clients/ (CURVE)."""

    def __post_init__(self) -> None:
        _expect("learn.algo", self.algo, str, "an algorithm name")
        if self.algo not in ALGORITHMS:
            _fail("learn.algo", f"{self.algo!r} is not an algorithm ({', '.join(ALGORITHMS)})")
        _expect("learn.preset", self.preset, str, "a preset name")
        _expect("learn.overrides", self.overrides, dict, "a table, e.g. {batch_size = 128}")
        if not isinstance(self.demo_datasets, (list, tuple)):
            _fail("learn.demo_datasets", f"expected an array of folders, got {self.demo_datasets!r}")
        for i, folder in enumerate(self.demo_datasets):
            _optional(f"learn.demo_datasets[{i}]", folder, str, "a folder")
        object.__setattr__(self, "demo_datasets", tuple(self.demo_datasets))
        for key in ("buffer", "out", "curve_keys"):
            _optional(f"learn.{key}", getattr(self, key), str, "a folder")
        for key in ("transitions_port", "weights_port"):
            if getattr(self, key) is not None:
                _port(f"learn.{key}", getattr(self, key))
        if self.weights_port == 65535:
            _fail("learn.weights_port", "the latest-weights socket takes the next port: at most 65534")
        _device("learn.device", self.device)
        for key in ("min_transitions", "publish_every", "checkpoint_every"):
            if getattr(self, key) is not None:
                _count(f"learn.{key}", getattr(self, key), 1)
        _expect("learn.fsync", self.fsync, bool, "true or false")


@dataclass(frozen=True)
class Fleet:
    """A whole fleet file; checks what spans entries (links, shared devices)."""

    source: str
    """Where the fleet came from (the file path), used in messages."""
    robots: tuple[RobotEntry, ...] = ()
    """`[robots.NAME]` entries in file order."""
    cameras: tuple[CameraEntry, ...] = ()
    """`[cameras.NAME]` entries in file order."""
    gpus: tuple[GpuEntry, ...] = ()
    """`[gpus.NAME]` entries in file order."""
    serve: ServeEntry | None = None
    """`[serve]`, the inference server of `robotrl up`, or None."""
    learn: LearnEntry | None = None
    """`[learn]`, the learner of `robotrl up`, or None."""

    def __post_init__(self) -> None:
        self._check_devices()
        self._check_bringup()

    def _check_devices(self) -> None:
        owners: dict[tuple, str] = {}

        def claim(path: str, device: tuple, label: str) -> None:
            """Fail if another entry already declared `device`."""
            if device in owners:
                _fail(path, f"{label} is already used by {owners[device]}")
            owners[device] = path.rsplit(".", 1)[0]

        for robot in self.robots:
            if robot.port is not None:
                claim(f"robots.{robot.name}.port", ("port", robot.port), repr(robot.port))
        names = [robot.name for robot in self.robots]
        for camera in self.cameras:
            key = "path" if camera.path is not None else "index"
            claim(f"cameras.{camera.name}.{key}", ("camera", camera.device), camera.device)
            if camera.robot is not None and camera.robot not in names:
                _fail(
                    f"cameras.{camera.name}.robot",
                    f"{camera.robot!r} is not a robot in this file ({', '.join(names) or 'none declared'})",
                )
        for gpu in self.gpus:
            claim(f"gpus.{gpu.name}.index", ("gpu", gpu.host, gpu.index), f"GPU {gpu.index} of {gpu.host}")

    def _check_bringup(self) -> None:
        """Actors need the learner, the learner needs the server, and no port twice."""
        for robot in self.robots:
            if "actor" in robot.roles and self.learn is None:
                i = robot.roles.index("actor")
                _fail(f"robots.{robot.name}.roles[{i}]", "'actor' streams to the learner: add a [learn] section")
            if robot.learner_keys is not None and robot.arm_role != "actor":
                _fail(f"robots.{robot.name}.learner_keys", "only for a robot with the 'actor' role")
        if self.learn is not None and self.serve is None:
            _fail("learn", "needs a [serve] section: its policy is what the learner starts from and serves")
        ports: dict[int, str] = {}
        wanted = [("serve.port", self.serve.port if self.serve else None)]
        if self.learn is not None:
            weights = self.learn.weights_port
            wanted += [("learn.transitions_port", self.learn.transitions_port), ("learn.weights_port", weights)]
            wanted += [("learn.weights_port", None if weights is None else weights + 1)]
        for path, port in wanted:
            if port is None:
                continue
            if port in ports:
                _fail(path, f"port {port} is already taken by {ports[port]} (the weights take two: P and P + 1)")
            ports[port] = path

    def arm(self, name: str) -> dict[str, str | None]:
        """Robot `name` as the arm options of `record`/`deploy`/`actor`: robot, port,
        robot_id, and cameras (its `[cameras.*]` as lerobot's `--robot.cameras` JSON map)."""
        robot = next((r for r in self.robots if r.name == name), None)
        if robot is None:
            known = ", ".join(r.name for r in self.robots) or "none declared"
            raise ConfigError(f"{self.source}: no robot {name!r} (robots: {known})")
        cameras = {
            c.name: {
                "type": "opencv",
                "index_or_path": c.index if c.index is not None else c.path,
                "width": c.width_px,
                "height": c.height_px,
                "fps": c.fps,
            }
            for c in self.cameras
            if c.robot == name
        }
        real = robot.driver == "lerobot"
        return {
            "robot": robot.model if real else "sim",
            "port": robot.port,
            "robot_id": robot.calibration_id,
            "cameras": json.dumps(cameras) if real and cameras else None,
        }

    def assignments(self) -> dict[str, tuple[str, ...]]:
        """Each role -> the entries serving it, as "robots.NAME" / "gpus.NAME"."""
        entries = [(f"robots.{r.name}", r.roles) for r in self.robots]
        entries += [(f"gpus.{g.name}", g.roles) for g in self.gpus]
        return {role: tuple(name for name, roles in entries if role in roles) for role in ROLES}

    def local_gpu(self, role: str) -> FleetGpu | None:
        """The first `[gpus.*]` entry serving `role` on this machine (host localhost or this
        machine's name), or None: what `--device auto` takes for that role."""
        if role not in GPU_ROLES:
            raise ConfigError(f"{role!r} is not a GPU role ({', '.join(GPU_ROLES)})")
        here = {*LOCAL_HOSTS, socket.gethostname(), socket.getfqdn()}
        for gpu in self.gpus:
            if role in gpu.roles and gpu.host in here:
                return FleetGpu(f"gpus.{gpu.name}", gpu.index, role)
        return None

    def to_dict(self) -> dict:
        """Plain JSON-able form, with the role assignments."""
        return {
            "source": self.source,
            "robots": [asdict(r) for r in self.robots],
            "cameras": [asdict(c) for c in self.cameras],
            "gpus": [asdict(g) for g in self.gpus],
            "serve": None if self.serve is None else asdict(self.serve),
            "learn": None if self.learn is None else asdict(self.learn),
            "roles": {role: list(names) for role, names in self.assignments().items()},
        }


SECTIONS = {"robots": RobotEntry, "cameras": CameraEntry, "gpus": GpuEntry}
"""Sections of named tables, `[section.NAME]`."""
SINGLE_SECTIONS = {"serve": ServeEntry, "learn": LearnEntry}
"""Sections that are one table, `[section]`."""


def _entry(cls: type, at: str, table: object, **extra: object):
    """The table at path `at` as a `cls`; unknown and missing keys are errors."""
    if not isinstance(table, dict):
        _fail(at, f"expected a table [{at}], got {table!r}")
    keys = cls.TOML_KEYS
    for key in table:
        if key not in keys:
            _fail(f"{at}.{key}", f"unknown key (known: {', '.join(keys)})")
    for key, attr in keys.items():
        spec = next(f for f in fields(cls) if f.name == attr)
        if spec.default is MISSING and spec.default_factory is MISSING and key not in table:
            _fail(f"{at}.{key}", "missing")
    return cls(**extra, **{keys[key]: value for key, value in table.items()})


def parse_fleet(data: dict, source: str = "fleet.toml") -> Fleet:
    """A `Fleet` from parsed TOML; every error starts with `source` and the field path."""
    try:
        for section in data:
            if section not in SECTIONS and section not in SINGLE_SECTIONS:
                known = ", ".join([*SECTIONS, *SINGLE_SECTIONS])
                _fail(section, f"unknown section (known: {known})")
        parts: dict = {}
        for section, cls in SECTIONS.items():
            tables = data.get(section, {})
            if not isinstance(tables, dict):
                _fail(section, f"expected tables like [{section}.NAME], got {tables!r}")
            parts[section] = tuple(_entry(cls, f"{section}.{name}", table, name=name) for name, table in tables.items())
        for section, cls in SINGLE_SECTIONS.items():
            if section in data:
                parts[section] = _entry(cls, section, data[section])
        return Fleet(source, **parts)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def load_fleet(path: str | os.PathLike) -> Fleet:
    """Read and validate a fleet file; `ConfigError` if unreadable, not TOML or invalid."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read fleet file ({exc.strerror or exc})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_fleet(data, str(path))


def check_devices(fleet: Fleet) -> list[str]:
    """What this machine lacks to serve `fleet`, one line per problem ([] when all is there).

    Checks that each declared serial port exists and is readable and writable, and that
    each declared camera's device node exists (Linux). Cameras are not opened.
    """
    problems = []
    for robot in fleet.robots:
        if robot.port is None:
            continue
        at = f"robots.{robot.name}.port"
        if not os.path.exists(robot.port):
            from robotrl.hardware.discovery import find_serial_ports

            found = ", ".join(port.device for port in find_serial_ports()) or "none"
            problems.append(
                f"{at}: serial port {robot.port} does not exist; is the arm's bus adapter "
                f"plugged in and powered? (serial ports here: {found})"
            )
        elif not os.access(robot.port, os.R_OK | os.W_OK):
            problems.append(
                f"{at}: no read/write permission on {robot.port}; add your user to the 'dialout' group and log in again"
            )
    for camera in fleet.cameras:
        node = camera.path
        if node is None and sys.platform.startswith("linux"):
            node = f"/dev/video{camera.index}"
        if node is not None and not os.path.exists(node):
            key = "path" if camera.path is not None else "index"
            problems.append(f"cameras.{camera.name}.{key}: camera device {node} does not exist")
    return problems
