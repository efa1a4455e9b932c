"""lerobot ACT and Diffusion served as `ChunkPolicy`: built from config with random
weights (no hub access), chunks in robot units, checkpoint folders load offline."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("lerobot")

from robotrl.core.policy import ChunkPolicy, PolicyObservation  # noqa: E402
from robotrl.policies.lerobot_adapter import LerobotChunkPolicy  # noqa: E402
from robotrl.policies.loading import load_policy  # noqa: E402

HOME = np.array([0.0, -1.2, 1.1, 1.3, 0.0, 0.0], np.float32)
SPREAD_RAD = 0.01
"""Dataset action std (and half-range): every de-normalised row lies near HOME."""


def stats() -> dict:
    t = lambda a: torch.tensor(np.asarray(a), dtype=torch.float32)  # noqa: E731
    joints = {
        "mean": t(HOME),
        "std": t(np.full(6, SPREAD_RAD)),
        "min": t(HOME - SPREAD_RAD),
        "max": t(HOME + SPREAD_RAD),
    }
    image = {
        "mean": torch.full((3, 1, 1), 0.5),
        "std": torch.full((3, 1, 1), 0.25),
        "min": torch.zeros(3, 1, 1),
        "max": torch.ones(3, 1, 1),
    }
    return {"observation.state": joints, "action": dict(joints), "observation.images.front": image}


KINDS = {
    "act": dict(
        chunk_size=10,
        n_action_steps=10,
        dim_model=64,
        dim_feedforward=128,
        n_encoder_layers=1,
        n_decoder_layers=1,
        n_heads=2,
        latent_dim=8,
    ),
    "diffusion": dict(
        horizon=16,
        n_action_steps=8,
        n_obs_steps=2,
        num_inference_steps=3,
        down_dims=(32, 64),
        crop_shape=None,
        diffusion_step_embed_dim=32,
        spatial_softmax_num_keypoints=8,
    ),
}
HORIZON = {"act": 10, "diffusion": 8}


def build(kind: str) -> LerobotChunkPolicy:
    if kind == "diffusion":
        pytest.importorskip("diffusers", reason="lerobot Diffusion needs lerobot[diffusion]")
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import get_policy_class, make_policy_config, make_pre_post_processors

    inputs = {
        "observation.state": PolicyFeature(FeatureType.STATE, (6,)),
        "observation.images.front": PolicyFeature(FeatureType.VISUAL, (3, 64, 64)),
    }
    outputs = {"action": PolicyFeature(FeatureType.ACTION, (6,))}
    cfg = make_policy_config(
        kind,
        input_features=inputs,
        output_features=outputs,
        device="cpu",
        pretrained_backbone_weights=None,
        **KINDS[kind],
    )
    torch.manual_seed(0)
    policy = get_policy_class(kind)(cfg)
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats())
    return LerobotChunkPolicy(policy, pre, post)


def observation(tick: int = 5) -> PolicyObservation:
    image = np.random.default_rng(0).integers(0, 255, (48, 48, 3), dtype=np.uint8)  # resized to 64 inside
    return PolicyObservation(
        state_rad=HOME.astype(np.float64),
        tick=tick,
        instruction="touch the red ball",
        images={"front": image},
        delay_ticks=2,
    )


@pytest.mark.parametrize("kind", ["act", "diffusion"])
def test_lerobot_policy_chunks_in_robot_units(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    policy = build(kind)
    assert isinstance(policy, ChunkPolicy)
    meta = policy.metadata
    assert (meta.policy_type, meta.horizon, meta.action_dim, meta.cameras, meta.image_size_px) == (
        f"lerobot_{kind}",
        HORIZON[kind],
        6,
        ("front",),
        64,
    )
    chunk = policy.predict_chunk(observation())
    assert chunk.actions_rad.shape == (HORIZON[kind], 6) and chunk.start_tick == 7
    # De-normalised: radians around the dataset's actions (HOME), not the normalised
    # network output around 0 (ACT: a few std; Diffusion: clipped to [min, max]).
    assert np.abs(chunk.actions_rad - HOME).max() < 10 * SPREAD_RAD
    np.testing.assert_array_equal(policy.predict_chunk(observation()).actions_rad, chunk.actions_rad)

    # A lerobot pretrained_model folder loads through load_policy and gives the same chunk.
    folder = tmp_path / "pretrained_model"
    policy.policy.save_pretrained(folder)
    policy.preprocessor.save_pretrained(folder)
    policy.postprocessor.save_pretrained(folder)
    loaded = load_policy(folder)
    assert isinstance(loaded, LerobotChunkPolicy)
    np.testing.assert_array_equal(loaded.predict_chunk(observation()).actions_rad, chunk.actions_rad)


def test_lerobot_adapter_rejects_bad_observations():
    policy = build("act")
    bad_state = observation()
    bad_state.state_rad = np.zeros(4)
    with pytest.raises(ValueError, match="state_rad has shape"):
        policy.predict_chunk(bad_state)
    no_camera = observation()
    no_camera.images = {}
    with pytest.raises(ValueError, match="camera 'front'"):
        policy.predict_chunk(no_camera)
