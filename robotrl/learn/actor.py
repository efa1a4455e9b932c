"""`ActorJob` and `run_actor`: the robot side of online learning (`robotrl actor`; the
actors `robotrl learn` starts).

An actor runs episodes on its arm through the inference server, streams every tick to the
learner (`TransitionRecorder`), lets a scripted expert (sim) or a person with a teleop
device take over (docs/algorithms.md section 4), and logs one CSV row per episode.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from robotrl.core.errors import UserError
from robotrl.core.task import Intervener
from robotrl.hardware.teleop.base import TeleopDevice
from robotrl.inference.arm import ArmConfig, OpenArm
from robotrl.inference.executor import ExecutorConfig

INTERVENERS = ("none", "scripted", "keyboard", "gamepad", "leader")
HANDBACK_FRACTION = 1 / 3
"""The scripted expert hands back once the drift is below this share of `takeover_m`."""
TAKEOVER_KEYS = {
    "keyboard": "i toggles the takeover (then jog: w/s, a/d, r/f), enter ends the episode as a success, x as a failure",
    "gamepad": "b held takes over, y ends the episode as a success, x as a failure",
    "leader": "i (or a foot pedal typing i) toggles the takeover, the leader's pose the target: hold it near "
    "the arm's first; enter ends the episode as a success, x as a failure",
}
"""What a person taking over with each device presses (logged when the actor starts)."""
ACTOR_SEED_STRIDE = 100_000
"""Actor k of a run plays seeds seed + k * ACTOR_SEED_STRIDE, ... (no two arms share a seed)."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InterventionConfig:
    """Who may take over, and the scripted expert's budget."""

    who: str = "none"
    """none; scripted (sim: the task's expert, when the policy drifts); or a person with
    keyboard (i toggles), gamepad or leader, whose success/failure keys end and label
    the episode."""
    budget_ticks: int = 150
    """scripted: intervention ticks allowed in the first episode."""
    taper_episodes: int = 100
    """scripted: episodes over which the budget falls to 0."""
    takeover_m: float = 0.06
    """scripted: takes over when the policy's end-effector target is this far (m) from the
    expert's; hands back within `HANDBACK_FRACTION` of it."""
    takeover_gripper_rad: float = 0.5
    """scripted: also takes over when the gripper targets differ by more than this (rad;
    closing in the air); 0: position only."""
    leader_port: str | None = None
    """leader: serial port of the leader arm."""
    leader_id: str = "leader"
    """leader: lerobot calibration id."""

    def __post_init__(self) -> None:
        if self.who not in INTERVENERS:
            raise UserError(f"unknown intervener {self.who!r}; choose {', '.join(INTERVENERS)}")


@dataclass(frozen=True)
class ActorJob:
    """One actor: its arm, server, learner and interventions."""

    arm: ArmConfig
    server: str
    """Endpoint of the inference server."""
    transitions: str | None = None
    """The learner's transitions endpoint; None streams nothing."""
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    intervention: InterventionConfig = field(default_factory=InterventionConfig)
    episodes: int = 3
    seed: int = 0
    """Seed of the first episode (sim)."""
    max_seconds: float = 20.0
    """Longest episode."""
    stepped_delay: int | None = None
    """sim: a simulated clock, each chunk taken in exactly this many ticks after its request."""
    stepped_speed: float | None = None
    """stepped: run no faster than this fraction of real time (slow motion: a learner on
    this machine gets 1 / speed times the wall time per episode); None: as fast as it can."""
    log: Path | None = None
    """CSV file: one row per episode."""
    curve_keys: Path | None = None
    """Folder with this robot's client.key_secret and the server's server.key (CURVE)."""
    learner_keys: Path | None = None
    """Folder with this robot's client.key_secret and the learner's server.key: the
    transitions are encrypted and only accepted from allowed keys (CURVE)."""
    beacon: Path | None = None
    """JSON file kept up to date while the arm runs (`robotrl.learn.beacon`: alive, ticks,
    episodes, version, the arm's and cameras' health), for a supervisor such as `robotrl
    up`; None: none."""

    def __post_init__(self) -> None:
        if not self.arm.simulated and (self.intervention.who == "scripted" or self.stepped_delay is not None):
            raise UserError("scripted interventions and --stepped-delay are for simulated arms (--robot sim)")
        if self.stepped_speed is not None and (self.stepped_delay is None or not 0 < self.stepped_speed <= 1):
            raise UserError("--stepped-speed needs --stepped-delay and a speed in (0, 1] (a fraction of real time)")
        if self.episodes < 1 or self.max_seconds <= 0:
            raise UserError("an actor needs episodes >= 1 and max_seconds > 0")
        if self.intervention.who == "leader" and self.intervention.leader_port is None and self.arm.twin_info is None:
            raise UserError("--intervene leader needs --leader-port (the leader arm's bus; see `robotrl devices`)")


