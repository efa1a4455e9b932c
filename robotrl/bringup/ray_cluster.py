"""`robotrl up --ray`: every role of a fleet as a Ray actor (`RayRole`), placed by Ray's
scheduler from the resources it asks for; nothing here chooses a machine.

Resources (`role_resources`): a robot with an arm's role (deploy client or actor) or the
recorder role has one actor, for all its roles, that asks for the custom resource
`robot_NAME` of its `[robots.NAME]` entry, which only the node that owns the arm declares
(`ray start --resources '{"robot_NAME": 1}'`), and one CPU. The server and the
learner ask for Ray GPUs when a `[gpus.*]` entry serves their role (`inference_server`,
`learner`): one GPU split evenly between the started roles it serves (two: 0.5 each), no
CPU; else one CPU. `[gpus.*].host` and `index` are not used: Ray picks the node and the
GPU (its `CUDA_VISIBLE_DEVICES` reaches the role's process, whose `auto` device takes it).

`place` joins the cluster, checks it has every resource asked for at all, creates the
actors and waits until each runs on its node; a `RayHandle` is then both the role's
`Spawner` (for the supervisor: each start is a subprocess on that node, a `RayProcess`)
and its `RoleHost` (for the plan: the node's IP, ports free there, its clock's offset). Ray is imported here
only, when called: it stays an optional extra (`pip install 'robotrl[ray]'`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from robotrl.bringup.process import SpawnError
from robotrl.bringup.ray_role import RayRole
from robotrl.core.errors import UserError

if TYPE_CHECKING:
    from robotrl.fleet import Fleet

log = logging.getLogger(__name__)

ROBOT_RESOURCE = "robot_{name}"
"""The Ray custom resource of `[robots.NAME]`, declared by the node that owns the arm."""
PLACE_TIMEOUT_S = 60.0
"""How long every actor may take to be placed and running, seconds."""
CONNECT_TIMEOUT_S = 5.0
"""How long the Ray head at --ray-address may take to accept a connection, seconds."""
CALL_TIMEOUT_S = 30.0
"""How long a call to a placed actor (start, ports) may take, seconds."""
LOST_EXIT_CODE = 255
"""The exit code a role's process gets when its actor is gone (its node lost), as ssh's
255 for a lost connection."""
FLEET_GPU_ROLE = {"learn": "learner", "serve": "inference_server"}
"""Role name in a bring-up -> its GPU role in a fleet file."""


@dataclass(frozen=True)
class RoleResources:
    """What one role's actor asks Ray for."""

    num_cpus: float
    num_gpus: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)
    """Custom resources, e.g. {"robot_left": 1.0}."""
    source: str = ""
    """The fleet entry that asks ("robots.left", "gpus.box"), for messages."""

    def describe(self) -> str:
        parts = [f"{self.num_cpus:g} CPU"] if self.num_cpus else []
        parts += [f"{self.num_gpus:g} GPU"] if self.num_gpus else []
        return ", ".join(parts + [f"{v:g} {k}" for k, v in self.resources.items()])


def robot_resource(name: str) -> str:
    """The Ray resource of robot `name`: "robot_" + its name in the fleet file."""
    return ROBOT_RESOURCE.format(name=name)


def role_resources(fleet: Fleet) -> dict[str, RoleResources]:
    """Each Ray actor `robotrl up` places (named as the roles of its plan: "learn", "serve",
    "robots.NAME", which also runs "robots.NAME.record") -> what it asks Ray for (see the
    module docstring)."""
    started = [name for name, present in (("learn", fleet.learn), ("serve", fleet.serve)) if present is not None]
    serving = {name: next((g for g in fleet.gpus if FLEET_GPU_ROLE[name] in g.roles), None) for name in started}
    wanted: dict[str, RoleResources] = {}
    for name, gpu in serving.items():
        if gpu is None:
            wanted[name] = RoleResources(1.0, source=name)
            continue
        sharing = sum(1 for other in serving.values() if other is gpu)
        wanted[name] = RoleResources(0.0, round(1.0 / sharing, 4), source=f"gpus.{gpu.name}")
    for robot in fleet.robots:
        if robot.arm_role is not None or robot.record is not None:
            resources = {robot_resource(robot.name): 1.0}
            wanted[f"robots.{robot.name}"] = RoleResources(1.0, 0.0, resources, f"robots.{robot.name}")
    return wanted


