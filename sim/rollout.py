"""Per-tick policies of `robotrl sim` (the task's scripted expert, a random walk) and the
success-rate interval every report quotes. Their episodes run through the episode runner
(`robotrl.inference.stepped.run_closed_loop`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from robotrl.sim.env import TaskEnv

TickPolicy = Callable[[np.ndarray], np.ndarray]
"""Maps the measured (J,) joints (radians) to the (J,) joint target of the next tick."""


def expert_policy(env: TaskEnv, seed: int, noise_m: float = 0.0) -> TickPolicy:
    """The task's scripted expert for the episode started by `env.begin(seed)`."""
    expert = env.make_expert(seed, noise_m=noise_m)
    return lambda q_rad: expert.act(q_rad)


def random_policy(env: TaskEnv, seed: int, step_rad: float = 0.05) -> TickPolicy:
    """A random walk of joint targets (N(0, step_rad) per tick) inside the joint limits."""
    rng = np.random.default_rng(seed)
    spec = env.sim.spec
    return lambda q_rad: np.clip(q_rad + rng.normal(0.0, step_rad, spec.num_joints), spec.lower_rad, spec.upper_rad)


POLICIES: dict[str, Callable[[TaskEnv, int], TickPolicy]] = {"expert": expert_policy, "random": random_policy}


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return float(centre - half), float(centre + half)