def make_intervener(
    config: InterventionConfig, arm: OpenArm, twin_info: str | None = None
) -> tuple[Intervener | None, TeleopDevice | None]:
    """(the intervener, the teleop device to disconnect at the end or None). `twin_info`:
    the arm's twin (`ArmConfig.twin_info`), whose leader a leader intervener reads when
    `config.leader_port` is None."""
    if config.who == "none":
        return None, None
    if config.who == "scripted":
        from robotrl.sim.env import TaskEnv
        from robotrl.sim.intervener import ScriptedIntervener

        if not isinstance(arm.task, TaskEnv):
            raise UserError("the scripted intervener needs a simulated arm (--robot sim)")

        return ScriptedIntervener(
            arm.task,
            takeover_m=config.takeover_m,
            handback_m=config.takeover_m * HANDBACK_FRACTION,
            takeover_gripper_rad=config.takeover_gripper_rad or None,
            initial_budget_ticks=config.budget_ticks,
            taper_episodes=config.taper_episodes,
        ), None
    from robotrl.hardware.teleop.intervention import TeleopIntervention

    device = _person_device(config, arm, twin_info)
    device.connect()
    log.info("%s: %s", config.who, TAKEOVER_KEYS[config.who])
    return TeleopIntervention(device, arm.robot), device


def _person_device(config: InterventionConfig, arm: OpenArm, twin_info: str | None = None) -> TeleopDevice:
    """The (unconnected) device of a person taking over: the keyboard (i toggles the
    takeover), a gamepad, or a leader arm whose joints are the targets while the terminal's
    keys toggle the takeover and label the episode (i, or a foot pedal typing it; enter /
    x): a leader arm has no buttons. A twin's leader comes from its info file."""
    from robotrl.record.teleop import TeleopConfig, make_teleop

    if config.who != "leader":
        return make_teleop(TeleopConfig(config.who), arm.robot)
    from robotrl.hardware.teleop.leader import CombinedTeleop

    leader = TeleopConfig("leader", config.leader_port, config.leader_id)
    if config.leader_port is None and twin_info is not None:
        from robotrl.inference.arm import twin_leader

        leader = twin_leader(Path(twin_info))
    return CombinedTeleop(make_teleop(leader, arm.robot), make_teleop(TeleopConfig("keyboard"), arm.robot))


def run_actor(job: ActorJob, wall_start_s: float | None = None) -> list:
    """Run the episodes of `job`; their `EpisodeResult`s (traces dropped)."""
    from robotrl.inference.arm import open_arm
    from robotrl.inference.remote import remote_executor
    from robotrl.inference.runner import EpisodeRunner
    from robotrl.inference.transitions import TransitionRecorder, TransitionStreamer
    from robotrl.learn.launch import curve_keys
    from robotrl.learn.metrics import CsvLog, EpisodeLog
    from robotrl.wire.client import CONNECT_TIMEOUT_S, ClientSocket
    from robotrl.wire.keys import client_keys

    start = time.monotonic() if wall_start_s is None else wall_start_s
    with ExitStack() as stack:
        client = ClientSocket(job.server, robot_id=job.arm.name, curve=curve_keys(job.curve_keys))
        stack.callback(client.close)
        info = client.connect(timeout_s=CONNECT_TIMEOUT_S)
        arm = open_arm(job.arm, info, stepped=job.stepped_delay is not None, stepped_speed=job.stepped_speed)
        stack.callback(arm.close)
        intervener, device = make_intervener(job.intervention, arm, job.arm.twin_info)
        if device is not None:
            stack.callback(device.disconnect)
        executor = remote_executor(
            arm.robot,
            client,
            info,
            job.executor,
            robot_id=job.arm.name,
            stepped_delay=job.stepped_delay,
            intervener=intervener,
        )
        csv_log = None
        if job.log is not None:
            job.log.unlink(missing_ok=True)
            csv_log = CsvLog(job.log)
            stack.callback(csv_log.close)
        observers: list = [EpisodeLog(csv_log, job.arm.name, job.episodes, start)]
        if job.beacon is not None:
            from robotrl.learn.beacon import Beacon

            observers.append(Beacon(job.beacon, job.arm.name, health=arm.robot.health))
        if job.transitions:
            keys = None if job.learner_keys is None else client_keys(job.learner_keys)
            spec = served_spec(info, arm.robot.spec.num_joints)
            streamer = TransitionStreamer(job.transitions, job.arm.name, spec, curve=keys)
            stack.callback(streamer.close)
            observers.append(TransitionRecorder(streamer))
        runner = EpisodeRunner(arm.robot, arm.task, executor, arm.clock, observers=observers)
        max_ticks = int(job.max_seconds * arm.robot.spec.control_rate_hz)
        results = []
        for i in range(job.episodes):
            result = runner.run(job.seed + i, max_ticks)
            result.trace, result.received = [], []  # long runs: keep the outcome, not every tick
            results.append(result)
        return results


def served_spec(server_info: dict, num_joints: int):
    """The `TransitionSpec` of the rows an arm of `num_joints` streams for the served
    policy (its cameras at its image size, its privileged features)."""
    from robotrl.buffer.spec import TransitionSpec

    size = int(server_info.get("image_size_px") or 0)
    return TransitionSpec(
        num_joints,
        int(server_info["action_dim"]),
        {cam: (size, size) for cam in server_info.get("cameras", ())},
        int(server_info.get("env_state_dim") or 0),
    )
