"""The recording loop: teleop -> SafeRobot -> one dataset frame per control tick.

Each frame stores the observation the operator saw, the **executed** action (what
`SafeRobot.command` returned), the teleop action, the measured time and the task.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from robotrl.core.episode import Observation, Step
from robotrl.core.robot import RobotSpec
from robotrl.hardware.teleop.base import TeleopCommand, TeleopDevice
from robotrl.record import features as F
from robotrl.record.disturbance import Disturbance
from robotrl.record.writer import DatasetWriter


class Session(Protocol):
    """A robot to record from: `robotrl.sim.env.TaskEnv` or `RobotSession`."""

    instruction: str

    @property
    def env_state_dim(self) -> int: ...

    @property
    def spec(self) -> RobotSpec: ...

    @property
    def overruns(self) -> int: ...

    def reset(self, seed: int) -> Observation: ...

    def step(self, target_rad: np.ndarray) -> Step: ...


class RecordObserver(Protocol):
    """Told what a recording does, as it does it (e.g. `robotrl.record.beacon.RecordBeacon`)."""

    def on_episode_start(self, seed: int) -> None:
        """An episode of `seed` starts (the scene is reset, nothing stored yet)."""
        ...

    def on_tick(self) -> None:
        """One control tick ran (its frame stored, or a reset tick between episodes)."""
        ...

    def on_episode_end(self, saved: bool) -> None:
        """The episode ended, saved to the dataset or discarded (it failed; a re-recorded
        episode starts again instead)."""
        ...


@dataclass
class EpisodeOutcome:
    frames: int
    success: bool
    rerecord: bool
    stop: bool
    overruns: int
    """Ticks that took longer than the control period (never stamped at nominal time)."""
    duration_s: float
    """Measured episode duration on the session's clock."""
    wall_s: float
    """Wall-clock time the episode took, reset included."""
    ticks_wall_s: float
    """Wall-clock time from the first tick to the last frame (reset excluded)."""


def make_frame(obs: Observation, step: Step, cmd: TeleopCommand, t0_s: float, env_state_dim: int) -> dict:
    """The dataset frame of one tick (observation before the action, action after safety)."""
    frame = {
        F.STATE: obs.state.q_rad.astype(np.float32),
        F.ACTION: np.asarray(step.sent_rad, dtype=np.float32),
        F.TELEOP_ACTION: np.asarray(cmd.target_rad, dtype=np.float32),
        F.MEASURED_TIME: np.array([obs.state.timestamp_s - t0_s], dtype=np.float32),
        F.REWARD: np.array([step.reward], dtype=np.float32),
        F.SUCCESS: np.array([step.success or cmd.events.success]),
        "task": obs.instruction,
    }
    if env_state_dim:
        frame[F.ENV_STATE] = np.asarray(obs.env_state, dtype=np.float32)
    for camera, image in obs.state.images.items():
        frame[F.image_key(camera)] = image
    if obs.state.images:
        ages = [obs.state.image_ages_s.get(camera, 0.0) for camera in obs.state.images]
        frame[F.CAMERA_AGE] = np.array(ages, dtype=np.float32)
    return frame


def record_episode(
    session: Session,
    teleop: TeleopDevice,
    writer: DatasetWriter,
    seed: int,
    max_ticks: int,
    disturbance: Disturbance | None = None,
    observer: RecordObserver | None = None,
) -> EpisodeOutcome:
    """Record one episode into `writer`'s buffer (the caller saves or discards it and tells
    `observer` the end). `disturbance`: offsets added to the teleop's targets before
    safety (DART)."""
    wall_start = time.perf_counter()
    writer.prepare()
    overruns_before = session.overruns
    obs = session.reset(seed)
    teleop.reset(obs.state)
    if disturbance is not None:
        disturbance.reset(seed)
    if observer is not None:
        observer.on_episode_start(seed)
    t0_s = obs.state.timestamp_s
    ticks_start = time.perf_counter()
    frames, success, events = 0, False, None
    for _ in range(max_ticks):
        cmd = teleop.read(obs.state)
        events = cmd.events
        if events.rerecord:
            writer.discard_episode()
            break
        step = session.step(cmd.target_rad if disturbance is None else cmd.target_rad + disturbance())
        writer.add_frame(make_frame(obs, step, cmd, t0_s, session.env_state_dim))
        frames += 1
        if observer is not None:
            observer.on_tick()
        success = step.success or events.success
        obs = step.obs
        if step.done or events.ends_episode:
            break
    return EpisodeOutcome(
        frames=frames,
        success=success and not events.failure if events else success,
        rerecord=bool(events and events.rerecord),
        stop=bool(events and events.stop),
        overruns=session.overruns - overruns_before,
        duration_s=obs.state.timestamp_s - t0_s,
        wall_s=time.perf_counter() - wall_start,
        ticks_wall_s=time.perf_counter() - ticks_start,
    )
