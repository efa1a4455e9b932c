"""The entries of a fleet file (`robotrl.fleet`): `[robots.NAME]`, `[cameras.NAME]`,
`[gpus.NAME]`, `[serve]` and `[learn]`, each validating itself in `__post_init__` and
naming a bad field by its path in the file, and the field checks they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, NoReturn

from robotrl.core.devices import DEFAULT_DEVICE, check_device
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
