"""From a fleet file to the roles `robotrl up` runs on this machine: the learner of
`[learn]`, the inference server of `[serve]` and one process per arm whose roles include
deploy_client or actor, each with its frozen config (`LearnerJob`, `ServeJob`,
`ActorJob`) handed over as a JSON file, never as a rebuilt command line.

Wiring: every port the file leaves out is a free loopback port chosen once, so a
restarted role binds (or reaches) the same endpoint and its peers reconnect by
themselves. With a learner, the server serves the learner's `served/` copy of
`[serve] policy` and takes its weights; actors stream their transitions to it. Keys
folders go to the roles that use them. Devices: `auto` becomes the fleet's GPU for the
role on this machine (`cuda:N`), else stays `auto` for the child to resolve.

Under `robotrl up --ray` the caller passes `hosts`: each role's `RoleHost`, the Ray node
its actor was placed on. The server's and the learner's endpoints are then
`tcp://NODE_IP:PORT` (bound there and reached from every node) with ports free on that
node; an arm's beacon is read on its node's clock; `[gpus.*].host` is not checked (Ray
placed the roles) and `auto` devices stay `auto` (the child takes the GPU Ray gave its
actor).

Run folder layout: `learn.json`, `learn.log`, `learner/` (the learner's run) and
`buffer/`; `serve.json`, `serve.log`; `robots/NAME/` with `actor.json`, `actor.log`,
`beacon.json` and `episodes.K.csv` (one per start K: a restarted arm runs the episodes
left, from the seed after the last one ended); `status.json`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from robotrl.bringup.host import LocalHost, NodeClockProbe, RoleHost
from robotrl.bringup.probes import BeaconProbe, HealthProbe, HelloProbe, Probe, csv_rows, learner_report
from robotrl.bringup.supervisor import RoleSpec
from robotrl.core.config import save_config
from robotrl.core.errors import ConfigError, UserError
from robotrl.fleet import Fleet, RobotEntry
from robotrl.inference.arm import ArmConfig
from robotrl.inference.executor import ExecutorConfig
from robotrl.learn.actor import ACTOR_SEED_STRIDE, ActorJob, InterventionConfig
from robotrl.learn.launch import actor_command, learner_command, serve_command
from robotrl.wire.keys import client_keys

if TYPE_CHECKING:
    from robotrl.inference.server import ServeJob
    from robotrl.learn.job import LearnerJob

STATUS_FILE = "status.json"


@dataclass(frozen=True)
class BringUp:
    """What `robotrl up` runs: roles in start order, the endpoints, and the robots the
    file declares that it does not start (one line each)."""

    roles: list[RoleSpec]
    endpoints: dict[str, str]
    skipped: list[str]


@dataclass(frozen=True)
class ServerLaunch:
    """`robotrl serve --config` of the same `ServeJob` on every start."""

    job: ServeJob
    file: Path

    def command(self, start: int) -> list[str]:
        return serve_command(save_config(self.job, self.file))


@dataclass(frozen=True)
class LearnerLaunch:
    """`robotrl learner --config`; every restart resumes the run (checkpoint + buffer log).
    The served checkpoint is removed first, so the role is up only once this start wrote it."""

    job: LearnerJob
    file: Path

    def command(self, start: int) -> list[str]:
        from robotrl.learn.job import SERVED

        job = self.job if start == 0 else replace(self.job, resume=True)
        (Path(job.loop.out) / SERVED / "config.json").unlink(missing_ok=True)
        return learner_command(save_config(job, self.file))


@dataclass(frozen=True)
class ArmLaunch:
    """`robotrl actor --config` of one arm: start K runs the episodes not yet ended in
    the earlier starts' logs, from the seed after them, logging to `episodes.K.csv`."""

    job: ActorJob
    folder: Path

    def logs(self) -> list[Path]:
        """The episode logs of every start so far, in start order."""
        found = self.folder.glob("episodes.*.csv")
        return sorted(found, key=lambda p: int(p.suffixes[0][1:]) if p.suffixes[0][1:].isdigit() else -1)

    def command(self, start: int) -> list[str] | None:
        ended = sum(len(csv_rows(path)) for path in self.logs())
        if ended >= self.job.episodes:
            return None
        job = replace(
            self.job,
            episodes=self.job.episodes - ended,
            seed=self.job.seed + ended,
            log=self.folder / f"episodes.{start}.csv",
        )
        if job.beacon is not None:
            job.beacon.unlink(missing_ok=True)  # the role is up once this start writes it
        return actor_command(save_config(job, self.folder / "actor.json"))


