"""`evaluate`: success rate of a chunk policy in simulation (`robotrl bench policy`, the
trainer's periodic evaluation).

The episode runner in stepped mode (`SimClock`, deterministic per seed) with a
synchronous executor: observe, predict a chunk (delay 0), execute its first s rows,
observe again ("sync+rtc": the unexecuted rows go along as the RTC prefix). A policy with
a slow pathway refreshes its latent every `slow_every` chunks through the same
`LatentCache` the server uses; the latent age distribution is reported.

Seeds start at `EVAL_SEED0`, far from the recorder's default seeds (0, 1, ...), so
evaluation episodes are never training episodes.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from robotrl.core.clock import Clock
from robotrl.core.policy import ChunkPolicy, PolicyMetadata, past_frame_ticks_back
from robotrl.core.robot import CameraSpec
from robotrl.inference.executor import Executor, ExecutorConfig, LocalChunkSource
from robotrl.inference.runner import EpisodeResult, EpisodeRunner
from robotrl.sim.env import TaskEnv
from robotrl.sim.rollout import wilson_interval
from robotrl.sim.scenario import Scenario

EVAL_SEED0 = 100_000


def make_env(
    policy: ChunkPolicy, task: str, scenario: str | Scenario = "nominal", clock: Clock | None = None
) -> TaskEnv:
    """A TaskEnv (stepped, or on `clock`) rendering the policy's cameras at its image size,
    each episode starting at the policy's start pose, where its training episodes began
    (`deploy` drives a real arm there first); at home for a policy that names none."""
    meta = policy.metadata
    size = meta.image_size_px
    cameras = tuple(CameraSpec(c, size, size) for c in meta.cameras)
    start_rad = np.asarray(meta.start_state_rad, np.float64) if meta.start_state_rad else None
    return TaskEnv(task, scenario, cameras=cameras, clock=clock, start_rad=start_rad)


def evaluation_episode(
    env: TaskEnv, policy: ChunkPolicy, seed: int, config: ExecutorConfig, slow_every: int = 1
) -> tuple[EpisodeResult, LocalChunkSource]:
    """One evaluation episode: `policy` through a `LocalChunkSource` (delay 0) and the
    episode runner on `env`'s clock; the result and the source (its timings and latents)."""
    policy.reset()
    source = LocalChunkSource(policy, 0, seed=seed, slow_every=slow_every)
    meta = policy.metadata
    executor = Executor(
        env.robot,
        source,
        meta.horizon,
        config,
        past_frame_ticks=meta.past_frame_ticks,
        past_frames=meta.past_frames,
    )
    return EpisodeRunner(env.robot, env, executor, env.clock).run(seed), source


def evaluate(
    policy: ChunkPolicy,
    task: str,
    episodes: int = 50,
    *,
    seed0: int = EVAL_SEED0,
    execute_steps: int | None = None,
    scenario: str = "nominal",
    slow_every: int = 1,
    rtc_prefix: bool = False,
    progress: bool = True,
) -> dict:
    """Success rate with its 95% Wilson interval, returns, lengths, timing, latent ages."""
    from tqdm import tqdm

    meta = policy.metadata
    s = execute_steps or meta.execute_steps or meta.horizon
    if not 1 <= s <= meta.horizon:
        raise ValueError(f"execute_steps must be in 1..{meta.horizon}, got {s}")
    config = ExecutorConfig("sync+rtc" if rtc_prefix else "sync", execute_horizon=s)
    env = make_env(policy, task, scenario)
    results: list[EpisodeResult] = []
    times_s: list[float] = []
    ages: Counter[int] = Counter()
    try:
        for seed in tqdm(
            range(seed0, seed0 + episodes), desc=f"eval {task}", unit="ep", disable=not progress, leave=False
        ):
            result, source = evaluation_episode(env, policy, seed, config, slow_every)
            results.append(result)
            times_s += source.predict_s
            ages.update(source.latents.ages() if source.latents is not None else [])
    finally:
        env.close()
    wins = int(sum(r.success for r in results))
    low, high = wilson_interval(wins, episodes)
    times = np.array(times_s) * 1e3
    return {
        "policy_type": meta.policy_type,
        "inputs": policy_inputs(meta),
        "task": task,
        "scenario": scenario,
        "episodes": episodes,
        "seeds": [seed0, seed0 + episodes - 1],
        "execute_steps": s,
        "horizon": meta.horizon,
        "slow_every": slow_every,
        "rtc_prefix": rtc_prefix,
        "successes": wins,
        "success_rate": wins / episodes,
        "wilson95_low": low,
        "wilson95_high": high,
        "mean_return": float(np.mean([r.episode_return for r in results])),
        "mean_ticks": float(np.mean([r.ticks for r in results])),
        "mean_ticks_success": float(np.mean([r.ticks for r in results if r.success])) if wins else None,
        "safety_clamps": int(sum(r.safety_clamps for r in results)),
        "chunk_ms_p50": float(np.percentile(times, 50)),
        "chunk_ms_p95": float(np.percentile(times, 95)),
        "latent_age_ticks": {str(k): v for k, v in sorted(ages.items())},
        "failed_seeds": [int(r.seed) for r in results if not r.success],
    }


def policy_inputs(meta: PolicyMetadata) -> list[str]:
    """What the policy reads, e.g. ["joints (6)", "camera front 64 px", "sim state (9): sim only"]."""
    ticks = ", ".join(map(str, past_frame_ticks_back(meta.past_frame_ticks, meta.past_frames)))
    frames = "frame" if meta.past_frames == 1 else "frames"
    past = f" + its {frames} {ticks} ticks earlier" if meta.past_frame_ticks else ""
    inputs = [f"joints ({meta.state_dim})"] + [f"camera {cam} {meta.image_size_px} px{past}" for cam in meta.cameras]
    return inputs + ([f"sim state ({meta.env_state_dim}): sim only"] if meta.env_state_dim else [])
