"""Fleet file: the robots, cameras and GPUs a team runs, and the role each one serves.

A fleet file is TOML with three kinds of table (see `examples/fleet.toml`):
`[robots.NAME]`, `[cameras.NAME]` and `[gpus.NAME]`. Every entry validates itself in
`__post_init__` and names the bad field by its path in the file, e.g.
`fleet.toml: robots.left_arm.roles[1]: 'pilot' is not a role (...)`.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tomllib
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import ClassVar, NoReturn

from robotrl.core.devices import FleetGpu
from robotrl.core.errors import ConfigError
from robotrl.hardware.models import ARMS

ROLES = ("recorder", "deploy_client", "inference_server", "learner")
ROBOT_ROLES = ("recorder", "deploy_client")
GPU_ROLES = ("inference_server", "learner")
DRIVERS = ("lerobot", "sim")
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
    """What the robot is used for: "recorder" and/or "deploy_client"."""

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

    def __post_init__(self) -> None:
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
            "roles": {role: list(names) for role, names in self.assignments().items()},
        }


SECTIONS = {"robots": RobotEntry, "cameras": CameraEntry, "gpus": GpuEntry}


def _entry(cls: type, section: str, name: str, table: object):
    """One `[section.name]` table as a `cls`; unknown and missing keys are errors."""
    at = f"{section}.{name}"
    if not isinstance(table, dict):
        _fail(at, f"expected a table [{at}], got {table!r}")
    keys = cls.TOML_KEYS
    for key in table:
        if key not in keys:
            _fail(f"{at}.{key}", f"unknown key (known: {', '.join(keys)})")
    for key, attr in keys.items():
        field = next(f for f in fields(cls) if f.name == attr)
        if field.default is MISSING and key not in table:
            _fail(f"{at}.{key}", "missing")
    return cls(name=name, **{keys[key]: value for key, value in table.items()})


def parse_fleet(data: dict, source: str = "fleet.toml") -> Fleet:
    """A `Fleet` from parsed TOML; every error starts with `source` and the field path."""
    try:
        for section in data:
            if section not in SECTIONS:
                _fail(section, f"unknown section (known: {', '.join(SECTIONS)})")
        parts = {}
        for section, cls in SECTIONS.items():
            tables = data.get(section, {})
            if not isinstance(tables, dict):
                _fail(section, f"expected tables like [{section}.NAME], got {tables!r}")
            parts[section] = tuple(_entry(cls, section, name, table) for name, table in tables.items())
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
