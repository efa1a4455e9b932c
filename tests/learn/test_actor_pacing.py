"""A stepped actor in slow motion (`--stepped-speed`): through a real server on loopback, its
episodes take their simulated time / speed in wall time, with exactly the stepped delay
(what lets a rehearsal give a slow learner the wall time a faster one would have)."""

from __future__ import annotations

import time

import pytest

from robotrl.core.errors import UserError
from robotrl.inference.arm import ArmConfig
from robotrl.inference.server import PolicyServer, ServerConfig
from robotrl.learn.actor import ActorJob, run_actor


def test_a_stepped_actor_at_half_speed_takes_twice_its_simulated_time(tiny_flow):
    with PolicyServer(tiny_flow(), ServerConfig(endpoint="tcp://127.0.0.1:*", warmup_calls=1)) as server:
        job = ActorJob(
            ArmConfig("sim", "reach", "nominal"),
            server.endpoint,
            episodes=1,
            max_seconds=1.0,
            stepped_delay=2,
            stepped_speed=0.5,
        )
        start = time.monotonic()
        (result,) = run_actor(job)
        wall_s = time.monotonic() - start
    assert result.ticks == 30  # an untrained policy does not reach: the whole second
    assert result.missed_ticks == 0  # a stepped clock never misses a tick
    assert wall_s >= 2 * result.ticks / 30 - 0.05  # 1 simulated second at half speed


def test_stepped_speed_needs_a_stepped_clock_and_a_fraction_of_real_time():
    arm = ArmConfig("sim", "reach", "nominal")
    with pytest.raises(UserError, match="--stepped-speed needs --stepped-delay"):
        ActorJob(arm, "tcp://127.0.0.1:1", stepped_speed=0.5)
    with pytest.raises(UserError, match="in \\(0, 1\\]"):
        ActorJob(arm, "tcp://127.0.0.1:1", stepped_delay=1, stepped_speed=2.0)
