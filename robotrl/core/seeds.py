"""Seeds derived from a run's seed, so that every random draw is reproducible and no two
draws share a stream."""

from __future__ import annotations

SEED_STRIDE = 1_000_003
"""A prime: seeds s and s + 1 never give the same stream for ticks below it."""
TICK_STRIDE = 7_919
"""A prime: consecutive ticks of one seed land far apart."""


def tick_seed(seed: int, tick: int, salt: int = 0) -> int:
    """The seed of the draw made at `tick` by a component seeded `seed` (`salt` keeps the
    components of one seed apart), in [0, 2**63)."""
    return (seed * SEED_STRIDE + tick * TICK_STRIDE + salt) % (2**63)
