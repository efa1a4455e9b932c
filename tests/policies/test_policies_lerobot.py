"""lerobot ACT and Diffusion served as `ChunkPolicy`: built from config with random
weights (no hub access), chunks in robot units, checkpoint folders load offline."""

from __future__ import annotations

import json

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


def build(kind: str, dataset_stats: dict | None = None) -> LerobotChunkPolicy:
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
    pre, post = make_pre_post_processors(cfg, dataset_stats=dataset_stats or stats())
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
    # No RTC guidance: the capability says so, and the latency benchmark leaves the rtc modes out.
    from robotrl.bench.cells import BenchSetup
    from robotrl.bench.latency import rtc_capable_modes

    assert loaded.metadata.follows_rtc_prefix is False
    modes = rtc_capable_modes(BenchSetup(checkpoint=str(folder)), ["sync", "vlash", "vlash+rtc"])
    assert modes == ["sync", "vlash"]


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


def _lerobot_dataset_meta(root, robot_type: str, names: list[str]) -> None:
    """An empty dataset made with lerobot's own API: only its meta/info.json is read."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    joint = {"dtype": "float32", "shape": (6,), "names": names}
    LeRobotDataset.create(
        "me/so101_demos", 30, {"observation.state": joint, "action": joint}, root=root, robot_type=robot_type
    )


def _save_with_train_config(policy: LerobotChunkPolicy, folder, dataset_root) -> None:
    policy.policy.save_pretrained(folder)
    policy.preprocessor.save_pretrained(folder)
    policy.postprocessor.save_pretrained(folder)
    (folder / "train_config.json").write_text(
        json.dumps({"dataset": {"repo_id": "me/so101_demos", "root": str(dataset_root)}})
    )


def test_a_policy_trained_in_lerobots_degrees_is_served_in_radians(tmp_path, monkeypatch):
    """`lerobot-train` on lerobot-native SO-101 data (degrees, gripper 0..100): the adapter
    finds the units in the training dataset, feeds the state in degrees and returns radians."""
    from robotrl.core.errors import ConfigError
    from robotrl.hardware.lerobot_arm.convention import LEROBOT, RADIANS, JointConvention

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lerobot = JointConvention(LEROBOT, "so101")
    home_deg = lerobot.from_radians(HOME)
    spread_deg = np.rad2deg(SPREAD_RAD)
    degree_stats = stats()
    for key in ("observation.state", "action"):
        t = lambda a: torch.tensor(np.asarray(a), dtype=torch.float32)  # noqa: E731
        degree_stats[key] = {
            "mean": t(home_deg),
            "std": t(np.full(6, spread_deg)),
            "min": t(home_deg - spread_deg),
            "max": t(home_deg + spread_deg),
        }
    policy = build("act", degree_stats)
    dataset = tmp_path / "so101_demos"
    _lerobot_dataset_meta(dataset, "so101_follower", lerobot.names)
    folder = tmp_path / "pretrained_model"
    _save_with_train_config(policy, folder, dataset)

    loaded = load_policy(folder)
    assert isinstance(loaded, LerobotChunkPolicy) and loaded.joints == lerobot
    chunk = loaded.predict_chunk(observation())
    assert np.abs(chunk.actions_rad - HOME).max() < 10 * SPREAD_RAD  # radians, not 95-degree targets
    assert np.abs(policy.predict_chunk(observation()).actions_rad - home_deg).max() < 10 * spread_deg  # unconverted

    # The dataset gone (and not in $HF_LEROBOT_HOME): degree statistics cannot be placed on an arm.
    import shutil

    shutil.rmtree(dataset)
    with pytest.raises(ConfigError, match=r"cannot tell the joint units .* reach 75\.1 and .*looked in"):
        load_policy(folder)
    # A dataset that says radians under statistics in degrees: refused, never served.
    _lerobot_dataset_meta(dataset, "so101", JointConvention(RADIANS, "so101").names)
    with pytest.raises(ConfigError, match="says radians but its state statistics reach"):
        load_policy(folder)


# --- devices and batches -------------------------------------------------------------------


def _save(policy: LerobotChunkPolicy, folder) -> None:
    policy.policy.save_pretrained(folder)
    policy.preprocessor.save_pretrained(folder)
    policy.postprocessor.save_pretrained(folder)


def _as_if_trained_on_a_gpu(folder) -> None:
    """What `lerobot-train` on a GPU box writes: "device": "cuda" in the policy config and
    in the pre-processor's device step."""
    for name in ("config.json", "policy_preprocessor.json"):
        doc = json.loads((folder / name).read_text())
        if name == "config.json":
            doc["device"] = "cuda"
        else:
            for step in doc["steps"]:
                if step["registry_name"] == "device_processor":
                    step["config"]["device"] = "cuda"
        (folder / name).write_text(json.dumps(doc, indent=2))


