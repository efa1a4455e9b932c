"""Golden tests for the chunk maths, arithmetic in the comments."""

from __future__ import annotations

import numpy as np
import pytest

from robotrl.core.policy import ActionChunk
from robotrl.inference.chunking import (
    DEFAULT_THRESHOLD,
    DelayEstimator,
    arm_deadband,
    boundary_discontinuity_ratio,
    boundary_jerk_ratio,
    carry_lag,
    forward_state,
    policy_threshold,
    prefix_consistency,
    rtc_weights,
    should_request,
    splice,
    splice_mode,
)

IN_FLIGHT = np.array([[0.1, 0.0], [0.2, 0.05], [0.3, 0.1]])


# -- forward_state ----------------------------------------------------------------------
def test_forward_state_absolute_is_the_last_in_flight_target():
    state = np.array([0.0, 0.0])
    # d = 2: the chunk starts at t+2, after a_t and a_(t+1) ran: s_hat = a_(t+1)
    np.testing.assert_array_equal(forward_state(state, IN_FLIGHT, 2), [0.2, 0.05])
    # d = 5 but 3 rows queued: the robot holds a_(t+2) until the chunk starts
    np.testing.assert_array_equal(forward_state(state, IN_FLIGHT, 5), [0.3, 0.1])


def test_forward_state_is_the_state_when_nothing_runs_before_the_chunk():
    state = np.array([0.5, -0.5])
    np.testing.assert_array_equal(forward_state(state, IN_FLIGHT, 0), state)
    np.testing.assert_array_equal(forward_state(state, np.zeros((0, 2)), 3), state)
    assert forward_state(state, IN_FLIGHT, 0) is not state  # a copy


def test_forward_state_applies_the_safety_step_clamp():
    state = np.array([0.0, 0.0])
    rows = np.array([[0.3, 0.0], [0.3, 0.05]])
    # tick t:   0.0 -> 0.3 limited to 0.0 + 0.1 = 0.1; 0.0 -> 0.0      => [0.1, 0.0]
    # tick t+1: 0.1 -> 0.3 limited to 0.1 + 0.1 = 0.2; 0.0 -> 0.05 free => [0.2, 0.05]
    np.testing.assert_allclose(forward_state(state, rows, 2, max_step_rad=0.1), [0.2, 0.05])
    # per-joint limits: joint 1 may move only 0.02 per tick: 0.0 -> 0.0 -> 0.02
    np.testing.assert_allclose(forward_state(state, rows, 2, max_step_rad=np.array([0.1, 0.02])), [0.2, 0.02])


def test_forward_state_delta_sums_the_in_flight_deltas():
    state = np.array([1.0, 2.0])
    rows = np.array([[0.1, -0.1], [0.2, 0.0], [5.0, 5.0]])
    # d = 2: [1 + 0.1 + 0.2, 2 - 0.1 + 0] = [1.3, 1.9]; the third row runs after the start
    np.testing.assert_allclose(forward_state(state, rows, 2, mode="delta"), [1.3, 1.9])
    # clamp 0.15 per tick: [1.1, 1.9], then + [min(0.2, 0.15), 0] = [1.25, 1.9]
    np.testing.assert_allclose(forward_state(state, rows, 2, mode="delta", max_step_rad=0.15), [1.25, 1.9])


def test_forward_state_rejects_bad_arguments():
    with pytest.raises(ValueError, match="mode"):
        forward_state(np.zeros(2), IN_FLIGHT, 1, mode="ee")
    with pytest.raises(ValueError, match="delay_ticks"):
        forward_state(np.zeros(2), IN_FLIGHT, -1)


# -- carry_lag --------------------------------------------------------------------------
def test_carry_lag_adds_the_tracking_error_beyond_the_deadband():
    forwarded, target = np.array([0.5, 0.5, 0.5]), np.array([0.2, 0.2, 0.2])
    measured = np.array([0.22, 0.1, 0.4])  # errors +0.02, -0.1, +0.2
    out = carry_lag(forwarded, target, measured, np.array([0.03, 0.03, np.inf]))
    # +0.02 is within 0.03: 0.5; -0.1 exceeds it by -0.07: 0.43; an infinite band: 0.5
    np.testing.assert_allclose(out, [0.5, 0.43, 0.5])
    # no deadband: the forward starts from the measured arm, s = f + (q - target)
    np.testing.assert_allclose(carry_lag(forwarded, target, measured, 0.0), [0.52, 0.4, 0.7])


def test_arm_deadband_leaves_the_gripper_out_and_bands_are_not_negative():
    np.testing.assert_array_equal(arm_deadband(3, 0.05), [0.05, 0.05, np.inf])
    with pytest.raises(ValueError, match="deadband"):
        arm_deadband(3, -0.1)
    with pytest.raises(ValueError, match="deadband"):
        carry_lag(np.zeros(2), np.zeros(2), np.zeros(2), -1.0)


# -- splice -----------------------------------------------------------------------------
def _queue(first_tick: int, values) -> dict[int, np.ndarray]:
    return {first_tick + i: np.array([v], dtype=float) for i, v in enumerate(values)}


