"""`SimRobot`: the MuJoCo arm behind the same `Robot` protocol as a real one.

Physics follows a `Clock`: every `read()` and `command()` first steps MuJoCo up to the
clock's time. With a `SimClock` the control loop advances time itself (stepped mode:
deterministic, faster than real time); with a `WallClock` the arm moves in real time.
"""

from __future__ import annotations

import copy
import logging
from collections import deque

import mujoco
import numpy as np

from robotrl.core.clock import Clock, SimClock
from robotrl.core.errors import DeviceNotConnected
from robotrl.core.health import ArmHealth, FrameMeter
from robotrl.core.robot import CameraSpec, RobotSpec, RobotState
from robotrl.hardware.models import ArmModel, get_arm, velocity_limits
from robotrl.hardware.sim_arm.render import CameraRenderer
from robotrl.hardware.sim_arm.scene import build_arm_spec

log = logging.getLogger(__name__)

DEFAULT_CAMERAS = (CameraSpec("front"), CameraSpec("wrist"))
HOME_Q_RAD = np.array([0.0, -1.2, 1.1, 1.3, 0.0, 0.0])
"""Arm folded above the table with the fingers pointing down, gripper closed."""


class SimRobot:
    """A simulated arm in MuJoCo.

    Args:
        model: compiled model from `build_arm_spec` (tasks add objects before compiling);
            None builds the bare arm on its table.
        arm: which arm the model holds ("so101", "so100").
        cameras: frames `read()` renders; () for state-only runs (much faster).
        clock: time source; a fresh `SimClock` (stepped mode) by default.
        control_rate_hz: command rate advertised in the spec.
        q_noise_rad: std of Gaussian noise on measured joint positions (sensor noise).
        camera_latency_ticks: frames show the scene as it was at the reading this many
            control ticks earlier (the episode's first reading before that), as a real
            camera's frames arrive late; `RobotState.image_ages_s` says by how much.
    """

    def __init__(
        self,
        model: mujoco.MjModel | None = None,
        *,
        arm: str | ArmModel = "so101",
        cameras: tuple[CameraSpec, ...] = DEFAULT_CAMERAS,
        clock: Clock | None = None,
        control_rate_hz: float = 30.0,
        q_noise_rad: float = 0.0,
        camera_latency_ticks: int = 0,
    ) -> None:
        if camera_latency_ticks < 0:
            raise ValueError(f"camera_latency_ticks must be >= 0, got {camera_latency_ticks}")
        self.arm = get_arm(arm) if isinstance(arm, str) else arm
        self.model = model if model is not None else build_arm_spec(self.arm).compile()
        self.clock = clock if clock is not None else SimClock()
        self.data: mujoco.MjData | None = None
        self._qadr = np.array([self.model.joint(n).qposadr[0] for n in self.arm.joint_names])
        self._dofadr = np.array([self.model.joint(n).dofadr[0] for n in self.arm.joint_names])
        self._act = np.array([self.model.actuator(n).id for n in self.arm.joint_names])
        ranges = self.model.jnt_range[[self.model.joint(n).id for n in self.arm.joint_names]]
        self._spec = RobotSpec(
            name=self.arm.name,
            joint_names=self.arm.joint_names,
            lower_rad=ranges[:, 0],
            upper_rad=ranges[:, 1],
            max_velocity_rad_s=velocity_limits(self.arm),
            control_rate_hz=control_rate_hz,
            cameras=tuple(cameras),
            ee_frame=self.arm.ee_frame,
        )
        self._renderer: CameraRenderer | None = None
        self._frames = {cam.name: FrameMeter() for cam in self._spec.cameras}
        self._t0_s = 0.0
        self.q_noise_rad = q_noise_rad
        self._rng = np.random.default_rng(0)
        self.camera_latency_ticks = camera_latency_ticks
        self._scenes: deque[mujoco.MjData] = deque(maxlen=camera_latency_ticks + 1)  # the last readings' copies

    @property
    def spec(self) -> RobotSpec:
        return self._spec

    @property
    def is_connected(self) -> bool:
        return self.data is not None

    def connect(self) -> None:
        if self.data is None:
            self.data = mujoco.MjData(self.model)
            if self._spec.cameras:
                self._renderer = CameraRenderer(self.model, self._spec.cameras)
            self.reset()

    def disconnect(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        self.data = None

    def reset(self, q_rad: np.ndarray | None = None, seed: int = 0) -> None:
        """Put the arm at `q_rad` (default `HOME_Q_RAD`) at rest, targets there too;
        `seed` seeds the sensor noise.

        Objects keep the positions in `model.qpos0`; tasks move them after this call.
        """
        data = self._require()
        self._rng = np.random.default_rng(seed)
        mujoco.mj_resetData(self.model, data)
        q = HOME_Q_RAD if q_rad is None else np.asarray(q_rad, dtype=np.float64)
        q = np.clip(q, self._spec.lower_rad, self._spec.upper_rad)
        data.qpos[self._qadr] = q
        data.ctrl[self._act] = q
        mujoco.mj_forward(self.model, data)
        self._t0_s = self.clock.now()
        self._scenes.clear()

    def read(self) -> RobotState:
        data = self.sync()
        images, ages = {}, {}
        if self._renderer is not None:
            shown = self._shown_scene(data)
            images = self._renderer.render(shown)
            ages = dict.fromkeys(images, float(data.time - shown.time))
        for name in images:
            self._frames[name].note(self.clock.now() - ages[name])
        q = data.qpos[self._qadr].copy()
        if self.q_noise_rad > 0:
            q += self._rng.normal(0.0, self.q_noise_rad, q.shape)
        dq = data.qvel[self._dofadr].copy()
        return RobotState(q_rad=q, timestamp_s=self.clock.now(), dq_rad_s=dq, images=images, image_ages_s=ages)

    def _shown_scene(self, data: mujoco.MjData) -> mujoco.MjData:
        """What the cameras show at this reading: `data` itself, or with a camera latency of
        L ticks a copy of `data` as it was at the reading L ticks back (a reading at the same
        physics time as the last one adds none)."""
        if not self.camera_latency_ticks:
            return data
        if not self._scenes or self._scenes[-1].time < data.time:
            self._scenes.append(copy.copy(data))  # mj_copyData: a deep copy
        return self._scenes[0]

    def command(self, target_rad: np.ndarray) -> np.ndarray:
        data = self.sync()
        target = np.asarray(target_rad, dtype=np.float64)
        if target.shape != (self._spec.num_joints,):
            raise ValueError(f"command needs shape ({self._spec.num_joints},), got {target.shape}")
        sent = np.clip(target, self._spec.lower_rad, self._spec.upper_rad)
        data.ctrl[self._act] = sent
        return sent

    def hold(self) -> None:
        try:
            if self.data is not None:
                data = self.sync()
                data.ctrl[self._act] = data.qpos[self._qadr]
        except Exception:  # hold() must never raise
            log.exception("SimRobot.hold failed")

    def health(self) -> ArmHealth:
        """What the model has: each camera's frame rate and newest frame's age (frames are
        rendered at `read()`, showing the scene `camera_latency_ticks` earlier, on this arm's
        clock). No motor bus: no temperatures,
        voltages or bus errors."""
        now = self.clock.now()
        return {"cameras": {name: meter.health(now) for name, meter in self._frames.items()}}

    @property
    def q_true_rad(self) -> np.ndarray:
        """(J,) joint positions without sensor noise (for task scoring)."""
        return self._require().qpos[self._qadr].copy()

    @property
    def sim_time_s(self) -> float:
        """Physics time since the last reset, seconds."""
        return float(self._require().time)

    def sync(self) -> mujoco.MjData:
        """Step physics until it has caught up with the clock."""
        data = self._require()
        behind_s = (self.clock.now() - self._t0_s) - data.time
        steps = int(behind_s / self.model.opt.timestep + 1e-6)
        if steps > 0:
            mujoco.mj_step(self.model, data, nstep=steps)
        return data

    def _require(self) -> mujoco.MjData:
        if self.data is None:
            raise DeviceNotConnected("SimRobot is not connected: call connect() first")
        return self.data
