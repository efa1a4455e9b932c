"""`run_actor_episode`: one episode of a simulated actor in an online-learning run.

Ties an `Executor` (any `ChunkSource`: a local policy, or a policy server through
`RemoteChunkSource` / `SteppedRemoteSource`), the `TaskEnv` seen as a robot (`EnvRobot`),
an optional intervention hook (e.g. `robotrl.sim.intervener.ScriptedIntervener`) and an
optional `TransitionStreamer` to the learner. Each row streamed is the observation the
env gave before the tick, what was executed (post-safety), the policy's own row, the
reward, the intervention flag, the chunk's weight version and delay.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from robotrl.inference.chunking import DelayEstimator
from robotrl.inference.executor import Executor, TickRecord
from robotrl.inference.stepped import EnvRobot


@dataclass
class ActorEpisode:
    """Outcome of one actor episode."""

    seed: int
    success: bool
    ticks: int
    intervention_ticks: int
    """Ticks whose executed target came from the intervention hook."""
    takeovers: int
    """Times the hook took over (0 without a `ScriptedIntervener`)."""
    versions: list[int]
    """Weight versions of the chunks executed, ascending (holds excluded)."""
    pauses: int
    episode_return: float
    trace: list[TickRecord]


def run_actor_episode(env, source, streamer, intervener, mode: str, seed: int, *, horizon: int,
                      threshold: float = 0.5, delay: DelayEstimator | None = None,
                      lost_errors: tuple[type[BaseException], ...] = (), max_ticks: int | None = None,
                      lag_deadband_rad: np.ndarray | float | None = None) -> ActorEpisode:
    """Reset `env` with `seed` and run one episode until it is done.

    Args:
        env: a `TaskEnv`.
        source: the executor's `ChunkSource`.
        streamer: a `TransitionStreamer`, or None to stream nothing.
        intervener: an intervention hook `(tick, requested_rad) -> target | None`; with
            `begin_episode(seed)` / `end_episode(success)` methods they are called too.
        mode: executor mode (`robotrl.inference.executor.MODES`).
        horizon: H rows per chunk of the policy behind `source`.
        threshold, delay, lost_errors, lag_deadband_rad: as for `Executor`.
        max_ticks: end the episode after this many ticks (a real arm never ends by itself).

    The episode also ends when the hook sets `outcome` (a human pressed success or
    failure, `TeleopIntervention`); that label is the episode's success and a success
    earns reward 1 on the last tick (a real arm has no reward of its own).
    """
    obs = env.reset(seed)
    if hasattr(intervener, "begin_episode"):
        intervener.begin_episode(seed)
    if streamer is not None:
        streamer.begin_episode(env.instruction)
    robot = EnvRobot(env)
    executor = Executor(robot, source, horizon, mode, threshold=threshold, delay=delay,
                        instruction=env.instruction, lost_errors=lost_errors,
                        env_state=(lambda: env.task.env_state(env.sim)) if hasattr(env, "task") else None,
                        intervention=intervener, lag_deadband_rad=lag_deadband_rad)
    episode_return, success = 0.0, False
    while True:
        record = executor.tick()
        step = robot.last_step
        outcome = getattr(intervener, "outcome", None)
        ended = step.done or outcome is not None or (max_ticks is not None and len(executor.trace) >= max_ticks)
        reward = 1.0 if outcome and not step.done else step.reward
        success = bool(step.success) if outcome is None else outcome
        episode_return += reward
        if streamer is not None:
            policy_row = record.requested_rad if record.policy_rad is None else record.policy_rad
            streamer.record(record.tick, obs.state.q_rad, obs.state.images, obs.env_state, record.sent_rad,
                            policy_row, reward, record.intervened, record.version, record.delay_ticks)
        obs = step.obs
        if ended:
            break
    if streamer is not None:
        streamer.end_episode(success)
    if hasattr(intervener, "end_episode"):
        intervener.end_episode(success)
    trace = executor.trace
    return ActorEpisode(
        seed=seed, success=success, ticks=len(trace),
        intervention_ticks=sum(r.intervened for r in trace),
        takeovers=getattr(intervener, "episode_takeovers", 0),
        versions=sorted({r.version for r in trace if r.version >= 0}), pauses=executor.pauses,
        episode_return=float(episode_return), trace=trace)


def actor_episodes(env, client, server_info: dict, *, episodes: int, seed: int, mode: str, robot_id: str,
                   streamer=None, intervener=None, stepped_delay: int | None = None, log=None,
                   wall_start_s: float | None = None, max_ticks: int | None = None,
                   lag_deadband_rad: np.ndarray | float | None = None) -> list[ActorEpisode]:
    """Run `episodes` episodes (seeds `seed`, `seed + 1`, ...) of `env` against the policy
    server behind `client` (connected; `server_info` its hello reply).

    Args:
        stepped_delay: None: the env runs on its own (wall) clock and chunks arrive when
            they arrive; an int d: every chunk is taken in exactly d ticks after its request
            (`SteppedRemoteSource`; the env should run on a `SimClock`).
        log: optional `robotrl.learn.metrics.CsvLog`: one row per episode (episode,
            wall_s, robot_id, seed, ticks, success, intervention_ticks, intervention_rate,
            takeovers, episode_return, version_min, version_max).
        wall_start_s: `time.monotonic()` the log's wall_s counts from (default: now).
        lag_deadband_rad: as for `Executor`.
    """
    from robotrl.inference.remote import RemoteChunkSource, SteppedRemoteSource, initial_delay_ticks
    from robotrl.wire.errors import WireError

    start = time.monotonic() if wall_start_s is None else wall_start_s
    remote = RemoteChunkSource(client, robot_id, env.spec.num_joints)
    source = remote if stepped_delay is None else SteppedRemoteSource(remote, stepped_delay)
    first_delay = (initial_delay_ticks(server_info, env.spec.control_rate_hz) if stepped_delay is None
                   else stepped_delay)
    results = []
    for i in range(episodes):
        ep = run_actor_episode(env, source, streamer, intervener, mode, seed + i, horizon=int(server_info["horizon"]),
                               delay=DelayEstimator(initial_ticks=first_delay), lost_errors=(WireError,),
                               max_ticks=max_ticks, lag_deadband_rad=lag_deadband_rad)
        ep.trace = []  # long runs: keep the outcome, not every tick
        results.append(ep)
        if log is not None:
            log.write({"episode": i, "wall_s": round(time.monotonic() - start, 3), "robot_id": robot_id,
                       "seed": ep.seed, "ticks": ep.ticks, "success": int(ep.success),
                       "intervention_ticks": ep.intervention_ticks,
                       "intervention_rate": round(ep.intervention_ticks / max(ep.ticks, 1), 4),
                       "takeovers": ep.takeovers, "episode_return": round(ep.episode_return, 4),
                       "version_min": min(ep.versions, default=-1), "version_max": max(ep.versions, default=-1)})
        print(f"  {robot_id} episode {i + 1}/{episodes} seed {ep.seed}: {'success' if ep.success else 'failure'}, "
              f"{ep.ticks} ticks, {ep.intervention_ticks} intervened, weights v{max(ep.versions, default=-1)}",
              flush=True)
    return results
