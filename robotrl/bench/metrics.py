"""Pure metric functions of the latency and sim-to-sim benchmarks (docs/benchmarks.md).

The smoothness ratios and prefix consistency live with the chunk maths
(`robotrl.inference.chunking`), the Wilson interval with the rollouts
(`robotrl.sim.rollout`). Times are control ticks unless a name says `_s`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np


def reaction_ticks(
    ee_m: np.ndarray, target_m: np.ndarray, event_tick: int, dt_s: float, min_speed_m_s: float = 0.1
) -> int | None:
    """Behavioural reaction time to a target that jumps at tick `event_tick`.

    The velocity at tick k is v_k = (ee_k - ee_(k-1)) / dt_s, the motion commanded at k;
    its component toward the new target is v_k . (target - ee_k) / |target - ee_k|. The
    reaction is the first k >= `event_tick` at which that component is at least
    `min_speed_m_s`, minus `event_tick` (0: the row executed at the jump tick already
    heads for the new target, possible when d = 0).

    Args:
        ee_m: (T, 3) end-effector position of the executed target at each tick, metres.
        target_m: (3,) the target after the jump, metres.
        event_tick: t_e, the first tick whose observation shows the new target.
        dt_s: control period, seconds.
        min_speed_m_s: speed toward the new target that counts as moving there.

    Returns:
        Ticks, or None when the arm never moved toward the target after the jump, or was
        still moving at t_e - 1 (at >= `min_speed_m_s` in any direction: a motion begun
        before the jump can carry the arm toward the new target by coincidence, which
        would count as a reaction faster than the inference delay allows).
    """
    ee = np.asarray(ee_m, dtype=np.float64)
    if not 1 <= event_tick < len(ee):
        return None
    to_target = np.asarray(target_m, dtype=np.float64) - ee[1:]
    distance = np.linalg.norm(to_target, axis=1)
    velocity = np.diff(ee, axis=0) / dt_s  # row k - 1 is v_k
    toward = np.einsum("ij,ij->i", velocity, to_target) / np.maximum(distance, 1e-12)
    moving = toward >= min_speed_m_s  # index k - 1 for tick k
    if event_tick >= 2 and np.linalg.norm(velocity[event_tick - 2]) >= min_speed_m_s:
        return None
    hits = np.flatnonzero(moving[event_tick - 1 :])
    return int(hits[0]) if len(hits) else None


def staleness_histogram(ages: Iterable[int]) -> dict[int, int]:
    """{staleness: count} of the executed rows' ages (`EpisodeResult.row_ages`: tick
    executed minus tick of the observation the row was conditioned on)."""
    return dict(sorted(Counter(int(a) for a in ages).items()))


def merge_histograms(histograms: Iterable[dict]) -> dict[int, int]:
    """Sum of {value: count} histograms (keys may be str after a JSON round trip)."""
    total: Counter[int] = Counter()
    for hist in histograms:
        total.update({int(k): int(v) for k, v in hist.items()})
    return dict(sorted(total.items()))


def histogram_stats(hist: dict) -> dict[str, float]:
    """Mean, p95 (an observed value: numpy's "higher") and max of a {value: count}
    histogram; NaN for an empty one."""
    values = np.repeat([int(k) for k in hist], [int(v) for v in hist.values()])
    if values.size == 0:
        return {"mean": float("nan"), "p95": float("nan"), "max": float("nan")}
    return {
        "mean": float(values.mean()),
        "p95": float(np.percentile(values, 95, method="higher")),
        "max": float(values.max()),
    }


def chunk_time_s(execute_horizon: int, dt_s: float, delay_s: float, sync: bool, delay_ticks: int = 0) -> float:
    """Time to execute one chunk's s rows (docs/benchmarks.md time model), seconds:
    sync: s*dt + delta; async: s*dt + max(0, delta - d*dt) (the request went out d ticks
    before the rows ran out)."""
    base = execute_horizon * dt_s
    return base + delay_s if sync else base + max(0.0, delay_s - delay_ticks * dt_s)


def speedup_limit(execute_horizon: int, dt_s: float, delay_s: float, delay_ticks: int) -> float:
    """T_chunk,sync / T_chunk,async: the speedup the time model allows."""
    return chunk_time_s(execute_horizon, dt_s, delay_s, True) / chunk_time_s(
        execute_horizon, dt_s, delay_s, False, delay_ticks
    )


def matched_speedup(sync_ticks: dict[int, int], method_ticks: dict[int, int]) -> float | None:
    """T_sync / T_method at matched success: total episode ticks (pauses included) over
    the seeds both succeeded on. Args map seed -> ticks of successful episodes only.
    None when no seed succeeded under both."""
    seeds = sorted(set(sync_ticks) & set(method_ticks))
    if not seeds:
        return None
    return sum(sync_ticks[s] for s in seeds) / sum(method_ticks[s] for s in seeds)


def nan_median(values: Iterable[float | None]) -> float:
    """Median of the finite values (None and NaN skipped); NaN when there are none."""
    finite = [float(v) for v in values if v is not None and np.isfinite(v)]
    return float(np.median(finite)) if finite else float("nan")
