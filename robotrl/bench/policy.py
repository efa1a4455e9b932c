"""`robotrl bench policy`: success rate of a chunk policy in simulation.

Stepped simulation (SimClock, deterministic per seed), synchronous chunk execution:
observe, predict a chunk (delay 0), execute its first s rows, observe again. A policy
with a slow pathway (`encode_slow`) refreshes its latent every `slow_every` chunks and
is told the latent's age; the latent age distribution is reported.

Seeds start at `EVAL_SEED0`, far from the recorder's default seeds (0, 1, ...), so
evaluation episodes are never training episodes.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from robotrl.episode import Observation
from robotrl.policies.base import ChunkPolicy, PolicyObservation
from robotrl.sim.env import TaskEnv
from robotrl.sim.rollout import EpisodeResult, wilson_interval

EVAL_SEED0 = 100_000


def to_policy_observation(obs: Observation, delay_ticks: int = 0) -> PolicyObservation:
    return PolicyObservation(state_rad=obs.state.q_rad, tick=obs.tick, instruction=obs.instruction,
                             images=obs.state.images, env_state=obs.env_state, delay_ticks=delay_ticks)


@dataclass
class ChunkedEpisode:
    result: EpisodeResult
    chunks: int
    predict_s: list[float] = field(default_factory=list)
    """Seconds per chunk (slow encoding included when it ran)."""
    latent_ages: list[int] = field(default_factory=list)
    """Latent age in ticks at each chunk (slow-pathway policies)."""


def make_env(policy: ChunkPolicy, task: str, scenario: str = "nominal") -> TaskEnv:
    """A stepped TaskEnv rendering the policy's cameras at its image size."""
    from robotrl.hardware.robot import CameraSpec

    meta = policy.metadata
    size = meta.image_size_px
    return TaskEnv(task, scenario, cameras=tuple(CameraSpec(c, size, size) for c in meta.cameras))


def run_chunked_episode(env: TaskEnv, policy: ChunkPolicy, seed: int, execute_steps: int,
                        slow_every: int = 1, rtc_prefix: bool = False) -> ChunkedEpisode:
    """One episode of synchronous chunked execution; `execute_steps` rows per chunk.

    rtc_prefix: give each request the previous chunk's unexecuted rows as
    `prefix_rad` (delay 0), so an RTC-capable policy continues its plan smoothly."""
    stats = env.robot.stats
    clamps_before = stats.step_clamps + stats.limit_clamps + stats.workspace_clamps
    obs = env.reset(seed)
    policy.reset()
    encode = getattr(policy, "encode_slow", None)
    latent, latent_tick, total, chunks = None, 0, 0.0, 0
    out = ChunkedEpisode(result=None, chunks=0)  # type: ignore[arg-type]
    step = None
    remaining = None
    while step is None or not step.done:
        pobs = to_policy_observation(obs)
        if rtc_prefix and remaining is not None and len(remaining):
            pobs.prefix_rad = remaining
        start = time.perf_counter()
        if encode is not None:
            if latent is None or chunks % slow_every == 0:
                latent, latent_tick = encode(pobs), obs.tick
            out.latent_ages.append(obs.tick - latent_tick)
            chunk = policy.predict_chunk(pobs, latent, obs.tick - latent_tick)
        else:
            chunk = policy.predict_chunk(pobs)
        out.predict_s.append(time.perf_counter() - start)
        chunks += 1
        remaining = chunk.actions_rad[execute_steps:]
        for row in chunk.actions_rad[:execute_steps]:
            step = env.step(row)
            total += step.reward
            obs = step.obs
            if step.done:
                break
    clamps = stats.step_clamps + stats.limit_clamps + stats.workspace_clamps - clamps_before
    out.result = EpisodeResult(seed, bool(step.success), float(total), env.tick, int(clamps))
    out.chunks = chunks
    return out


def evaluate(policy: ChunkPolicy, task: str, episodes: int = 50, *, seed0: int = EVAL_SEED0,
             execute_steps: int | None = None, scenario: str = "nominal", slow_every: int = 1,
             rtc_prefix: bool = False, progress: bool = True) -> dict:
    """Success rate with its 95% Wilson interval, returns, lengths, timing, latent ages."""
    from tqdm import tqdm

    meta = policy.metadata
    s = execute_steps or getattr(getattr(policy, "config", None), "execute_steps", None) or meta.horizon
    if not 1 <= s <= meta.horizon:
        raise ValueError(f"execute_steps must be in 1..{meta.horizon}, got {s}")
    env = make_env(policy, task, scenario)
    runs: list[ChunkedEpisode] = []
    try:
        for seed in tqdm(range(seed0, seed0 + episodes), desc=f"eval {task}", unit="ep", disable=not progress,
                         leave=False):
            runs.append(run_chunked_episode(env, policy, seed, s, slow_every, rtc_prefix))
    finally:
        env.close()
    results = [r.result for r in runs]
    wins = int(sum(bool(r.success) for r in results))
    low, high = wilson_interval(wins, episodes)
    times = np.array([t for r in runs for t in r.predict_s]) * 1e3
    ages = Counter(a for r in runs for a in r.latent_ages)
    return {
        "policy_type": meta.policy_type, "task": task, "scenario": scenario, "episodes": episodes,
        "seeds": [seed0, seed0 + episodes - 1], "execute_steps": s, "horizon": meta.horizon,
        "slow_every": slow_every, "rtc_prefix": rtc_prefix, "successes": wins, "success_rate": wins / episodes,
        "wilson95_low": low, "wilson95_high": high,
        "mean_return": float(np.mean([r.return_ for r in results])),
        "mean_ticks": float(np.mean([r.ticks for r in results])),
        "mean_ticks_success": float(np.mean([r.ticks for r in results if r.success])) if wins else None,
        "safety_clamps": int(sum(r.safety_clamps for r in results)),
        "chunk_ms_p50": float(np.percentile(times, 50)), "chunk_ms_p95": float(np.percentile(times, 95)),
        "latent_age_ticks": {str(k): v for k, v in sorted(ages.items())},
        "failed_seeds": [int(r.seed) for r in results if not r.success],
    }


def summary_rows(results: dict) -> list[tuple[str, object]]:
    r = results
    return [
        ("policy", r["policy_type"]), ("task / scenario", f"{r['task']} / {r['scenario']}"),
        ("episodes (seeds)", f"{r['episodes']} ({r['seeds'][0]}..{r['seeds'][1]})"),
        ("execution", f"synchronous, {r['execute_steps']} of {r['horizon']} rows per chunk"
                      + (", RTC prefix" if r.get("rtc_prefix") else "")),
        ("success", f"{r['successes']}/{r['episodes']} = {r['success_rate']:.1%}"),
        ("Wilson 95% interval", f"[{r['wilson95_low']:.1%}, {r['wilson95_high']:.1%}]"),
        ("mean return", round(r["mean_return"], 3)), ("mean episode ticks", round(r["mean_ticks"], 1)),
        ("safety clamps", r["safety_clamps"]),
        ("chunk time p50 / p95 (ms)", f"{r['chunk_ms_p50']:.1f} / {r['chunk_ms_p95']:.1f}"),
        ("latent age (ticks: chunks)", ", ".join(f"{k}: {v}" for k, v in r["latent_age_ticks"].items()) or "-"),
    ]
