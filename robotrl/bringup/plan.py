"""From a fleet file to the roles `robotrl up` runs on this machine: the learner of
`[learn]`, the inference server of `[serve]`, one process per arm whose roles include
deploy_client or actor, each with its frozen config (`LearnerJob`, `ServeJob`,
`ActorJob`) handed over as a JSON file, never as a rebuilt command line (a twin, which
has no config file, gets its few options as flags), and one recorder per robot with the
recorder role.

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
left, from the seed after the last one ended), and for a driver-"twin" robot its twin's
`twin.log`, `twin.json` (buses, cameras, heartbeat) and `calibration/`, and for a
recorder `record.log` and `record.beacon.json` (every start records the episodes its
dataset lacks, appending to it); `status.json`.

A driver-"twin" robot is two roles: `robots.NAME.twin` (`robotrl twin`, kind "twin") and
its arm's role, which comes after it and opens the twin's buses and cameras through
lerobot as a real arm's (`ArmConfig.twin_info`).

A robot with the recorder role has the role `robots.NAME.record` (kind "robot"): `robotrl
record --fleet FILE --fleet-robot NAME` with its `[robots.NAME.record]` as flags (the
recorder has no config file either), done once its dataset holds the episodes asked for.
A robot that also runs a policy records first: its arm's role comes after the recorder is
done (one motor bus). A fleet of recorders only needs no `[serve]`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from robotrl.bringup.host import LocalHost, NodeClockProbe, RoleHost
from robotrl.bringup.launches import ArmLaunch, LearnerLaunch, RecordLaunch, ServerLaunch, TwinLaunch
from robotrl.bringup.probes import (
    BeaconProbe,
    HealthProbe,
    HelloProbe,
    Probe,
    RecorderProbe,
    TwinProbe,
    learner_report,
)
from robotrl.bringup.supervisor import RoleSpec
from robotrl.core.errors import ConfigError, UserError
from robotrl.fleet import Fleet, RobotEntry
from robotrl.inference.arm import DEFAULT_TASK, ArmConfig
from robotrl.inference.executor import ExecutorConfig
from robotrl.learn.actor import ACTOR_SEED_STRIDE, ActorJob, InterventionConfig
from robotrl.wire.keys import client_keys

if TYPE_CHECKING:
    from robotrl.learn.job import LearnerJob

STATUS_FILE = "status.json"


@dataclass(frozen=True)
class BringUp:
    """What `robotrl up` runs: roles in start order and the endpoints."""

    roles: list[RoleSpec]
    endpoints: dict[str, str]


def plan_bringup(
    fleet: Fleet, run: Path, *, resume: bool = False, hosts: Mapping[str, RoleHost] | None = None
) -> BringUp:
    """The roles of `fleet` with their configs, run folder `run`; `resume` continues the
    run there (the learner resumes, the arms run the episodes left). `hosts`: where each
    role runs, by role name (their Ray nodes under `--ray`); None: all here, on loopback.
    A fleet this cannot run (a GPU role on another host without `hosts`, a missing
    checkpoint or key, a port in use) is a `ConfigError` naming the field."""
    arms = [robot for robot in fleet.robots if robot.arm_role is not None]
    recorders = [robot for robot in fleet.robots if robot.record is not None]
    if fleet.serve is None and (arms or not recorders):
        needs = f"robots.{arms[0].name} is a {arms[0].arm_role}" if arms else "there is nothing to start"
        raise ConfigError(f"{fleet.source}: serve: missing; {needs}: add a [serve] section with the policy")
    if (run / STATUS_FILE).exists() and not resume:
        raise UserError(f"{run} already holds a bring-up; add --resume to continue it or choose another --out")
    here = hosts is None
    where = hosts or {}
    endpoints: dict[str, str] = {}
    roles: list[RoleSpec] = []
    if fleet.serve is not None:  # and the learner, which needs it
        if here:
            _check_hosts(fleet)
        _check_keys(fleet)
        endpoints = _endpoints(fleet, where)
        if fleet.learn is not None:
            roles.append(_learner_role(fleet, run, endpoints, resume, here))
        roles.append(_server_role(fleet, run, endpoints, here))
    roles += [_recorder_role(fleet, robot, run, where.get(f"robots.{robot.name}")) for robot in recorders]
    names: dict[str, str] = {}
    for k, robot in enumerate(arms):
        if robot.driver == "twin":
            roles.append(_twin_role(robot, k, run, where.get(f"robots.{robot.name}")))
        role = _arm_role(fleet, robot, k, run, endpoints, where.get(f"robots.{robot.name}"))
        wire_name = role.info["robot_id"]
        if wire_name in names:
            raise ConfigError(f"{fleet.source}: robots.{robot.name}.id: {wire_name!r} is also {names[wire_name]}")
        names[wire_name] = f"robots.{robot.name}"
        roles.append(role)
    return BringUp(roles, endpoints)


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
    job = LearnerJob(
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
    return job if learn.online_ratio is None else replace(job, online_ratio=float(learn.online_ratio))


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
    after += (f"robots.{robot.name}.twin",) if robot.driver == "twin" else ()
    after += (f"robots.{robot.name}.record",) if robot.record is not None else ()  # the same arm, once it is done
    info = {"robot_id": job.arm.name, "role": robot.arm_role}
    return RoleSpec(f"robots.{robot.name}", "robot", launch, probe, folder / "actor.log", after, info)


def _recorder_role(fleet: Fleet, robot: RobotEntry, run: Path, host: RoleHost | None) -> RoleSpec:
    """The recorder of `robot` (`RecordLaunch`) in the robot's folder, watched through its
    beacon; it runs where the arm's role does (under Ray, in the same actor)."""
    record = robot.record
    assert record is not None
    folder, dataset = run / "robots" / robot.name, Path(record.dataset)
    if dataset.exists() and not (dataset / "meta" / "info.json").is_file():
        raise _fail(
            fleet, f"robots.{robot.name}.record.dataset", f"{dataset} is not a LeRobotDataset (no meta/info.json)"
        )
    beacon = folder / RecordLaunch.BEACON
    leader = record.device == "leader"
    flags = {
        "--fleet": fleet.source,
        "--fleet-robot": robot.name,
        "--task": robot.task or DEFAULT_TASK,
        "--scenario": robot.scenario,
        "--teleop": record.device,
        "--leader-port": record.leader_port,
        "--leader-id": record.leader_id if leader else None,
        "--root": str(dataset),
        "--max-seconds": f"{record.max_seconds:g}",
        "--image-size": record.image_size_px,
        "--cameras": record.cameras,
        "--beacon": str(beacon),
    }
    options = [part for flag, value in flags.items() if value is not None for part in (flag, str(value))]
    options += ["--keep-failed"] if record.keep_failed else []
    launch = RecordLaunch(tuple(options), dataset, record.episodes, record.seed, beacon)
    probe: Probe = RecorderProbe(beacon, dataset, record.episodes)
    if host is not None:  # its beacon is stamped with its node's clock
        probe = NodeClockProbe(probe, host.clock_offset_s)
    info = {"role": "recorder", "dataset": str(dataset), "teleop": record.device}
    return RoleSpec(f"robots.{robot.name}.record", "robot", launch, probe, folder / "record.log", info=info)


