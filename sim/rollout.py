"""Run episodes of a `TaskEnv` with a policy and collect what people look at."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from robotrl.episode import Observation
from robotrl.sim.env import TaskEnv

Policy = Callable[[Observation], np.ndarray]
"""Maps an observation to a (J,) joint target in radians."""


@dataclass
class EpisodeResult:
    seed: int
    success: bool
    return_: float
    ticks: int
    safety_clamps: int
    """Step, limit and workspace clamps during the episode."""


def expert_policy(env: TaskEnv, seed: int, noise_m: float = 0.0) -> Policy:
    """The task's scripted expert for the episode started by `env.reset(seed)`."""
    expert = env.make_expert(seed, noise_m=noise_m)
    return lambda obs: expert.act(obs.state.q_rad)


def random_policy(env: TaskEnv, seed: int, step_rad: float = 0.05) -> Policy:
    """A random walk of joint targets (N(0, step_rad) per tick) inside the joint limits."""
    rng = np.random.default_rng(seed)
    spec = env.sim.spec
    return lambda obs: np.clip(obs.state.q_rad + rng.normal(0.0, step_rad, spec.num_joints),
                               spec.lower_rad, spec.upper_rad)


POLICIES: dict[str, Callable[[TaskEnv, int], Policy]] = {"expert": expert_policy, "random": random_policy}


def _clamps(env: TaskEnv) -> int:
    s = env.robot.stats
    return s.step_clamps + s.limit_clamps + s.workspace_clamps


def run_episode(env: TaskEnv, make_policy: Callable[[TaskEnv, int], Policy], seed: int,
                on_observation: Callable[[Observation], None] | None = None) -> EpisodeResult:
    """Reset with `seed`, act until done; `on_observation` sees every observation."""
    obs = env.reset(seed)
    policy = make_policy(env, seed)
    clamps_before = _clamps(env)
    total = 0.0
    while True:
        if on_observation is not None:
            on_observation(obs)
        step = env.step(policy(obs))
        total += step.reward
        obs = step.obs
        if step.done:
            break
    if on_observation is not None:
        on_observation(obs)
    return EpisodeResult(seed, step.success, total, env.tick, _clamps(env) - clamps_before)


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return float(centre - half), float(centre + half)
