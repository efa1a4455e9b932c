"""The entries of a fleet file (`robotrl.fleet`) besides its robots (`robotrl.fleet.robots`):
`[cameras.NAME]`, `[gpus.NAME]`, `[serve]` and `[learn]`, each validating itself in
`__post_init__` and naming a bad field by its path in the file."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from robotrl.core.devices import DEFAULT_DEVICE
from robotrl.fleet.checks import (
    ALGORITHMS,
    GPU_ROLES,
    _count,
    _device,
    _expect,
    _fail,
    _optional,
    _port,
    _roles,
)


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
        "online_ratio": "online_ratio",
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
    online_ratio: float | None = None
    """Share of each batch drawn from the online pool, the rest from the demos (RLPD);
    None: the learner's default (0.5)."""
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
        if self.online_ratio is not None:
            ratio = self.online_ratio
            if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
                _fail("learn.online_ratio", f"expected a number in [0, 1], got {ratio!r}")
        _expect("learn.fsync", self.fsync, bool, "true or false")
