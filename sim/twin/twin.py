"""`Twin`: a MuJoCo SO-101 task scene behind two simulated STS3215 buses and ZMQ cameras,
in real time, for `robotrl twin`.

The follower's servos, `SERVO_TICKS` times per control tick (on the wall clock):

1. physics catches up with the clock; the arm's measured joints (URDF radians) become the
   follower bus's Present_Position (radians -> lerobot units -> raw ticks, through the
   twin's calibration: `calibration.TwinCalibration`);
2. once every servo has had a Goal_Position write since its torque went on, those
   registers (raw -> radians) are the simulated arm's targets.

Each control tick (`rate_hz`), after that:

3. the scene advances a tick (a moving object moves) and is scored;
4. the leader bus's Present_Position becomes the task's scripted expert's next target,
   computed from the arm and the scene (a demonstrator watching the follower and moving
   the leader), while the follower is *driven*; otherwise the leader mirrors the follower
   (the demonstrator has put the leader where the follower stands), so a command that
   connects both starts without a jump;
5. at `fps`, the task's cameras are rendered and handed to their publishers.

Driven = every follower servo has its torque on and has had a Goal_Position write since:
lerobot's `connect()` switches the torque on, the first `send_action` drives. Each time
the follower becomes driven the expert starts its plan afresh from where the arm stands.
Torque off (lerobot's `disconnect()`): the arm **holds** where it is. A real SO-101 goes
limp and sags under gravity; the twin keeps the pose so the next command starts there.

Scene resets (new objects from seed `seed`, `seed + 1`, ...; the arm stays where it is, as
when a person tidies the table): at the start, on `request_reset()` (`robotrl twin` maps
SIGUSR1 to it; `deploy`/`actor`/`record --twin INFO` send it at each episode's start, as a
person resets the table while the arm waits) and every `reset_every_s` if set. With `instruction` set, seeds whose scene
asks for something else are skipped (the person sets the table to match what the policy is
told: `deploy --task`).

Each tick the task scores the scene (the judge a real arm's operator is); when the scene
ends its outcome is logged and kept in `outcomes`: solved or not within the task's tick
limit (the limit of the simulated benchmarks) while the follower was driven, counted only
if it was driven from the scene's first tick without a gap (a command that finishes lets go
of the arm: the scene's last ticks may be undriven). The twin cannot see a recorder's episode
boundaries (a real arm has none on its bus either): for one scene per recorded episode,
`record --twin INFO` sends SIGUSR1 at each episode's start (`reset_every_s` near the episode
length drifts apart from the recorder's episodes by its save time between them). A scene laid out after
an episode's first reading is a scene changed under the policy: a policy deployed through
the server failed every such scene that it solved when laid out first (docs/results.md
section 18).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from robotrl.core.clock import Rate, WallClock
from robotrl.core.errors import ConfigError
from robotrl.core.robot import CameraSpec
from robotrl.core.seeds import SEED_STRIDE
from robotrl.hardware.camera_geometry import save_rig
from robotrl.hardware.models import get_arm
from robotrl.hardware.sim_arm.render import CameraRenderer, camera_rig
from robotrl.hardware.sim_arm.robot import DEFAULT_CAMERAS, SimRobot
from robotrl.hardware.sim_arm.scene import build_arm_spec
from robotrl.sim.tasks import make_task
from robotrl.sim.tasks.base import BALL_RADIUS_M, Expert
from robotrl.sim.twin.bus import SimServoBus
from robotrl.sim.twin.calibration import install_calibration, twin_calibration
from robotrl.sim.twin.cameras import FramePublisher

log = logging.getLogger(__name__)

ARM = "so101"
"""The twin's arm: lerobot's SO-101 follower and leader."""
SCENE_CAMERAS = tuple(c.name for c in DEFAULT_CAMERAS)
"""Cameras the arm's scene has ("front", "wrist")."""
CAMERA_CALIBRATION_FILE = "camera_calibration.json"
"""The cameras' calibration, in the calibration folder (`robotrl.hardware.camera_geometry`)."""