def import_ray() -> ModuleType:
    """The `ray` module, or a one-line `UserError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs Ray, which is not installed here: pip install 'ray>=2.40,<3'") from None
    return ray


def connect(address: str) -> None:
    """Join the Ray cluster at `address`: HOST:PORT of its head, or "auto" (the one
    `ray start` started on this machine, or $RAY_ADDRESS)."""
    ray = import_ray()
    start = "start one with `ray start --head` (and `ray start --address HEAD:PORT` on every other node)"
    if address != "auto":
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise UserError(f"--ray-address {address}: expected HOST:PORT of the Ray head, e.g. 10.0.0.5:6379")
        try:  # ray.init retries an unreachable address for ever
            socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            raise UserError(f"no Ray cluster at {address} ({exc.strerror or exc}): {start}") from None
    try:
        ray.init(address=address, namespace="robotrl-up", log_to_driver=False, logging_level=logging.WARNING)
    except ConnectionError as exc:
        raise UserError(f"no Ray cluster at {address} ({str(exc).splitlines()[0]}): {start}") from None


class RayProcess:
    """One start of a role's process on its actor's node (a `RoleProcess`). Its exit is
    an object Ray fills in when the process exits, so `poll` asks nobody."""

    def __init__(self, actor, pid: int) -> None:
        self.pid, self._actor = pid, actor
        self._exit = actor.wait.remote(pid)
        self._code: int | None = None

    def poll(self) -> int | None:
        if self._code is None:
            done, _ = import_ray().wait([self._exit], timeout=0)
            if done:
                self._code = self._result()
        return self._code

    def wait(self) -> int:
        if self._code is None:
            self._code = self._result()
        return self._code

    def send_signal(self, sig: int) -> None:
        self._actor.signal.remote(self.pid, int(sig))

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _result(self) -> int:
        ray = import_ray()
        try:
            return int(ray.get(self._exit))
        except ray.exceptions.RayError as exc:
            log.warning("process %d: its Ray actor is gone (%s)", self.pid, type(exc).__name__)
            return LOST_EXIT_CODE


class RayHandle:
    """One role's placed actor: its `Spawner` and its `RoleHost` (see the module docstring)."""

    def __init__(self, name: str, actor, node: dict) -> None:
        self.name, self.actor = name, actor
        self.node: dict = {key: node[key] for key in ("id", "ip", "hostname")}
        self.clock_offset_s = self._clock_offset_s()
        self.node["clock_offset_s"] = round(self.clock_offset_s, 4)

    @property
    def host(self) -> str:
        return self.node["ip"]

    def _clock_offset_s(self, samples: int = 3) -> float:
        """The node's `time.monotonic()` minus ours: its clock read halfway through the
        quickest of `samples` round trips."""
        trips = []
        for _ in range(samples):
            sent_s = time.monotonic()
            theirs_s = self._call("clock")
            back_s = time.monotonic()
            trips.append((back_s - sent_s, theirs_s - (sent_s + back_s) / 2))
        return min(trips)[1]

    def free_port(self, taken: set[int], pair: bool) -> int:
        return self._call("free_port", sorted(taken), pair)

    def bindable(self, port: int) -> str | None:
        return self._call("bindable", port)

    def spawn(self, argv: list[str], log: Path, start: int) -> RayProcess:
        return RayProcess(self.actor, self._call("start", argv, str(log.absolute()), start))

    def _call(self, method: str, *args):
        ray = import_ray()
        try:
            return ray.get(getattr(self.actor, method).remote(*args), timeout=CALL_TIMEOUT_S)
        except ray.exceptions.RayError as exc:
            where = f"Ray node {self.node['id'][:8]} ({self.node['ip']})"
            raise SpawnError(f"{self.name}: {method} on {where} failed: {_first_sentence(exc)}") from None