def _values(queue: dict[int, np.ndarray]) -> dict[int, float]:
    return {t: round(float(row[0]), 9) for t, row in sorted(queue.items())}


def test_splice_replace_drops_past_rows_and_overwrites_from_the_first_kept_tick():
    queue = _queue(12, [1, 2, 3, 4])  # ticks 12..15
    chunk = ActionChunk(np.array([[10.0], [20.0], [30.0]]), start_tick=11)  # ticks 11..13
    # now = 12: row 0 (tick 11) is past -> 1 dropped; ticks 12, 13 overwritten; the old
    # rows for 14, 15 lie past the new chunk's end and go too
    assert splice(queue, chunk, 12, "replace") == 1
    assert _values(queue) == {12: 20.0, 13: 30.0}


def test_splice_blend_mixes_overlapping_rows_03_old_07_new():
    queue = _queue(12, [1, 2, 3, 4])
    chunk = ActionChunk(np.array([[10.0], [20.0], [30.0]]), start_tick=11)
    # tick 12: 0.3 * 1 + 0.7 * 20 = 14.3; tick 13: 0.3 * 2 + 0.7 * 30 = 21.6
    assert splice(queue, chunk, 12, "blend") == 1
    assert _values(queue) == {12: 14.3, 13: 21.6}


def test_splice_future_chunk_keeps_the_rows_before_it():
    queue = _queue(12, [1, 2, 3])  # ticks 12..14
    chunk = ActionChunk(np.array([[10.0], [20.0]]), start_tick=14)  # ticks 14, 15
    replaced = dict(queue)
    assert splice(replaced, chunk, 12, "replace") == 0
    assert _values(replaced) == {12: 1.0, 13: 2.0, 14: 10.0, 15: 20.0}
    # blend: tick 14 = 0.3 * 3 + 0.7 * 10 = 7.9; tick 15 has no old row -> 20
    splice(queue, chunk, 12, "blend")
    assert _values(queue) == {12: 1.0, 13: 2.0, 14: 7.9, 15: 20.0}


def test_splice_chunk_entirely_in_the_past_changes_nothing():
    queue = _queue(10, [1, 2])
    chunk = ActionChunk(np.ones((3, 1)), start_tick=0)  # ticks 0..2, now 10: all 3 dropped
    assert splice(queue, chunk, 10) == 3
    assert _values(queue) == {10: 1.0, 11: 2.0}
    with pytest.raises(ValueError, match="splice mode"):
        splice(queue, chunk, 10, "average")


def test_splice_mode_blends_only_async_chunks_planned_from_the_measured_state():
    assert splice_mode(sync=False, delay_ticks=0) == "blend"  # naive, and vlash at d = 0
    assert splice_mode(sync=False, delay_ticks=1) == "replace"  # vlash: planned from a_(t+d-1)
    assert splice_mode(sync=True, delay_ticks=0) == "replace"  # sync: the queue is empty


# -- policy_threshold -------------------------------------------------------------------
def test_the_policys_threshold_re_plans_after_the_rows_it_was_trained_to_run():
    assert policy_threshold(16, 2) == pytest.approx(0.875)  # ask again once 2 of 16 rows are used
    assert policy_threshold(8, 4) == pytest.approx(0.5)
    assert policy_threshold(16, 0) == DEFAULT_THRESHOLD == 0.5  # the policy does not say
    assert policy_threshold(16, 16) == DEFAULT_THRESHOLD  # whole chunks: lerobot's default
    with pytest.raises(ValueError):
        policy_threshold(0, 2)


# -- should_request ---------------------------------------------------------------------
def test_should_request_at_the_threshold_while_fewer_than_the_limit_are_in_flight():
    assert should_request(5, 10, 0.5, in_flight=0)  # 5 / 10 = 0.5 <= 0.5
    assert not should_request(6, 10, 0.5, in_flight=0)  # 0.6 > 0.5
    assert should_request(0, 10, 0.5, in_flight=0)
    assert not should_request(0, 10, 0.5, in_flight=1)  # one in flight at a time by default
    assert should_request(0, 10, 0.5, in_flight=3, max_in_flight=4)
    assert not should_request(0, 10, 0.5, in_flight=4, max_in_flight=4)
    assert not should_request(6, 10, 0.5, in_flight=0, max_in_flight=4)  # the threshold still holds
    assert not should_request(1, 10, 0.0, in_flight=0)  # threshold 0: only when empty
    assert should_request(10, 10, 1.0, in_flight=0)  # threshold 1: always re-plan
    with pytest.raises(ValueError):
        should_request(1, 10, 1.5, in_flight=0)
    with pytest.raises(ValueError):
        should_request(1, 0, 0.5, in_flight=0)


