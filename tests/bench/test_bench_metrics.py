"""Golden tests of the benchmark metrics, arithmetic in the comments."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robotrl.bench.metrics import (
    chunk_time_s,
    histogram_stats,
    matched_speedup,
    merge_histograms,
    nan_median,
    reaction_ticks,
    speedup_limit,
    staleness_histogram,
)
from robotrl.inference.chunking import boundary_discontinuity_ratio, boundary_jerk_ratio
from robotrl.inference.delayed import DelaySpec
from robotrl.inference.ensemble import ensemble_weights
from robotrl.sim.rollout import wilson_interval


def test_wilson_interval_golden():
    # 8/10, z = 1.96: denom = 1 + 3.8416/10 = 1.38416; centre = (0.8 + 0.19208) / 1.38416 = 0.71680;
    # half = 1.96 * sqrt(0.016 + 0.009604) / 1.38416 = 0.22658 -> [0.4902, 0.9434]
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9434, abs=1e-4)
    # 0/10: centre = 0.19208 / 1.38416 = half -> [0, 3.8416 / 13.8416 = 0.2775]
    low, high = wilson_interval(0, 10)
    assert low == pytest.approx(0.0, abs=1e-12) and high == pytest.approx(0.2775, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def _ee_trace(start_moving: int, direction, ticks: int = 12, step_m: float = 0.03) -> np.ndarray:
    """(ticks, 3): at rest at the origin, then `step_m` per tick along `direction` from
    tick `start_moving` on."""
    k = np.arange(ticks)
    return np.outer(np.maximum(k - start_moving + 1, 0) * step_m, direction)


def test_reaction_time_golden_on_a_synthetic_trace():
    target, dt = np.array([1.0, 0.0, 0.0]), 0.1
    # jump at 5, first motion toward the target at tick 8: v_8 = 0.03 / 0.1 = 0.3 m/s >= 0.1
    ee = _ee_trace(8, [1.0, 0.0, 0.0])
    assert reaction_ticks(ee, target, 5, dt) == 3
    assert reaction_ticks(ee, target, 8, dt) == 0  # the row executed at the jump tick moves (d = 0)
    assert reaction_ticks(ee, target, 5, dt, min_speed_m_s=0.5) is None  # 0.3 m/s is below 0.5
    assert reaction_ticks(_ee_trace(8, [-1.0, 0.0, 0.0]), target, 5, dt) is None  # moving away
    assert reaction_ticks(_ee_trace(8, [0.0, 1.0, 0.0]), target, 5, dt) is None  # sideways: no component
    # moving at 45 degrees: 0.3 * cos(45) = 0.21 m/s toward it, counts
    assert reaction_ticks(_ee_trace(8, [math.sqrt(0.5), math.sqrt(0.5), 0.0]), target, 5, dt) == 3
    # already heading there at tick 4 (before the jump): a reaction cannot be told apart
    assert reaction_ticks(_ee_trace(2, [1.0, 0.0, 0.0]), target, 5, dt) is None
    # still moving sideways at tick 4, then turning toward the target at tick 6 (1 tick after
    # the jump, faster than any inference delay): the old motion may have turned on its own
    turning = _ee_trace(2, [0.0, 1.0, 0.0])
    turning[6:] = turning[5] + _ee_trace(0, [1.0, 0.0, 0.0], ticks=6)
    assert reaction_ticks(turning, target, 5, dt) is None
    settled = _ee_trace(2, [0.0, 1.0, 0.0])
    settled[4:] = settled[3]  # came to rest at tick 4, then moves toward the target at 8
    settled[8:] = settled[7] + _ee_trace(0, [1.0, 0.0, 0.0], ticks=4)
    assert reaction_ticks(settled, target, 5, dt) == 3
    assert reaction_ticks(ee, target, 0, dt) is None and reaction_ticks(ee, target, 12, dt) is None


def test_boundary_ratios_golden_count_only_switches():
    # one joint, unit jumps at k = 4 (a chunk switch) and k = 10 (not a switch), flat elsewhere
    a = np.zeros((14, 1))
    a[4:] += 1.0
    a[10:] += 1.0
    # steps |a_k - a_(k-1)|: 1 at k = 4 and 10, else 0 -> switch mean 1, others 1/12 -> 12
    assert boundary_discontinuity_ratio(a, [4]) == pytest.approx(12.0)
    # jerk j_k = a_(k+1) - 3a_k + 3a_(k-1) - a_(k-2) for k = 2..12: (1, -2, 1) at k = 3,4,5 and 9,10,11.
    # near the switch (3, 4, 5): mean square 6/3 = 2; elsewhere (2, 6..12): 6/8 = 0.75 -> sqrt(2/0.75)
    assert boundary_jerk_ratio(a, [4]) == pytest.approx(math.sqrt(8 / 3))


def test_time_model_golden():
    s, dt = 15, 1 / 30
    # sync: 15/30 + 4/30 = 0.6333 s; async with d = 4: 0.5 + max(0, 4/30 - 4/30) = 0.5 s
    assert chunk_time_s(s, dt, 4 * dt, sync=True) == pytest.approx(19 / 30)
    assert chunk_time_s(s, dt, 4 * dt, sync=False, delay_ticks=4) == pytest.approx(0.5)
    # d underestimated as 2: the robot waits the other 2 ticks
    assert chunk_time_s(s, dt, 4 * dt, sync=False, delay_ticks=2) == pytest.approx(17 / 30)
    assert speedup_limit(s, dt, 4 * dt, 4) == pytest.approx(19 / 15)
    assert speedup_limit(s, dt, 0.0, 0) == pytest.approx(1.0)


def test_matched_speedup_uses_seeds_solved_by_both():
    # seeds 1, 2 solved by both: (60 + 80) / (50 + 60) = 1.2727
    assert matched_speedup({1: 60, 2: 80, 3: 70}, {1: 50, 2: 60, 4: 10}) == pytest.approx(140 / 110)
    assert matched_speedup({1: 60}, {2: 50}) is None


def test_staleness_histogram_and_stats():
    hist = staleness_histogram([4, 5, 6, 1])
    assert hist == {1: 1, 4: 1, 5: 1, 6: 1}
    merged = merge_histograms([{str(k): v for k, v in hist.items()}, {4: 2}])  # JSON keys are str
    assert merged == {1: 1, 4: 3, 5: 1, 6: 1}
    # values 1, 4, 4, 4, 5, 6: mean 24/6 = 4, p95 ("higher") 6, max 6
    assert histogram_stats(merged) == {"mean": 4.0, "p95": 6.0, "max": 6.0}
    assert all(math.isnan(v) for v in histogram_stats({}).values())
    assert nan_median([1.0, None, float("nan"), 3.0]) == 2.0 and math.isnan(nan_median([None]))


def test_ensemble_weights_golden():
    # ACT: exp(-0.01 i), oldest first, normalised: (1, 0.99005, 0.98020) / 2.97025
    w = ensemble_weights(3)
    np.testing.assert_allclose(w, np.array([1.0, math.exp(-0.01), math.exp(-0.02)]) / 2.970249, rtol=1e-6)
    np.testing.assert_allclose(ensemble_weights(4, 0.0), 0.25)
    with pytest.raises(ValueError):
        ensemble_weights(0)


def test_delay_spec():
    assert DelaySpec.parse("4") == DelaySpec(4, 4) and DelaySpec(4, 4).label == "4"
    jitter = DelaySpec.parse("2-6")
    assert jitter.label == "U{2..6}" and jitter.mean_ticks == 4 and not jitter.fixed
    draws = {jitter.draw(np.random.default_rng(s)) for s in range(50)}
    assert draws == {2, 3, 4, 5, 6}
    with pytest.raises(ValueError):
        DelaySpec(3, 2)