@dataclass(frozen=True)
class TwinConfig:
    """What `robotrl twin` simulates."""

    task: str = "pick_place"
    """Task scene and scripted expert: reach, pick_place, track or calibrate."""
    seed: int = 0
    """Seed of the first scene; each reset takes the next."""
    rate_hz: float = 30.0
    """Control ticks per second: bus registers, expert and physics targets (the experts
    are tuned for 30 Hz)."""
    fps: float = 30.0
    """Camera frames rendered (and published) per second, at most `rate_hz`."""
    camera_width_px: int = 64
    """Width of every camera frame, pixels."""
    camera_height_px: int = 48
    """Height of every camera frame, pixels."""
    cameras: tuple[str, ...] = SCENE_CAMERAS
    """Cameras of the scene to publish; () for none."""
    robot_id: str = "follower"
    """lerobot id of the follower (`--robot-id`): its calibration file `<id>.json`."""
    leader_id: str = "leader"
    """lerobot id of the leader (`--leader-id`)."""
    reset_every_s: float = 0.0
    """New scene this often, seconds; 0: only at the start and on request."""
    instruction: str = ""
    """Only scenes whose instruction is this; '' for every scene."""

    def __post_init__(self) -> None:
        if self.rate_hz <= 0 or not 0 < self.fps <= self.rate_hz:
            raise ConfigError(f"need rate_hz > 0 and 0 < fps <= rate_hz, got {self.rate_hz:g}, {self.fps:g}")
        if self.camera_width_px <= 0 or self.camera_height_px <= 0:
            raise ConfigError("the camera size must be positive")
        unknown = [name for name in self.cameras if name not in SCENE_CAMERAS]
        if unknown or len(set(self.cameras)) != len(self.cameras):
            raise ConfigError(f"cameras: name each of {', '.join(SCENE_CAMERAS)} at most once, got {self.cameras}")
        if self.reset_every_s < 0:
            raise ConfigError("reset_every_s must be >= 0")
        if not self.robot_id or not self.leader_id or "/" in self.robot_id + self.leader_id:
            raise ConfigError("robot_id and leader_id must be non-empty file names")
        fixed = make_task(self.task).instruction  # an unknown task fails here, before anything starts
        if self.instruction and fixed is not None and self.instruction != fixed:
            raise ConfigError(f"every {self.task} scene asks {fixed!r}, not {self.instruction!r}")


@dataclass(frozen=True)
class SceneOutcome:
    """How one scene ended."""

    seed: int
    ticks: int
    """Control ticks the scene lasted."""
    solved_tick: int | None
    """First tick the task scored a success; None if none."""
    max_ticks: int
    """The task's tick limit: a success after it does not count."""
    driven: bool
    """The follower was driven from the scene's first tick on, without a gap (the drive may
    end before the scene does: the command finished); a scene a command ran through."""

    @property
    def success(self) -> bool:
        return self.solved_tick is not None and self.solved_tick <= self.max_ticks


SERVO_TICKS = 8
"""Follower register updates per control tick (240 Hz at 30 Hz): a goal acts, and a reading
is fresh, within 1/240 s, as on a real STS3215 (it acts on a write at once). With one update
per tick a command acted up to a tick late and a reading was up to a tick old: a loop
slower than the real arm's, in which a pixel reach policy solved 24 of 30 scenes that it
solves 30 of 30 on the simulated arm (docs/results.md section 24)."""
MAX_SEED_TRIES = 1000
"""Seeds tried for a scene whose instruction is `TwinConfig.instruction`."""


@dataclass(frozen=True)
class TwinInfo:
    """Where a running twin is: what the real-arm commands are given."""

    follower_port: str
    """`--port` of `robotrl record` / `deploy`."""
    leader_port: str
    """`--leader-port` of `robotrl record --teleop leader`."""
    robot_id: str
    """`--robot-id` (the follower's calibration file `<id>.json`)."""
    leader_id: str
    """`--leader-id`."""
    calibration_dir: str
    """`HF_LEROBOT_CALIBRATION` for the commands."""
    cameras: str
    """Their `--cameras` map (JSON), '' without cameras."""
    camera_calibration: str
    """The cameras' exact calibration file (`train --ball-target`), '' without cameras."""

    def as_dict(self) -> dict:
        return asdict(self)