# -- DelayEstimator ---------------------------------------------------------------------
def test_delay_estimator_windowed_p95_without_warmup_or_running_max():
    est = DelayEstimator(window=5, warmup=1, percentile=95, initial_ticks=2)
    assert est.estimate() == 2  # nothing measured yet: the initial guess
    est.add(30)  # warm-up call (e.g. compilation): ignored
    assert est.estimate() == 2
    for d in (3, 4, 3, 5, 4):
        est.add(d)
    # sorted [3, 3, 4, 4, 5]: p95 at rank 0.95 * 4 = 3.8 -> the higher value, rank 4 = 5
    assert est.estimate() == 5
    for d in (3, 3, 3, 3):
        est.add(d)
    assert est.estimate() == 4  # window [4, 3, 3, 3, 3] -> p95 = 4
    est.add(3)
    assert est.estimate() == 3  # the 5 and the warm-up 30 are forgotten: not a running max
    with pytest.raises(ValueError):
        DelayEstimator(window=0)


def test_delay_estimator_plans_for_the_short_delays_but_not_one_odd_fast_reply():
    est = DelayEstimator(window=5, warmup=0)  # the executor's: the 5th percentile
    for d in (4, 4, 6, 5, 4):
        est.add(d)
    assert est.estimate() == 4  # sorted [4, 4, 4, 5, 6]: rank 0.2 -> the higher, rank 1
    est.add(1)  # one reply from a cache, say
    assert est.estimate() == 4  # [4, 6, 5, 4, 1] sorted [1, 4, 4, 5, 6]: still 4, not 1
    est.add(2)
    assert est.estimate() == 2  # two short delays in the window: they are the ones to plan for


# -- rtc_weights ------------------------------------------------------------------------
def test_rtc_weights_golden():
    # H = 8, s = 2, d = 2: rows 0, 1 frozen (1); rows 2..5 soft with
    # c_i = (8 - 2 - i) / (8 - 2 - 2 + 1) = (6 - i) / 5 and w = c (e^c - 1) / (e - 1), e - 1 = 1.718282:
    #   i=2: c=0.8: 0.8 * 1.225541 / 1.718282 = 0.570589
    #   i=3: c=0.6: 0.6 * 0.822119 / 1.718282 = 0.287072
    #   i=4: c=0.4: 0.4 * 0.491825 / 1.718282 = 0.114492
    #   i=5: c=0.2: 0.2 * 0.221403 / 1.718282 = 0.025770
    # rows 6, 7 (i >= H - s) free (0)
    np.testing.assert_allclose(rtc_weights(8, 2, 2), [1, 1, 0.570589, 0.287072, 0.114492, 0.025770, 0, 0], atol=1e-6)


def test_rtc_weights_edges():
    # d = 0: no frozen rows; i=0: c = (4 - 0) / (4 + 1) = 0.8 -> 0.570589 as above
    w = rtc_weights(5, 1, 0)
    assert w[0] == pytest.approx(0.570589, abs=1e-6) and w[-1] == 0.0
    # d >= H - s: frozen rows, then the free tail, nothing soft
    np.testing.assert_array_equal(rtc_weights(4, 2, 3), [1, 1, 1, 0])
    with pytest.raises(ValueError):
        rtc_weights(4, 5, 0)


# -- metrics ----------------------------------------------------------------------------
def test_boundary_discontinuity_ratio_golden():
    targets = np.array([[0.0, 1.0], [0.1, 1.0], [0.2, 1.0], [0.5, 1.0], [0.6, 1.0], [0.7, 1.0]])
    # joint 0 steps: 0.1, 0.1, 0.3 (switch at index 3), 0.1, 0.1; joint 1 never moves
    # mean over joints: 0.05, 0.05, 0.15, 0.05, 0.05 -> 0.15 / 0.05 = 3
    assert boundary_discontinuity_ratio(targets, [3]) == pytest.approx(3.0)
    assert np.isnan(boundary_discontinuity_ratio(targets, []))


def test_boundary_jerk_ratio_golden():
    # a_k = 0.01 k^3 (jerk 6 * 0.01 = 0.06 everywhere) plus a 0.2 step from k = 3 on.
    # The step's third difference u_(k+1) - 3 u_k + 3 u_(k-1) - u_(k-2) is 0.2, -0.4, 0.2
    # at k = 2, 3, 4 (within one tick of the switch), so jerk there: 0.26, -0.34, 0.26;
    # elsewhere (k = 5, 6): 0.06. RMS near = sqrt((0.0676 + 0.1156 + 0.0676) / 3) = 0.289136
    # -> ratio 0.289136 / 0.06 = 4.818944
    a = 0.01 * np.arange(8.0) ** 3
    a[3:] += 0.2
    assert boundary_jerk_ratio(a[:, None], [3]) == pytest.approx(4.818944, rel=1e-6)


def test_prefix_consistency_golden():
    previous = ActionChunk(np.array([[0.0], [1.0], [2.0], [3.0]]), start_tick=10)  # ticks 10..13
    new = ActionChunk(np.array([[2.5], [3.5], [9.0]]), start_tick=12)  # ticks 12..14
    # tick 12: |2.5 - 2| = 0.5; tick 13: |3.5 - 3| = 0.5 -> mean 0.5
    assert prefix_consistency(previous, new, 2) == pytest.approx(0.5)
    assert prefix_consistency(previous, new, 3) == pytest.approx(0.5)  # tick 14 not covered
    assert np.isnan(prefix_consistency(previous, ActionChunk(np.zeros((2, 1)), 20), 2))
