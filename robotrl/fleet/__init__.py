"""Fleet file: the robots, cameras and GPUs a team runs, the role each one serves, and
what `robotrl up` needs to start them.

A fleet file is TOML with three kinds of named table (see `examples/fleet.toml`):
`[robots.NAME]`, `[cameras.NAME]` and `[gpus.NAME]`, and two optional single tables for
bring-up (`examples/fleet-sim.toml`): `[serve]` (the inference server: policy, port) and
`[learn]` (the learner: algorithm, folders, ports); a robot with the recorder role has
its `[robots.NAME.record]` (the dataset, the teleop). Every entry validates itself in
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
from dataclasses import asdict, dataclass
from pathlib import Path

from robotrl.core.devices import FleetGpu
from robotrl.core.errors import ConfigError
from robotrl.fleet.checks import (
    ALGORITHMS,
    ARM_ROLES,
    DRIVERS,
    GPU_ROLES,
    LOCAL_HOSTS,
    ROBOT_ROLES,
    ROLES,
    _entry,
    _fail,
)
from robotrl.fleet.entries import CameraEntry, GpuEntry, LearnEntry, ServeEntry
from robotrl.fleet.robots import RecordEntry, RobotEntry

__all__ = [
    "ALGORITHMS",
    "ARM_ROLES",
    "DRIVERS",
    "GPU_ROLES",
    "ROBOT_ROLES",
    "ROLES",
    "CameraEntry",
    "Fleet",
    "GpuEntry",
    "LearnEntry",
    "RecordEntry",
    "RobotEntry",
    "ServeEntry",
    "check_devices",
    "load_fleet",
    "parse_fleet",
]


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
            if robot.record is not None and robot.record.leader_port is not None:
                port = robot.record.leader_port
                claim(f"robots.{robot.name}.record.leader_port", ("port", port), repr(port))
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
        """Actors need the learner, the learner needs the server, no port twice, and no
        dataset recorded by two robots."""
        datasets: dict[str, str] = {}
        for robot in self.robots:
            if "actor" in robot.roles and self.learn is None:
                i = robot.roles.index("actor")
                _fail(f"robots.{robot.name}.roles[{i}]", "'actor' streams to the learner: add a [learn] section")
            if robot.learner_keys is not None and robot.arm_role != "actor":
                _fail(f"robots.{robot.name}.learner_keys", "only for a robot with the 'actor' role")
            if robot.record is not None:
                folder = os.path.normpath(robot.record.dataset)
                if folder in datasets:
                    _fail(f"robots.{robot.name}.record.dataset", f"{folder} is also recorded by {datasets[folder]}")
                datasets[folder] = f"robots.{robot.name}"
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
        if robot.driver == "twin":
            raise ConfigError(
                f"{self.source}: robots.{name}: a twin's buses exist only while it runs: `robotrl up` starts it, "
                "or start `robotrl twin` and give its follower bus as --port"
            )
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
