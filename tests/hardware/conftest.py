"""The simulated Feetech motor bus (`robotrl.sim.twin.bus.SimServoBus`) as a fixture for every
hardware test that drives lerobot's real SO-101 code over a pseudo-terminal."""

from __future__ import annotations

import pytest


@pytest.fixture
def fake_bus():
    """Six STS3215 servos behind a pseudo-terminal (`.port`), with the `FAKE_RANGES` limits."""
    pytest.importorskip("scservo_sdk", reason="lerobot[feetech] (feetech-servo-sdk) is not installed")
    from test_lerobot_arm import FAKE_RANGES

    from robotrl.sim.twin.bus import SimServoBus

    bus = SimServoBus(FAKE_RANGES)
    yield bus
    bus.close()
