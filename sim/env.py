"""`TaskEnv`: a task on the simulated arm behind `SafeRobot`.

It is the `Task` of simulated episodes (`begin`, `env_state`, `score`: the episode
runner drives `env.robot` on `env.clock`), and for the loops that act tick by tick
without chunks (teleop recording, `robotrl sim`) also an env: `reset(seed)` and
`step(target)`, built from the same three methods.

Every command goes through `SafeRobot`. With the default `SimClock` an episode runs as
fast as the CPU allows and is deterministic for a seed; with a `WallClock` it runs in
real time at the control rate.
"""

from __future__ import annotations

import numpy as np

from robotrl.core.clock import Clock, Rate, SimClock
from robotrl.core.episode import Observation, Step
from robotrl.core.errors import ConfigError
from robotrl.core.robot import CameraSpec, RobotSpec
from robotrl.core.seeds import SEED_STRIDE
from robotrl.core.task import TaskOutcome
from robotrl.hardware.camera_geometry import CameraRig
from robotrl.hardware.models import get_arm
from robotrl.hardware.safety import SafeRobot, SafetyLimits
from robotrl.hardware.sim_arm.render import camera_rig
from robotrl.hardware.sim_arm.robot import DEFAULT_CAMERAS, SimRobot
from robotrl.hardware.sim_arm.scene import build_arm_spec
from robotrl.sim.scenario import Scenario, get_scenario
from robotrl.sim.tasks import make_task
from robotrl.sim.tasks.base import BALL_RADIUS_M, Expert, Task


class TaskEnv:
    """One task, one scenario, one simulated arm behind `SafeRobot`.

    Args:
        task: task name ("reach", "pick_place", "track") or a `Task`.
        scenario: scenario name ("nominal", "shifted") or a `Scenario`.
        arm: simulated arm model.
        cameras: rendered cameras; () for state-only (fast) episodes.
        clock: `SimClock` (stepped, default) or `WallClock` (real time).
        safety: `SafeRobot` limits.
        start_rad: (J,) the arm's pose at each episode's start, radians: a served policy's
            start pose (`PolicyMetadata.start_state_rad`, where its training episodes
            began), as `deploy` drives a real arm there first; None: the arm's home.
    """

    def __init__(
        self,
        task: str | Task = "reach",
        scenario: str | Scenario = "nominal",
        *,
        arm: str = "so101",
        cameras: tuple[CameraSpec, ...] = DEFAULT_CAMERAS,
        clock: Clock | None = None,
        safety: SafetyLimits = SafetyLimits(),
        start_rad: np.ndarray | None = None,
    ) -> None:
        self.task = make_task(task) if isinstance(task, str) else task
        self.scenario = get_scenario(scenario) if isinstance(scenario, str) else scenario
        spec = build_arm_spec(get_arm(arm))
        self.task.build(spec)
        model = spec.compile()
        self.scenario.apply(model)
        self.clock = clock if clock is not None else SimClock()
        self.sim = SimRobot(
            model,
            arm=arm,
            cameras=cameras,
            clock=self.clock,
            q_noise_rad=self.scenario.obs_noise_rad,
            camera_latency_ticks=self.scenario.camera_latency_ticks,
        )
        joints = self.sim.spec.num_joints
        if start_rad is not None and np.shape(start_rad) != (joints,):
            raise ConfigError(f"the start pose has {np.size(start_rad)} joints, the {arm} arm has {joints}")
        self.start_rad = None if start_rad is None else np.asarray(start_rad, np.float64)
        self.robot = SafeRobot(self.sim, safety, clock=self.clock)
        self.robot.connect()
        self.instruction = ""
        self.tick = 0
        self.seed = 0
        self._rate = Rate(self.clock, self.sim.spec.control_rate_hz)

    @property
    def dt_s(self) -> float:
        return self.sim.spec.dt_s

    @property
    def spec(self) -> RobotSpec:
        return self.sim.spec

    @property
    def env_state_dim(self) -> int:
        return self.task.env_state_dim

    # -- the Task contract (the episode runner) -------------------------------------------
    def begin(self, seed: int) -> str:
        """Put the arm at its start pose (home by default) and the objects where `seed`
        says; the instruction."""
        self.seed = seed
        self.sim.reset(self.start_rad, seed=seed)
        self.instruction = self.task.reset(self.sim, np.random.default_rng(seed))
        self.robot.resync()
        self.tick = 0
        self._rate.restart()
        return self.instruction

    def env_state(self) -> np.ndarray:
        """(E,) privileged task features now (object positions, metres)."""
        return self.task.env_state(self.sim)

    def score(self, tick: int) -> TaskOutcome:
        """Scheduled task events for `tick`, then reward and success; done on success or
        at the task's tick limit."""
        self.tick = tick
        self.task.on_tick(self.sim, tick)
        self.sim.sync()  # physics up to now: the command of the last tick has been executed
        ev = self.task.evaluate(self.sim)
        return TaskOutcome(ev.reward, ev.success, ev.success or tick >= self.task.max_ticks, ev.info)

    # -- tick-by-tick env ----------------------------------------------------------------
    def reset(self, seed: int) -> Observation:
        self.begin(seed)
        return self._observe()

    def make_expert(self, seed: int | None = None, noise_m: float = 0.0) -> Expert:
        """The task's scripted expert for the current episode (seeded by `seed`, default
        the episode's seed)."""
        expert = self.task.make_expert(self.sim, noise_m=noise_m)
        expert.reset(np.random.default_rng((self.seed if seed is None else seed) + SEED_STRIDE))
        return expert

    def step(self, target_rad: np.ndarray) -> Step:
        """Command (J,) joint targets through SafeRobot, wait one tick, observe."""
        sent = self.robot.command(target_rad)
        self._rate.sleep()
        out = self.score(self.tick + 1)
        return Step(self._observe(), sent, out.reward, out.success, out.done, out.info)

    def camera_rig(self) -> CameraRig:
        """The exact calibration of the rendered cameras (`robotrl.hardware.camera_geometry`),
        the tracked object being the tasks' red ball."""
        return camera_rig(self.sim.model, self.sim.arm.ee_frame, self.sim.spec.cameras, 2 * BALL_RADIUS_M)

    def close(self) -> None:
        self.robot.disconnect()

    @property
    def overruns(self) -> int:
        """Ticks whose work took longer than the control period (wall clock only)."""
        return self._rate.overruns

    def _observe(self) -> Observation:
        return Observation(self.robot.read(), self.task.env_state(self.sim), self.instruction, self.tick)
