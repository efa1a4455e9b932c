"""Real-time episodes through the deploy path a real arm uses (METRICS.md: real-time mode).

A `PolicyServer` on loopback ZMQ, a `ClientSocket`, and `deploy_episode` (executor +
`RemoteChunkSource`) driving a `TaskEnv` on the wall clock behind `SafeRobot`. Two
loop-level perturbations exist only here:
- latency distribution: the served policy sleeps d * dt per call, d drawn per call;
- control-rate jitter: each tick's command goes out U(0, jitter * dt) late (a random
  sleep), so the physics between commands runs irregularly long; stepped mode cannot do
  this (its physics step per tick is fixed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from robotrl.bench.cells import BenchSetup, DelaySpec, load_checkpoint, make_env
from robotrl.sim.scenario import Scenario

REALTIME_MODES = ("sync", "naive", "vlash", "vlash+rtc")
"""Modes the deploy path's `Executor` has (no ensemble)."""


@dataclass(frozen=True)
class RealtimeCell:
    """One real-time episode of `variant` (the perturbation's name)."""

    variant: str
    scenario: Scenario
    mode: str
    seed: int
    max_ticks: int
    """Episode cut off after this many ticks (or the task's own limit)."""
    latency: DelaySpec | None = None
    """Extra model time per call in control ticks (None: the policy's own)."""
    jitter: float = 0.0
    """Control-rate jitter: commands go out up to this fraction of a period late."""

    @property
    def key(self) -> str:
        return f"realtime|{self.variant}|{self.mode}|{self.seed}|{self.max_ticks}"


class JitteredSession:
    """A `TaskEnv` whose `step` first sleeps U(0, `late_s`) seconds (everything else is
    the env's own)."""

    def __init__(self, env, late_s: float, seed: int) -> None:
        self.env = env
        self.late_s = late_s
        self._rng = np.random.default_rng(seed)

    def __getattr__(self, name: str):
        return getattr(self.env, name)

    def step(self, target_rad: np.ndarray):
        time.sleep(self._rng.uniform(0.0, self.late_s))
        return self.env.step(target_rad)


class DelayedPolicy:
    """A `ChunkPolicy` that sleeps d * `dt_s` per call, d drawn from `delay` (seeded)."""

    def __init__(self, policy, delay: DelaySpec, dt_s: float, seed: int) -> None:
        self.policy, self.delay, self.dt_s = policy, delay, dt_s
        self._rng = np.random.default_rng(seed)

    @property
    def metadata(self):
        return self.policy.metadata

    def predict_chunk(self, obs):
        time.sleep(self.delay.draw(self._rng) * self.dt_s)
        return self.policy.predict_chunk(obs)

    def reset(self) -> None:
        self.policy.reset()


def run_realtime_cell(setup: BenchSetup, cell: RealtimeCell) -> dict:
    """One wall-clock episode; its JSON-ready record."""
    from robotrl.clock import WallClock
    from robotrl.inference.chunking import arm_deadband
    from robotrl.inference.deploy import deploy_episode
    from robotrl.inference.server import PolicyServer, ServerConfig
    from robotrl.inference.stepped import ExpertChunkPolicy
    from robotrl.wire.client import ClientSocket

    if cell.mode not in REALTIME_MODES:
        raise ValueError(f"real-time mode must be one of {REALTIME_MODES}, got {cell.mode!r}")
    env = make_env(setup, cell.scenario, clock=WallClock())
    policy = (load_checkpoint(setup.checkpoint) if setup.checkpoint
              else ExpertChunkPolicy(env.make_expert(cell.seed), setup.horizon, env.spec))
    if cell.latency is not None:
        policy = DelayedPolicy(policy, cell.latency, env.dt_s, cell.seed)
    session = JitteredSession(env, cell.jitter * env.dt_s, cell.seed) if cell.jitter > 0 else env
    try:
        with PolicyServer(policy, ServerConfig(endpoint="tcp://127.0.0.1:*", warmup_calls=2)) as server:
            with ClientSocket(server.endpoint, robot_id="bench") as client:
                info = client.connect(timeout_s=10.0)
                policy.reset()
                ep = deploy_episode(session, client, info, seed=cell.seed, mode=cell.mode, max_ticks=cell.max_ticks,
                                    lag_deadband_rad=arm_deadband(env.spec.num_joints, setup.lag_deadband_rad))
    finally:
        env.close()
    delays = np.asarray(ep.delays_ticks, dtype=np.float64)
    return {
        "key": cell.key, "variant": cell.variant, "scenario": cell.scenario.name,
        "mode": cell.mode, "seed": cell.seed, "success": bool(ep.success), "ticks": ep.ticks,
        "missed_ticks": ep.missed_ticks, "pauses": ep.pauses, "step_clamps": ep.step_clamps,
        "delay_p50_ticks": float(np.percentile(delays, 50)) if delays.size else None,
        "delay_max_ticks": float(delays.max()) if delays.size else None,
    }
