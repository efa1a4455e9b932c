"""`PacedSimClock`: simulated time that runs no faster than a fraction of real time, and
restarts its schedule instead of bursting when the work falls behind."""

from __future__ import annotations

import time

import pytest

from robotrl.core.clock import PacedSimClock


def test_a_paced_clock_takes_simulated_time_over_speed_in_wall_time():
    clock = PacedSimClock(0.5)
    start = time.monotonic()
    for _ in range(10):
        clock.advance(0.02)
    assert clock.now() == pytest.approx(0.2)
    assert time.monotonic() - start >= 0.4 - 1e-3  # 0.2 simulated seconds at half speed


def test_a_paced_clock_behind_schedule_restarts_from_now_rather_than_bursting():
    clock = PacedSimClock(0.5)
    time.sleep(0.3)  # the work took longer than 0.3 s x 0.5 of simulated time allows
    clock.advance(0.1)  # due at 0.2 s of wall time: already late, so no wait; schedule restarts
    late = time.monotonic()
    clock.advance(0.1)  # a burst would not wait here; the restarted schedule waits 0.2 s
    assert time.monotonic() - late >= 0.2 - 1e-3
    assert clock.now() == pytest.approx(0.2)


@pytest.mark.parametrize("speed", [0.0, -1.0, 1.5])
def test_a_paced_clock_refuses_a_speed_outside_zero_to_one(speed):
    with pytest.raises(ValueError, match="speed"):
        PacedSimClock(speed)
