"""The maths of runtime health (`robotrl.core.health`): rates, percentiles, states,
intervention rate, GPU memory, and an arm's health across the three hops (driver -> beacon
stamps -> reader) on a fake clock: a camera or an arm that stops is down after 2 s."""

from __future__ import annotations

import pytest

from robotrl.core.health import (
    STALE_S,
    FrameMeter,
    arm_report,
    gpu_report,
    health_state,
    intervention_rate,
    motor_extremes,
    percentiles,
    rate_hz,
    rate_per_s,
    to_stamps,
)


def test_rates():
    assert rate_per_s(30, 60, 1.5) == 20.0  # 30 ticks in 1.5 s
    assert rate_per_s(5, 9, 0.0) == 0.0  # no time passed: no rate
    assert rate_hz([0.0, 0.1, 0.2, 0.3]) == pytest.approx(10.0)  # 3 intervals in 0.3 s
    assert rate_hz([4.0, 4.5, 6.0]) == pytest.approx(1.0)  # 2 intervals in 2 s, uneven
    assert rate_hz([1.0]) == rate_hz([]) == rate_hz([2.0, 2.0]) == 0.0


def test_percentiles_interpolate_linearly():
    # 1..100: p50 halfway between 50 and 51; p99 at rank 0.99 * 99 = 98.01 -> 99 + 0.01
    assert percentiles(range(1, 101)) == {"p50": 50.5, "p99": pytest.approx(99.01)}
    assert percentiles([7.0], (50, 95, 99)) == {"p50": 7.0, "p95": 7.0, "p99": 7.0}
    assert percentiles([]) == {}


def test_states_and_intervention_rate():
    assert [health_state(a) for a in (0.0, 2.0, 2.001, None)] == ["up", "up", "down", "waiting"]
    assert health_state(0.6, stale_s=0.5) == "down"
    # episodes of 20 ticks with 0, 1, 2, 3 intervened: 6 of 80
    assert intervention_rate([0, 1, 2, 3], [20] * 4) == pytest.approx(0.075)
    assert intervention_rate([], []) is None


def test_motor_extremes_and_gpu_memory():
    motors = {"a": {"temperature_c": 35.0, "voltage_v": 12.1}, "b": {"temperature_c": 41.0, "voltage_v": 11.8}}
    assert motor_extremes(motors) == (41.0, 11.8)
    assert motor_extremes({}) == motor_extremes(None) == (None, None)
    gib = 2**30  # 60 GiB free of 80: 20 GiB = 20480 MiB used
    assert gpu_report("cuda:1", 60 * gib, 80 * gib, 35) == {
        "device": "cuda:1",
        "memory_used_mb": 20480.0,
        "memory_total_mb": 81920.0,
        "utilization_pct": 35.0,
    }
    assert gpu_report("cpu") == dict.fromkeys(("memory_used_mb", "memory_total_mb", "utilization_pct"), None) | {
        "device": "cpu"
    }


def test_frame_meter_counts_new_frames_in_its_window():
    meter = FrameMeter(window_s=2.0)
    assert meter.health(0.0) == {"fps": 0.0, "frame_age_s": None}
    for k in range(31):  # a 30 fps camera for one second, each frame seen twice (a 60 Hz reader)
        meter.note(10.0 + k / 30)
        meter.note(10.0 + k / 30)
    assert meter.health(11.0) == {"fps": pytest.approx(30.0), "frame_age_s": 0.0}
    meter.note(None)  # no frame yet from a reader: nothing changes
    assert meter.health(11.5)["frame_age_s"] == 0.5
    # it stops: its last frames leave the window one by one, the age grows
    assert meter.health(12.96)["fps"] == pytest.approx(30.0)  # frames 10.967 and 11.0 still in: 1 / (1/30 s)
    assert meter.health(12.99)["fps"] == 0.0  # only 11.0 left: one frame, no interval
    assert meter.health(13.5) == {"fps": 0.0, "frame_age_s": 2.5}


def test_a_stalled_camera_and_a_stopped_arm_are_down_after_2_s_at_the_readers_clock():
    # driver at t = 100 (its own clock): last command 0.03 s ago, front frame 0.05 s ago
    health = {
        "last_command_age_s": 0.03,
        "bus_errors": 2,
        "motors": {"shoulder_pan": {"temperature_c": 35.0, "voltage_v": 12.0}},
        "cameras": {"front": {"fps": 30.0, "frame_age_s": 0.05}, "wrist": {"fps": 0.0, "frame_age_s": None}},
    }
    stamps = to_stamps(health, 100.0)  # the beacon: absolute monotonic times
    assert stamps["last_command_monotonic_s"] == pytest.approx(99.97)
    assert stamps["cameras"]["front"] == {"fps": 30.0, "frame_monotonic_s": pytest.approx(99.95)}
    assert stamps["cameras"]["wrist"]["frame_monotonic_s"] is None
    # the reader at 101.9 s: command 1.93 s old, frame 1.95 s old: both still up
    seen = arm_report(stamps, 101.9)
    assert (seen["command_age_s"], seen["arm_state"]) == (1.93, "up")
    assert seen["cameras"]["front"] == {"fps": 30.0, "frame_age_s": 1.95, "state": "up"}
    assert seen["cameras"]["wrist"]["state"] == "waiting"
    assert (seen["bus_errors"], seen["temperature_c_max"], seen["voltage_v_min"]) == (2, 35.0, 12.0)
    # at 102.0 s the frame is 2.05 s old: down; the command (2.03 s) too
    later = arm_report(stamps, 100.0 + STALE_S)
    assert later["cameras"]["front"]["state"] == "down" and later["arm_state"] == "down"
    # a simulated arm reports no motors and no bus: None, shown as "-"
    sim = arm_report(to_stamps({"last_command_age_s": 0.0, "cameras": {}}, 5.0), 5.0)
    assert (sim["bus_errors"], sim["temperature_c_max"], sim["motors"], sim["arm_state"]) == (None, None, None, "up")
    assert arm_report({}, 5.0)["arm_state"] == "waiting"  # an old beacon without health keys
