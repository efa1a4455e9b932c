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
def curve_folders(tmp_path):
    """CURVE keys of a learner and two clients: (learner, allowed, stranger) folders. The
    learner's holds server.key_secret and allowed_clients/ with the allowed client's key;
    each client's holds client.key_secret and the learner's server.key."""
    import shutil

    from robotrl.wire.keys import write_keypair

    learner, allowed, stranger = tmp_path / "learner", tmp_path / "allowed", tmp_path / "stranger"
    server_public, _ = write_keypair(learner, "server")
    for folder in (allowed, stranger):
        write_keypair(folder, "client")
        shutil.copy(server_public, folder / "server.key")
    (learner / "allowed_clients").mkdir()
    shutil.copy(allowed / "client.key", learner / "allowed_clients" / "allowed.key")
    return learner, allowed, stranger


@pytest.fixture
def so101_sim():
    """A connected state-only SO-101 `SimRobot` on its own `SimClock`, at home, t = 0."""
    from robotrl.hardware.sim_arm.robot import SimRobot

    sim = SimRobot(arm="so101", cameras=())
    sim.connect()
    yield sim
    sim.disconnect()


@pytest.fixture
def tiny_flow():
    """A factory of small untrained fast/slow reach policies (6 joints, H rows, 2 flow
    steps): `tiny_flow(cameras=(), horizon=8, image_size_px=16, instructions=(), start_state_rad=())`."""

    def make(
        cameras: tuple[str, ...] = (),
        horizon: int = 8,
        image_size_px: int = 16,
        instructions: tuple[str, ...] = (),
        start_state_rad: tuple[float, ...] = (),
    ):
        import numpy as np
        import torch

        from robotrl.policies.fastslow.config import FastSlowConfig
        from robotrl.policies.fastslow.model import FastSlowModel
        from robotrl.policies.fastslow.normalize import Normalizer
        from robotrl.policies.fastslow.policy import FastSlowPolicy
        from robotrl.policies.fastslow.vocab import Vocabulary

        cfg = FastSlowConfig(
            width=16,
            cnn_channels=(8, 8),
            expert_hidden=32,
            expert_blocks=1,
            horizon=horizon,
            execute_steps=horizon // 2,
            image_size_px=image_size_px,
            flow_steps=2,
            cameras=cameras,
            instructions=instructions,
            start_state_rad=start_state_rad,
        )
        torch.manual_seed(0)
        norm = Normalizer("delta", np.zeros(6), np.full(6, 0.3), np.zeros((horizon, 6)), np.full((horizon, 6), 0.02))
        vocab = Vocabulary(["<pad>", "<unk>", "reach"])
        return FastSlowPolicy(FastSlowModel(cfg, vocab_size=len(vocab)), norm, vocab)

    return make