def plan_bringup(
    fleet: Fleet, run: Path, *, resume: bool = False, hosts: Mapping[str, RoleHost] | None = None
) -> BringUp:
    """The roles of `fleet` with their configs, run folder `run`; `resume` continues the
    run there (the learner resumes, the arms run the episodes left). `hosts`: where each
    role runs, by role name (their Ray nodes under `--ray`); None: all here, on loopback.
    A fleet this cannot run (a GPU role on another host without `hosts`, a missing
    checkpoint or key, a port in use) is a `ConfigError` naming the field."""
    arms = [robot for robot in fleet.robots if robot.arm_role is not None]
    skipped = [
        f"robots.{r.name}: roles {', '.join(r.roles)}: not started (record with `robotrl record --fleet ...`)"
        for r in fleet.robots
        if r.arm_role is None
    ]
    if fleet.serve is None:
        needs = f"robots.{arms[0].name} is a {arms[0].arm_role}" if arms else "there is nothing to start"
        raise ConfigError(f"{fleet.source}: serve: missing; {needs}: add a [serve] section with the policy")
    if (run / STATUS_FILE).exists() and not resume:
        raise UserError(f"{run} already holds a bring-up; add --resume to continue it or choose another --out")
    here = hosts is None
    if here:
        _check_hosts(fleet)
    _check_keys(fleet)
    where = hosts or {}
    endpoints = _endpoints(fleet, where)
    roles: list[RoleSpec] = []
    if fleet.learn is not None:
        roles.append(_learner_role(fleet, run, endpoints, resume, here))
    roles.append(_server_role(fleet, run, endpoints, here))
    names: dict[str, str] = {}
    for k, robot in enumerate(arms):
        role = _arm_role(fleet, robot, k, run, endpoints, where.get(f"robots.{robot.name}"))
        wire_name = role.info["robot_id"]
        if wire_name in names:
            raise ConfigError(f"{fleet.source}: robots.{robot.name}.id: {wire_name!r} is also {names[wire_name]}")
        names[wire_name] = f"robots.{robot.name}"
        roles.append(role)
    return BringUp(roles, endpoints, skipped)


def _fail(fleet: Fleet, path: str, message: str) -> ConfigError:
    return ConfigError(f"{fleet.source}: {path}: {message}")


def _check_hosts(fleet: Fleet) -> None:
    """Without Ray, every GPU role `up` starts must be on this machine."""
    started = ["inference_server"] + (["learner"] if fleet.learn is not None else [])
    for role in started:
        if fleet.local_gpu(role) is None:
            for gpu in fleet.gpus:
                if role in gpu.roles:
                    raise _fail(
                        fleet,
                        f"gpus.{gpu.name}.host",
                        f"{gpu.host!r} is another machine; `robotrl up` starts every role on this one: "
                        "run it there, give the role a GPU here, or place the roles with `robotrl up --ray`",
                    )


def _check_keys(fleet: Fleet) -> None:
    """Keys folders hold their files, and both ends of an encrypted channel have keys."""
    assert fleet.serve is not None
    folders = [("serve.curve_keys", fleet.serve.curve_keys, ("server.key_secret", "allowed_clients"))]
    folders += [("serve.learner_keys", fleet.serve.learner_keys, ("client.key_secret", "server.key"))]
    if fleet.learn is not None:
        folders += [("learn.curve_keys", fleet.learn.curve_keys, ("server.key_secret", "allowed_clients"))]
    for robot in fleet.robots:
        for key in ("curve_keys", "learner_keys"):
            folders += [(f"robots.{robot.name}.{key}", getattr(robot, key), ("client.key_secret", "server.key"))]
    for path, folder, files in folders:
        if folder is None:
            continue
        for name in files:
            if not (Path(folder) / name).exists():
                raise _fail(fleet, path, f"{Path(folder) / name} does not exist (make keys with `robotrl keys`)")
    learner_curve = fleet.learn is not None and fleet.learn.curve_keys is not None
    for robot in fleet.robots:
        if robot.arm_role is None:
            continue
        if fleet.serve.curve_keys is not None and robot.curve_keys is None:
            raise _fail(fleet, f"robots.{robot.name}.curve_keys", "missing; the server (serve.curve_keys) needs them")
        if learner_curve and robot.arm_role == "actor" and robot.learner_keys is None:
            raise _fail(
                fleet, f"robots.{robot.name}.learner_keys", "missing; the learner (learn.curve_keys) needs them"
            )
    if learner_curve and fleet.serve.learner_keys is None:
        raise _fail(fleet, "serve.learner_keys", "missing; the learner (learn.curve_keys) needs them")