def place(fleet: Fleet, cwd: Path, timeout_s: float = PLACE_TIMEOUT_S) -> dict[str, RayHandle]:
    """An actor per role of `fleet`, each running on the node Ray placed it on, with the
    working directory `cwd` (which must be there too); a `UserError` names what is
    missing: a resource no node has, a role not placed within `timeout_s`, `cwd`."""
    ray = import_ray()
    wanted = role_resources(fleet)
    _check_cluster(wanted, ray.cluster_resources())
    actor_class = ray.remote(RayRole)
    actors = {
        name: actor_class.options(num_cpus=r.num_cpus, num_gpus=r.num_gpus, resources=r.resources).remote(
            name, str(cwd), os.environ.get("OMP_NUM_THREADS")
        )
        for name, r in wanted.items()
    }
    asked = {name: actor.node.remote() for name, actor in actors.items()}
    _, pending = ray.wait(list(asked.values()), num_returns=len(asked), timeout=timeout_s)
    try:
        if pending:
            late = [name for name, ref in asked.items() if ref in pending]
            asks = "; ".join(f"{name} {r.describe()}" for name, r in wanted.items())
            raise UserError(
                f"not placed by Ray within {timeout_s:.0f} s: {', '.join(late)}: no node with their resources has "
                f"enough of them free (`ray status` shows what is free; this fleet asks for: {asks})"
            )
        handles = {name: RayHandle(name, actors[name], _node(name, ref, cwd)) for name, ref in asked.items()}
    except BaseException:
        for actor in actors.values():
            ray.kill(actor)
        raise
    return handles


def release(handles: dict[str, RayHandle]) -> None:
    """Kill every actor (their processes get SIGTERM) and leave the cluster."""
    ray = import_ray()
    for handle in handles.values():
        try:
            ray.kill(handle.actor)
        except ray.exceptions.RayError:
            pass
    ray.shutdown()


def _node(name: str, ref, cwd: Path) -> dict:
    ray = import_ray()
    try:
        node = ray.get(ref)
    except ray.exceptions.RayError as exc:
        raise UserError(
            f"{name}: its Ray actor did not start (is robotrl installed in every node's Python?): "
            f"{_first_sentence(exc)}"
        ) from None
    if not node["cwd_here"]:
        raise UserError(
            f"{name}: Ray placed it on {node['hostname']} ({node['ip']}), which has no {cwd}: `robotrl up --ray` "
            "needs the working directory (run folder, checkpoints, keys) at the same path on every node"
        )
    return node


def _check_cluster(wanted: dict[str, RoleResources], cluster: dict[str, float]) -> None:
    """Every resource some role asks for is on some node of the cluster."""
    for name, r in wanted.items():
        for resource, amount in r.resources.items():
            if cluster.get(resource, 0.0) < amount:
                declare = json.dumps({resource: 1})
                raise UserError(
                    f"{r.source}: no node of the Ray cluster has the resource {resource}: on the computer "
                    f"with this arm run `ray start --address HEAD:PORT --resources '{declare}'`"
                )
        if r.num_gpus and cluster.get("GPU", 0.0) < r.num_gpus:
            raise UserError(
                f"{r.source}: {name} asks for {r.num_gpus:g} Ray GPU and the cluster has none: start the GPU "
                "machine's node with `ray start ... --num-gpus N`, or drop the role from the [gpus.*] entry"
            )


def _first_sentence(exc: BaseException) -> str:
    """The gist of a Ray error: the first sentence of its last line (Ray's are long)."""
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    return lines[-1].split(". ")[0]