def _arm(fleet: Fleet, robot: RobotEntry) -> ArmConfig:
    """The arm of a simulated or real robot, its port and cameras from the fleet file."""
    opts, default = fleet.arm(robot.name), ArmConfig()
    return ArmConfig(
        str(opts["robot"]),
        robot.task or "",
        robot.scenario or default.scenario,
        opts["port"],
        robot.name if robot.driver == "sim" else (opts["robot_id"] or default.robot_id),
        opts["cameras"] or "",
    )


def _twin_role(robot: RobotEntry, k: int, run: Path, host: RoleHost | None) -> RoleSpec:
    """`robotrl twin` of a driver-"twin" robot, in the robot's folder; it runs where the arm's
    role does (under Ray, in the same actor)."""
    folder = run / "robots" / robot.name
    seed = robot.seed if robot.seed is not None else ACTOR_SEED_STRIDE * k
    launch = TwinLaunch(robot.task or DEFAULT_TASK, seed, robot.name, folder)
    probe: Probe = TwinProbe(launch.info)
    if host is not None:
        probe = NodeClockProbe(probe, host.clock_offset_s)
    info = {"robot_id": robot.name, "info_file": str(launch.info)}
    return RoleSpec(f"robots.{robot.name}.twin", "twin", launch, probe, folder / "twin.log", info=info)


def _twin_arm(fleet: Fleet, robot: RobotEntry, folder: Path) -> ArmConfig:
    """The arm of a driver-"twin" robot: an so101 whose bus, cameras and calibration come from
    its twin's info file; told the robot's instruction, else its scene's."""
    from robotrl.sim.tasks import TASKS

    scene = robot.task or DEFAULT_TASK
    instruction = robot.instruction or TASKS[scene].instruction
    if instruction is None:
        raise _fail(fleet, f"robots.{robot.name}.instruction", f"missing; each {scene} scene names a new object")
    return ArmConfig("so101", instruction, robot_id=robot.name, twin_info=str(folder / TwinLaunch.INFO))


def _arm_job(fleet: Fleet, robot: RobotEntry, k: int, endpoints: dict[str, str], folder: Path) -> ActorJob:
    """The `ActorJob` of one arm: an actor streams to the learner, a deploy client not."""
    sim, actor = robot.driver == "sim", robot.arm_role == "actor"
    budget = {key: getattr(robot, key) for key in ("budget_ticks", "taper_episodes") if getattr(robot, key) is not None}
    options = {
        "episodes": robot.episodes,
        "max_seconds": None if robot.max_seconds is None else float(robot.max_seconds),
        "stepped_delay": robot.stepped_delay,
        "curve_keys": Path(robot.curve_keys) if robot.curve_keys else None,
        "learner_keys": Path(robot.learner_keys) if robot.learner_keys else None,
    }
    twin = _twin_arm(fleet, robot, folder) if robot.driver == "twin" else None
    try:
        arm = twin or _arm(fleet, robot)
        return ActorJob(
            arm,
            endpoints["serve"],
            endpoints["transitions"] if actor else None,
            ExecutorConfig(robot.mode) if robot.mode else ExecutorConfig(),
            InterventionConfig(robot.intervene or ("scripted" if sim and actor else "none"), **budget),
            seed=robot.seed if robot.seed is not None else ACTOR_SEED_STRIDE * k,
            beacon=folder / "beacon.json",
            **{key: value for key, value in options.items() if value is not None},
        )
    except (UserError, ValueError) as exc:
        raise _fail(fleet, f"robots.{robot.name}", str(exc)) from None