def test_a_checkpoint_trained_on_a_gpu_loads_and_serves_on_the_cpu(tmp_path, capsys):
    from robotrl.cli import main

    policy = build("act")
    folder = tmp_path / "pretrained_model"
    _save(policy, folder)
    _as_if_trained_on_a_gpu(folder)
    assert '"device": "cuda"' in (folder / "policy_preprocessor.json").read_text()

    loaded = load_policy(folder, device="cpu")  # lerobot alone: "Requested device 'cuda' but CUDA is not available"
    assert isinstance(loaded, LerobotChunkPolicy) and loaded.device == torch.device("cpu")
    np.testing.assert_allclose(
        loaded.predict_chunk(observation()).actions_rad, policy.predict_chunk(observation()).actions_rad, atol=1e-6
    )
    # and served through the inference server (two robots: the batched path)
    out = tmp_path / "bench"
    argv = ["bench", "serve", "--policy", str(folder), "--device", "cpu", "--repeats", "1", "--robots", "1,2"]
    assert main([*argv, "--out", str(out)]) == 0
    rows = json.loads((out / "serve" / "results.json").read_text())["rows"]
    assert [r["robots"] for r in rows] == [1, 2] and all(r["chunks_per_s"] > 0 for r in rows)
    assert "device: cpu (asked for)" in capsys.readouterr().out


def _observations() -> list[PolicyObservation]:
    """Four robots: other states, images (one of another size), ticks and delays."""
    rng = np.random.default_rng(1)
    obs = []
    for i in range(4):
        size = 48 if i != 2 else 64
        obs.append(
            PolicyObservation(
                state_rad=(HOME + rng.normal(0, 0.05, 6)).astype(np.float64),
                tick=10 + 7 * i,
                instruction="touch the red ball",
                images={"front": rng.integers(0, 255, (size, size, 3), dtype=np.uint8)},
                delay_ticks=i,
            )
        )
    return obs


def test_act_answers_a_batch_of_robots_in_one_forward_pass_with_the_lone_chunks(monkeypatch):
    from robotrl.core.policy import BatchedPolicy

    policy = build("act")
    assert isinstance(policy, BatchedPolicy)  # the server batches it
    calls = []
    forward = policy.policy.predict_action_chunk
    monkeypatch.setattr(policy.policy, "predict_action_chunk", lambda batch: calls.append(1) or forward(batch))
    observations = _observations()
    batched = policy.predict_chunks(observations)
    assert len(calls) == 1
    alone = [policy.predict_chunk(obs) for obs in observations]
    for b, a, obs in zip(batched, alone, observations):
        assert b.start_tick == a.start_tick == obs.tick + obs.delay_ticks
        np.testing.assert_allclose(b.actions_rad, a.actions_rad, atol=1e-5)
    assert not np.allclose(batched[0].actions_rad, batched[1].actions_rad)  # each robot its own chunk


def test_diffusion_starts_each_robot_from_its_own_noise_and_ddim_batches_exactly():
    pytest.importorskip("diffusers", reason="lerobot Diffusion needs lerobot[diffusion]")
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import get_policy_class, make_policy_config, make_pre_post_processors

    inputs = {
        "observation.state": PolicyFeature(FeatureType.STATE, (6,)),
        "observation.images.front": PolicyFeature(FeatureType.VISUAL, (3, 64, 64)),
    }
    cfg = make_policy_config(
        "diffusion",
        input_features=inputs,
        output_features={"action": PolicyFeature(FeatureType.ACTION, (6,))},
        device="cpu",
        pretrained_backbone_weights=None,
        noise_scheduler_type="DDIM",  # deterministic denoising steps: only the initial noise is random
        **KINDS["diffusion"],
    )
    torch.manual_seed(0)
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats())
    policy = LerobotChunkPolicy(get_policy_class("diffusion")(cfg), pre, post)
    observations = _observations()
    same = [PolicyObservation(o.state_rad, 50, o.instruction, o.images) for o in observations[:1]] * 2
    twins = policy.predict_chunks(same)  # same observation, same tick: same noise, same chunk
    np.testing.assert_allclose(twins[0].actions_rad, twins[1].actions_rad, atol=1e-6)
    batched = policy.predict_chunks(observations)
    for b, obs in zip(batched, observations):
        np.testing.assert_allclose(b.actions_rad, policy.predict_chunk(obs).actions_rad, atol=1e-5)


def test_deploy_refuses_an_rtc_mode_for_a_policy_without_rtc_in_one_line(tmp_path, capsys, monkeypatch):
    from robotrl.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    policy, folder = build("act"), tmp_path / "act"
    for part in (policy.policy, policy.preprocessor, policy.postprocessor):
        part.save_pretrained(folder)
    args = ["deploy", "--robot", "sim", "--task", "reach", "--policy", str(folder), "--episodes", "1"]
    assert main([*args, "--mode", "vlash+rtc"]) == 2
    err = capsys.readouterr().err
    assert "follows no RTC prefix: use --mode vlash instead of vlash+rtc" in err and len(err.strip().splitlines()) == 1