def _endpoints(fleet: Fleet, hosts: Mapping[str, RoleHost]) -> dict[str, str]:
    """The endpoints on their roles' `hosts` (default: loopback here): the file's ports
    (checked free there now), else free ones."""
    assert fleet.serve is not None
    wanted = [("serve", "serve.port", fleet.serve.port, hosts.get("serve"))]
    if fleet.learn is not None:
        learner = hosts.get("learn")
        wanted += [("transitions", "learn.transitions_port", fleet.learn.transitions_port, learner)]
        wanted += [("weights", "learn.weights_port", fleet.learn.weights_port, learner)]
    given = {port for _, _, port, _ in wanted if port is not None}
    taken = given | {port + 1 for name, _, port, _ in wanted if name == "weights" and port is not None}
    endpoints = {}
    for name, path, port, host in wanted:
        host = host or LocalHost()
        pair = name == "weights"
        if port is None:
            port = host.free_port(taken, pair)
        for p in (port, port + 1) if pair else (port,):
            problem = host.bindable(p)
            if problem is not None:
                raise _fail(fleet, path, problem)
        taken |= {port, port + 1} if pair else {port}
        endpoints[name] = f"tcp://{host.host}:{port}"
    return endpoints


def _device(fleet: Fleet, requested: str, role: str, here: bool) -> str:
    """`requested`, or for auto the fleet's GPU for `role` here ("cuda:N"), else auto
    (always auto on a Ray node: the child takes the GPU Ray gave its actor)."""
    if requested != "auto" or not here:
        return requested
    gpu = fleet.local_gpu(role)
    return "auto" if gpu is None else f"cuda:{gpu.index}"


def _learner_role(fleet: Fleet, run: Path, endpoints: dict[str, str], resume: bool, here: bool) -> RoleSpec:
    job = _learner_job(fleet, run, endpoints, resume, here)
    out = Path(job.loop.out)
    actor = next((r for r in fleet.robots if r.arm_role == "actor" and r.learner_keys), None)
    probe = HelloProbe(
        endpoints["transitions"],
        curve=None if actor is None or actor.learner_keys is None else client_keys(Path(actor.learner_keys)),
        ready=[out / "served" / "config.json"],
        report=partial(learner_report, out),
    )
    info = {"endpoints": {"transitions": endpoints["transitions"], "weights": endpoints["weights"]}, "out": str(out)}
    return RoleSpec("learn", "learner", LearnerLaunch(job, run / "learn.json"), probe, run / "learn.log", info=info)


def _learner_job(fleet: Fleet, run: Path, endpoints: dict[str, str], resume: bool, here: bool) -> LearnerJob:
    from robotrl.learn.job import LearnerJob
    from robotrl.learn.learner import LearnerConfig, run_exists

    learn, serve = fleet.learn, fleet.serve
    assert learn is not None and serve is not None
    _check_preset(fleet)
    out = Path(learn.out) if learn.out else run / "learner"
    if run_exists(out) and not resume:
        raise UserError(f"{out} holds a learner run (learn.out): add --resume to continue it or choose another --out")
    for i, folder in enumerate(learn.demo_datasets):
        if not Path(folder).is_dir():
            raise _fail(fleet, f"learn.demo_datasets[{i}]", f"{folder} is not a folder (a LeRobotDataset)")
    cadence = {k: getattr(learn, k) for k in ("min_transitions", "publish_every", "checkpoint_every")}
    loop = LearnerConfig(
        out=out, transitions_endpoint=endpoints["transitions"], **{k: v for k, v in cadence.items() if v}
    )
    return LearnerJob(
        algo=learn.algo,
        buffer=Path(learn.buffer) if learn.buffer else run / "buffer",
        loop=loop,
        preset=learn.preset,
        overrides=dict(learn.overrides),
        policy=_policy(fleet),
        demo_datasets=tuple(Path(d) for d in learn.demo_datasets),
        weights=endpoints["weights"],
        resume=resume,
        fsync=learn.fsync,
        device=_device(fleet, learn.device, "learner", here),
        curve_keys=Path(learn.curve_keys) if learn.curve_keys else None,
    )


def _check_preset(fleet: Fleet) -> None:
    """learn.preset and learn.overrides name a preset and its fields (imports torch)."""
    import dataclasses

    from robotrl.learn.registry import presets

    assert fleet.learn is not None
    table = presets()[fleet.learn.algo]
    if fleet.learn.preset not in table:
        raise _fail(
            fleet, "learn.preset", f"{fleet.learn.preset!r} is not a preset of {fleet.learn.algo} ({', '.join(table)})"
        )
    known = [f.name for f in dataclasses.fields(table[fleet.learn.preset])]
    for key in fleet.learn.overrides:
        if key not in known:
            raise _fail(
                fleet, f"learn.overrides.{key}", f"not a field of {fleet.learn.algo}'s preset ({', '.join(known)})"
            )


