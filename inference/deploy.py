"""Deploy loop: one robot (simulated or real) driven by a remote `PolicyServer` through
the `Executor`, paced on the wall clock, with a live status line and per-episode results.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np

from robotrl.inference.chunking import DelayEstimator
from robotrl.inference.executor import Executor
from robotrl.inference.remote import RemoteChunkSource, initial_delay_ticks
from robotrl.inference.stepped import EnvRobot
from robotrl.wire.client import ClientSocket
from robotrl.wire.errors import WireError


@dataclass
class DeployEpisode:
    seed: int
    success: bool
    ticks: int
    missed_ticks: int
    """Ticks whose work overran the control period."""
    pauses: int
    """Ticks the arm held for lack of a queued action."""
    delays_ticks: list[int] = field(default_factory=list)
    """Measured inference delay of every chunk (request tick to arrival tick)."""
    versions: list[int] = field(default_factory=list)
    step_clamps: int = 0


def deploy_episode(session, client: ClientSocket, server_info: dict, *, seed: int, mode: str,
                   max_ticks: int, robot_id: str = "robot0", status=None,
                   lag_deadband_rad: np.ndarray | float | None = None) -> DeployEpisode:
    """Run one episode of `session` (a `TaskEnv` on a `WallClock` or a `RobotSession`);
    `lag_deadband_rad` as for `Executor`."""
    obs = session.reset(seed)
    rate_hz = session.spec.control_rate_hz
    horizon = int(server_info["horizon"])
    source = RemoteChunkSource(client, robot_id, session.spec.num_joints)
    env_state = (lambda: session.task.env_state(session.sim)) if hasattr(session, "task") else None
    robot = EnvRobot(session)
    executor = Executor(robot, source, horizon, mode, instruction=obs.instruction, lost_errors=(WireError,),
                        delay=DelayEstimator(initial_ticks=initial_delay_ticks(server_info, rate_hz)),
                        env_state=env_state, lag_deadband_rad=lag_deadband_rad)
    overruns_before = session.overruns
    clamps_before = session.robot.stats.step_clamps
    start = time.monotonic()
    for _ in range(max_ticks):
        executor.tick()
        if status is not None and len(executor.trace) % 15 == 0:
            status(executor, session.overruns - overruns_before, time.monotonic() - start)
        if robot.last_step is not None and robot.last_step.done:
            break
    return DeployEpisode(
        seed=seed, success=bool(robot.last_step is not None and robot.last_step.success),
        ticks=len(executor.trace), missed_ticks=session.overruns - overruns_before, pauses=executor.pauses,
        delays_ticks=[r.arrival_tick - r.obs_tick for r in executor.received],
        versions=sorted({r.chunk.version for r in executor.received}),
        step_clamps=session.robot.stats.step_clamps - clamps_before)


def print_status(executor: Executor, missed: int, elapsed_s: float) -> None:
    """One live line: control rate, missed ticks, delay estimate, weight version."""
    last = executor.trace[-1]
    fps = len(executor.trace) / max(elapsed_s, 1e-9)
    sys.stdout.write(f"\r  {fps:5.1f} Hz  missed {missed:3d}  delay {executor.delay.estimate():2d} ticks  "
                     f"version {max(last.version, 0)}  paused {executor.pauses:3d}   ")
    sys.stdout.flush()


def delay_summary(episodes: list[DeployEpisode]) -> dict[str, float]:
    delays = np.asarray([d for e in episodes for d in e.delays_ticks], dtype=np.float64)
    if delays.size == 0:
        return {}
    return {"p50": float(np.percentile(delays, 50)), "p95": float(np.percentile(delays, 95)),
            "max": float(delays.max())}
