"""Shared test setup: offline Hugging Face hub, an off-screen MuJoCo backend, and a small
simulated arm (the simulator is the test double: no mocked robots)."""

from __future__ import annotations

import os

# Before anything imports mujoco or huggingface_hub: never reach the network, and render
# off-screen (EGL) unless the caller chose a backend (e.g. MUJOCO_GL=osmesa).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("MUJOCO_GL", "egl")

import pytest  # noqa: E402


@pytest.fixture
def so101_sim():
    """A connected state-only SO-101 `SimRobot` on its own `SimClock`, at home, t = 0."""
    from robotrl.hardware.sim_arm.robot import SimRobot

    sim = SimRobot(arm="so101", cameras=())
    sim.connect()
    yield sim
    sim.disconnect()
