"""Real-time episodes through the deploy path a real arm uses (docs/benchmarks.md: real-time mode).

A `PolicyServer` on loopback ZMQ, a `ClientSocket`, and the episode runner (executor +
`RemoteChunkSource`) driving a `TaskEnv` on the wall clock behind `SafeRobot`. Two
loop-level perturbations exist only here:
- latency distribution: the server holds each reply to d ticks after its request arrived,
  d drawn per call (`ReplyHold`: the model's own compute counts toward it; a slower model
  takes its own time);
- control-rate jitter: each tick's command goes out U(0, jitter * dt) late (a random
  sleep), so the physics between commands runs irregularly long; stepped mode cannot do
  this (its physics step per tick is fixed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from robotrl.bench.cells import PIPELINED_MODES, BenchSetup, make_env, setup_policy
from robotrl.inference.delayed import DelaySpec, ReplyHold
from robotrl.inference.runner import EpisodeResult, TickEvent
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


class Jitter:
    """An episode-runner observer that sleeps U(0, `late_s`) seconds after every tick, so
    the next tick's reading and command come late (control-rate jitter)."""

    def __init__(self, late_s: float, seed: int) -> None:
        self.late_s = late_s
        self._rng = np.random.default_rng(seed)

    def on_episode_start(self, seed: int, instruction: str) -> None:
        pass

    def on_tick(self, event: TickEvent) -> None:
        time.sleep(self._rng.uniform(0.0, self.late_s))

    def on_episode_end(self, result: EpisodeResult) -> None:
        pass


def run_realtime_cell(setup: BenchSetup, cell: RealtimeCell) -> dict:
    """One wall-clock episode; its JSON-ready record."""
    from robotrl.core.clock import WallClock
    from robotrl.inference.executor import ExecutorConfig
    from robotrl.inference.remote import remote_executor
    from robotrl.inference.runner import EpisodeRunner
    from robotrl.inference.server import PolicyServer, ServerConfig
    from robotrl.inference.stepped import ExpertChunkPolicy
    from robotrl.wire.client import ClientSocket

    if cell.mode not in REALTIME_MODES:
        raise ValueError(f"real-time mode must be one of {REALTIME_MODES}, got {cell.mode!r}")
    env = make_env(setup, cell.scenario, clock=WallClock())
    policy = (
        setup_policy(setup)
        if setup.checkpoint
        else ExpertChunkPolicy(env.make_expert(cell.seed), setup.horizon, env.spec)
    )
    hold = None if cell.latency is None else ReplyHold(cell.latency, env.dt_s, cell.seed)
    observers = [Jitter(cell.jitter * env.dt_s, cell.seed)] if cell.jitter > 0 else []
    in_flight = setup.max_in_flight if cell.mode in PIPELINED_MODES else 1
    config = ExecutorConfig(
        cell.mode, setup.threshold, lag_deadband_rad=setup.lag_deadband_rad, max_in_flight=in_flight
    )
    server_config = ServerConfig(endpoint="tcp://127.0.0.1:*", warmup_calls=2, model_workers=in_flight)
    try:
        with PolicyServer(policy, server_config, hold=hold) as server:
            with ClientSocket(server.endpoint, robot_id="bench") as client:
                info = client.connect(timeout_s=10.0)
                policy.reset()
                executor = remote_executor(env.robot, client, info, config, robot_id="bench")
                runner = EpisodeRunner(env.robot, env, executor, env.clock, observers=observers)
                ep = runner.run(cell.seed, max_ticks=cell.max_ticks)
    finally:
        env.close()
    delays = np.asarray(ep.delays_ticks(), dtype=np.float64)
    return {
        "key": cell.key,
        "variant": cell.variant,
        "scenario": cell.scenario.name,
        "mode": cell.mode,
        "seed": cell.seed,
        "success": bool(ep.success),
        "ticks": ep.ticks,
        "missed_ticks": ep.missed_ticks,
        "pauses": ep.pauses,
        "step_clamps": ep.step_clamps,
        "chunks": len(ep.received),
        "delay_p50_ticks": float(np.percentile(delays, 50)) if delays.size else None,
        "delay_max_ticks": float(delays.max()) if delays.size else None,
    }