class Twin:
    """The scene, buses and cameras of `config`; calibration files go to `calibration_dir`.
    Build, `run(stop)` until `stop` is set, then `close()`."""

    def __init__(self, config: TwinConfig, calibration_dir: Path) -> None:
        self.config = config
        self.calibration = twin_calibration(ARM)
        install_calibration(calibration_dir, config.robot_id, config.leader_id, self.calibration)
        self.task = make_task(config.task)
        spec = build_arm_spec(get_arm(ARM))
        self.task.build(spec)
        self.clock = WallClock()
        self.sim = SimRobot(spec.compile(), arm=ARM, cameras=(), clock=self.clock, control_rate_hz=config.rate_hz)
        self.sim.connect()
        self.scenes = 0
        if config.instruction:  # a scene the instruction fits exists, or one line before the buses open
            self._next_scene(config.seed)
        self._ids = list(self.calibration.by_id)  # servo ids, joint order
        self.follower = SimServoBus(self.calibration.by_id, instant=False)
        self.leader = SimServoBus(self.calibration.by_id, instant=False)
        h, w = config.camera_height_px, config.camera_width_px
        self.publishers = [FramePublisher(name, h, w, fps=config.fps) for name in config.cameras]
        self._renderer: CameraRenderer | None = None
        self._calibration_dir = Path(calibration_dir)
        self._camera_file = ""
        if self.publishers:  # as a user calibrates a real arm's cameras: a file beside the arm's
            specs = tuple(CameraSpec(p.name, h, w) for p in self.publishers)
            self._camera_file = str(self._calibration_dir / CAMERA_CALIBRATION_FILE)
            save_rig(camera_rig(self.sim.model, self.sim.arm.ee_frame, specs, 2 * BALL_RADIUS_M), self._camera_file)
        self._reset_requested = threading.Event()
        self._expert: Expert | None = None
        self._driven = False
        self.seed = config.seed - 1
        self.tick = 0
        self.outcomes: list[SceneOutcome] = []
        self._solved_tick: int | None = None
        self._driven_ticks = 0  # the scene's first ticks the follower was driven on, without a gap
        self._redriven = False  # driven again after a gap

    @property
    def info(self) -> TwinInfo:
        cameras = {p.name: p.config() for p in self.publishers}
        return TwinInfo(
            self.follower.port,
            self.leader.port,
            self.config.robot_id,
            self.config.leader_id,
            str(self._calibration_dir),
            json.dumps(cameras) if cameras else "",
            self._camera_file,
        )

    def request_reset(self) -> None:
        """Start a new scene at the next tick (safe from a signal handler)."""
        self._reset_requested.set()

    def run(self, stop: threading.Event, on_tick: Callable[[], None] | None = None) -> None:
        """Tick at `rate_hz` (the servos `SERVO_TICKS` times as often) until `stop` is set;
        `on_tick` is called after every tick (a heartbeat: it stops when the loop does)."""
        if self.publishers and self._renderer is None:  # GL contexts belong to the thread that renders
            specs = tuple(CameraSpec(p.name, *p.shape[:2]) for p in self.publishers)
            self._renderer = CameraRenderer(self.sim.model, specs)
        self._reset_scene()
        servo_rate = Rate(self.clock, self.config.rate_hz * SERVO_TICKS)
        tick_period_s, next_tick_s = 1.0 / self.config.rate_hz, self.clock.now()
        frame_period_s, next_frame_s = 1.0 / self.config.fps, self.clock.now()
        half_servo_s = 0.5 * servo_rate.period_s  # servo ticks wake a little late: a tick due within it is due
        late_ticks = 0
        while not stop.is_set():
            self._servo_tick()
            now_s = self.clock.now()
            if now_s + half_servo_s >= next_tick_s:
                late_ticks += now_s - next_tick_s > tick_period_s
                next_tick_s = max(next_tick_s + tick_period_s, now_s)
                if self._reset_requested.is_set() or self._reset_due():
                    self._reset_scene()
                self._tick()
                if self._renderer is not None and now_s + half_servo_s >= next_frame_s:
                    next_frame_s = max(next_frame_s + frame_period_s, now_s)
                    for publisher, frame in zip(self.publishers, self._renderer.render(self.sim.sync()).values()):
                        publisher.update(frame)
                if on_tick is not None:
                    on_tick()
            servo_rate.sleep()
        self._end_scene()
        if late_ticks:
            log.info("twin: %d of its ticks came over a %g Hz period late", late_ticks, self.config.rate_hz)
        counted = [o for o in self.outcomes if o.driven]
        if counted:
            solved = sum(o.success for o in counted)
            log.info("twin: %d of %d driven scenes solved", solved, len(counted))

    def _servo_tick(self) -> None:
        """Steps 1-2 of the module docstring."""
        self.sim.sync()
        ids = self._ids
        self.follower.set_present(dict(zip(ids, self.calibration.rad_to_raw(self.sim.q_true_rad).tolist())))
        if all(self.follower.commanded(i) for i in ids):
            goal_raw = np.array([self.follower.goal(i) for i in ids])
            self.sim.command(self.calibration.raw_to_rad(goal_raw))

    def _tick(self) -> None:
        """Steps 3-4 of the module docstring."""
        q_rad = self.sim.q_true_rad
        ids = self._ids
        driven = all(self.follower.commanded(i) for i in ids)
        if driven and not self._driven:
            self._expert = self.task.make_expert(self.sim)
            self._expert.reset(np.random.default_rng(self.seed + SEED_STRIDE))
        elif self._driven and not driven:
            self.sim.hold()
        self._driven = driven
        leading = self._driven_ticks == self.tick  # driven on every tick of the scene so far
        self.tick += 1
        self.task.on_tick(self.sim, self.tick)  # the scene's ticks count from 1, as a simulated episode's
        if driven:
            self._driven_ticks += leading
            self._redriven |= not leading
            if self._solved_tick is None and self.task.evaluate(self.sim).success:
                self._solved_tick = self.tick
        leader_rad = self._expert.act(q_rad) if driven and self._expert is not None else q_rad
        self.leader.set_present(dict(zip(ids, self.calibration.rad_to_raw(leader_rad).tolist())))

    def _reset_due(self) -> bool:
        every_s = self.config.reset_every_s
        return every_s > 0 and self.sim.sim_time_s >= every_s

    def _reset_scene(self) -> None:
        """New objects from the next seed (the next whose instruction fits); the arm stays
        where it stands (home at the start)."""
        self._reset_requested.clear()
        self._end_scene()
        self.seed, instruction = self._next_scene(self.seed + 1)
        self.tick, self.scenes = 0, self.scenes + 1
        self._solved_tick, self._driven_ticks, self._redriven = None, 0, False
        self._expert = None
        self._driven = False  # the expert restarts on the next driven tick
        log.info("twin: scene %d (seed %d): %s", self.scenes, self.seed, instruction)

    def _next_scene(self, seed: int) -> tuple[int, str]:
        """Set up the scene of the first seed from `seed` whose instruction is the config's
        (any, if it is ''); (its seed, its instruction). `ConfigError` if none is found."""
        q_rad = self.sim.q_true_rad if self.scenes else None
        wanted = self.config.instruction
        for seed_ in range(seed, seed + MAX_SEED_TRIES):
            self.sim.reset(q_rad, seed=seed_)
            instruction = self.task.reset(self.sim, np.random.default_rng(seed_))
            if not wanted or instruction == wanted:
                return seed_, instruction
        raise ConfigError(
            f"no {self.config.task} scene of seeds {seed}-{seed + MAX_SEED_TRIES - 1} asks {wanted!r} "
            f"(it asks e.g. {instruction!r})"
        )

    def _end_scene(self) -> None:
        """Keep and log the outcome of the scene now ending (none before the first)."""
        if not self.scenes:
            return
        outcome = SceneOutcome(
            self.seed, self.tick, self._solved_tick, self.task.max_ticks, self._driven_ticks > 0 and not self._redriven
        )
        self.outcomes.append(outcome)
        rate = self.config.rate_hz
        if outcome.solved_tick is not None:
            result = f"solved at {outcome.solved_tick / rate:.1f} s"
            result += "" if outcome.success else f" (after the task's {outcome.max_ticks / rate:.0f} s limit)"
        else:
            result = f"not solved in {outcome.ticks / rate:.1f} s"
        log.info(
            "twin: scene %d (seed %d) %s%s",
            self.scenes,
            self.seed,
            result,
            "" if outcome.driven else " (not driven throughout)",
        )

    def close(self) -> None:
        """Stop the cameras and buses (the commands on them lose their devices) and physics."""
        for publisher in self.publishers:
            publisher.stop()
        self.follower.close()
        self.leader.close()
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        self.sim.disconnect()