def _policy(fleet: Fleet) -> Path:
    assert fleet.serve is not None
    policy = Path(fleet.serve.policy)
    if not (policy / "config.json").is_file():
        raise _fail(fleet, "serve.policy", f"{policy} is not a checkpoint folder (no config.json there)")
    return policy


def _server_role(fleet: Fleet, run: Path, endpoints: dict[str, str], here: bool) -> RoleSpec:
    from robotrl.inference.server import ServeJob, ServerConfig

    serve = fleet.serve
    assert serve is not None
    policy = _policy(fleet)
    learning = fleet.learn is not None
    if learning:
        out = Path(fleet.learn.out) if fleet.learn and fleet.learn.out else run / "learner"
        policy = out / "served"  # the learner's copy, written at its start
    config = ServerConfig(
        endpoint=endpoints["serve"],
        weights_from=endpoints["weights"] if learning else None,
        weights_keys=Path(serve.learner_keys) if serve.learner_keys else None,
    )
    job = ServeJob(
        policy,
        config,
        curve_keys=Path(serve.curve_keys) if serve.curve_keys else None,
        device=_device(fleet, serve.device, "inference_server", here),
    )
    robot = next((r for r in fleet.robots if r.arm_role and r.curve_keys), None)
    keys = None if robot is None or robot.curve_keys is None else client_keys(Path(robot.curve_keys))
    probe = HealthProbe(endpoints["serve"], curve=keys)
    info = {"endpoints": {"inference": endpoints["serve"]}, "policy": str(policy), "device": job.device}
    after = ("learn",) if learning else ()
    return RoleSpec("serve", "server", ServerLaunch(job, run / "serve.json"), probe, run / "serve.log", after, info)


def _arm_role(
    fleet: Fleet, robot: RobotEntry, k: int, run: Path, endpoints: dict[str, str], host: RoleHost | None
) -> RoleSpec:
    folder = run / "robots" / robot.name
    job = _arm_job(fleet, robot, k, endpoints, folder)
    launch = ArmLaunch(job, folder)
    assert job.beacon is not None
    if host is None:
        probe: Probe = BeaconProbe(job.beacon, launch.logs, job.episodes)
    else:  # its beacon is stamped with its node's clock
        offset_s = host.clock_offset_s
        beacon = BeaconProbe(job.beacon, launch.logs, job.episodes, clock=lambda: time.monotonic() + offset_s)
        probe = NodeClockProbe(beacon, offset_s)
    after = ("serve", "learn") if robot.arm_role == "actor" else ("serve",)
    info = {"robot_id": job.arm.name, "role": robot.arm_role}
    return RoleSpec(f"robots.{robot.name}", "robot", launch, probe, folder / "actor.log", after, info)


def _arm_job(fleet: Fleet, robot: RobotEntry, k: int, endpoints: dict[str, str], folder: Path) -> ActorJob:
    """The `ActorJob` of one arm: an actor streams to the learner, a deploy client not."""
    opts = fleet.arm(robot.name)
    sim, actor = robot.driver == "sim", robot.arm_role == "actor"
    default = ArmConfig()
    options = {
        "episodes": robot.episodes,
        "max_seconds": None if robot.max_seconds is None else float(robot.max_seconds),
        "stepped_delay": robot.stepped_delay,
        "curve_keys": Path(robot.curve_keys) if robot.curve_keys else None,
        "learner_keys": Path(robot.learner_keys) if robot.learner_keys else None,
    }
    try:
        arm = ArmConfig(
            str(opts["robot"]),
            robot.task or default.task,
            robot.scenario or default.scenario,
            opts["port"],
            robot.name if sim else (opts["robot_id"] or default.robot_id),
            opts["cameras"] or "",
        )
        return ActorJob(
            arm,
            endpoints["serve"],
            endpoints["transitions"] if actor else None,
            ExecutorConfig(robot.mode) if robot.mode else ExecutorConfig(),
            InterventionConfig(robot.intervene or ("scripted" if sim and actor else "none")),
            seed=robot.seed if robot.seed is not None else ACTOR_SEED_STRIDE * k,
            beacon=folder / "beacon.json",
            **{key: value for key, value in options.items() if value is not None},
        )
    except (UserError, ValueError) as exc:
        raise _fail(fleet, f"robots.{robot.name}", str(exc)) from None
