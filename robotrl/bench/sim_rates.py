"""`robotrl bench sim`: what a control step of `SafeRobot(SimRobot)` costs against the raw
MuJoCo physics it contains, and off-screen render rate.

A state-only control step is read() + command() + one control period of physics
(16 mj_steps at 30 Hz). Both loops drive the arm through the same swaying targets, so
physics does the same work. Cost ratio = control-step time / time of its 16 raw
mj_steps (Python loop, actuators set directly); the target is <= 2.
"""

from __future__ import annotations

import statistics
import time

import mujoco
import numpy as np

from robotrl.core.clock import SimClock
from robotrl.core.robot import CameraSpec
from robotrl.hardware.models import get_arm
from robotrl.hardware.safety import SafeRobot
from robotrl.hardware.sim_arm.robot import HOME_Q_RAD, SimRobot
from robotrl.hardware.sim_arm.scene import build_arm_spec


def sway_targets(ticks: int, dt_s: float) -> np.ndarray:
    """(ticks, 6) joint targets swaying +-0.3 rad around home at 0.5 Hz (inside every
    safety limit), so physics does the same work in both measurements."""
    phase = np.sin(np.pi * dt_s * np.arange(ticks))[:, None]
    return HOME_Q_RAD + 0.3 * phase * np.array([1.0, 0.5, 0.5, 0.5, 1.0, 0.0])


def raw_step_rate(model: mujoco.MjModel, targets: np.ndarray, substeps: int) -> float:
    """mj_step calls per second from a Python loop, driving the actuators straight to
    `targets` (one row per control tick, `substeps` steps each)."""
    data = mujoco.MjData(model)
    data.qpos[:6] = HOME_Q_RAD
    start = time.perf_counter()
    for target in targets:
        data.ctrl[:6] = target
        for _ in range(substeps):
            mujoco.mj_step(model, data)
    return len(targets) * substeps / (time.perf_counter() - start)


def control_step_rate(model: mujoco.MjModel, targets: np.ndarray) -> float:
    """SafeRobot(SimRobot) control steps per second (read, command, one tick of physics),
    state only."""
    robot = SafeRobot(SimRobot(model, cameras=()))
    robot.connect()
    clock = robot.clock
    assert isinstance(clock, SimClock)  # SafeRobot takes SimRobot's own SimClock
    dt_s = robot.spec.dt_s
    start = time.perf_counter()
    for target in targets:
        robot.read()
        robot.command(target)
        clock.advance(dt_s)
    rate = len(targets) / (time.perf_counter() - start)
    robot.disconnect()
    return rate


def render_rate(model: mujoco.MjModel, frames: int, size_px: int = 224) -> float:
    """Front-camera frames per second at size x size."""
    robot = SimRobot(model, cameras=(CameraSpec("front", size_px, size_px),))
    robot.connect()
    start = time.perf_counter()
    for _ in range(frames):
        robot.read()
    rate = frames / (time.perf_counter() - start)
    robot.disconnect()
    return rate


def run(arm: str = "so101", repeats: int = 5, ticks: int = 600, frames: int = 100) -> dict:
    """Medians over `repeats` of each rate; the ratio is computed per repeat."""
    model = build_arm_spec(get_arm(arm)).compile()
    substeps = round(1.0 / (30.0 * model.opt.timestep))
    targets = sway_targets(ticks, 1.0 / 30.0)
    raw, control, ratios = [], [], []
    for _ in range(repeats):
        raw_rate = raw_step_rate(model, targets, substeps)
        ctrl_rate = control_step_rate(model, targets)
        raw.append(raw_rate)
        control.append(ctrl_rate)
        ratios.append((1.0 / ctrl_rate) / (substeps / raw_rate))
    fps = [render_rate(model, frames) for _ in range(max(1, repeats // 2))]
    return {
        "arm": arm,
        "substeps_per_tick": substeps,
        "repeats": repeats,
        "raw_mj_step_per_s": statistics.median(raw),
        "control_steps_per_s": statistics.median(control),
        "control_step_cost_vs_raw_physics": statistics.median(ratios),
        "target_cost_ratio": 2.0,
        "render_fps_224": statistics.median(fps),
    }
