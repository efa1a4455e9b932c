"""Training: overfitting, what a trained model listens to, checkpoints
and resume, the CLI (loading: test_dataset_loading.py; the index maths: test_sampling.py)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from toy_data import INSTRUCTIONS, S0, TINY, toy_obs

from robotrl.cli import main
from robotrl.core.errors import ConfigError
from robotrl.policies.fastslow import FastSlowPolicy
from robotrl.policies.loading import load_policy
from robotrl.record.dataset import load_frames
from robotrl.train.trainer import TrainConfig, Trainer, lr_at, train


def test_learning_rate_schedule():
    cfg = TrainConfig(dataset=".", out=".", steps=1100, lr=1e-3, warmup_steps=100)
    assert lr_at(0, cfg) == pytest.approx(1e-5)  # warm-up: lr * 1 / 100
    assert lr_at(99, cfg) == pytest.approx(1e-3)
    assert lr_at(600, cfg) == pytest.approx(0.55e-3)  # half-way: 0.1 + 0.9 * 0.5 = 0.55
    assert lr_at(1100, cfg) == pytest.approx(1e-4)  # the end: 0.1 * lr
    assert lr_at(200, cfg, time_fraction=1.0) == pytest.approx(1e-4)  # the time budget ran out first


def test_training_overfits_a_tiny_dataset(toy):
    _, _, trainer = toy
    losses = [v for _, v in trainer.losses]
    first, last = np.mean(losses[:2]), np.mean(losses[-4:])
    assert last * 10 <= first, f"loss fell only from {first:.3f} to {last:.3f}"


def test_the_checkpoint_records_where_the_episodes_started_and_what_they_were_told(toy, tmp_path):
    """Every toy episode starts at S0 and then raises joint 1 by 0.01 rad a tick: the start
    pose is S0, not the mean state; the instructions are the episodes' two. Both survive
    saving (the server's hello carries them to a real arm)."""
    _, frames, trainer = toy
    policy = trainer.policy()
    np.testing.assert_allclose(policy.metadata.start_state_rad, S0, atol=1e-6)
    assert frames.states[:, 1].mean() > S0[1] + 0.05  # the mean state is elsewhere
    assert policy.metadata.instructions == INSTRUCTIONS == ("move left", "move right")
    policy.save(tmp_path / "ck")
    loaded = FastSlowPolicy.load(tmp_path / "ck").metadata
    np.testing.assert_allclose(loaded.start_state_rad, S0, atol=1e-6)
    assert loaded.instructions == INSTRUCTIONS


def test_the_checkpoint_records_the_oldest_latent_it_was_trained_on(toy, tmp_path):
    """The toy trainer draws latents up to J = 3 ticks old (`--latent-delay-max 3`): a
    server re-encodes an older one. A checkpoint saved before the field gets J from its
    training section."""
    import json

    _, _, trainer = toy
    policy = trainer.policy()
    assert policy.metadata.max_latent_age_ticks == 3
    policy.save(tmp_path / "ck", extra={"train_config": {"latent_delay_max": 3}})
    assert FastSlowPolicy.load(tmp_path / "ck").metadata.max_latent_age_ticks == 3
    doc = json.loads((tmp_path / "ck" / "config.json").read_text())
    del doc["config"]["latent_delay_max"]
    (tmp_path / "ck" / "config.json").write_text(json.dumps(doc))
    assert FastSlowPolicy.load(tmp_path / "ck").metadata.max_latent_age_ticks == 3


def test_trained_model_follows_the_instruction(toy):
    policy = toy[2].policy()
    left = policy.predict_chunk(toy_obs("move left")).actions_rad
    right = policy.predict_chunk(toy_obs("move right")).actions_rad
    assert left.shape == right.shape == (TINY["horizon"], 6)
    # Radians, absolute: the first row is one step (0.04 rad) from the start, in the
    # instructed direction; the other joints follow the data.
    assert left[0, 0] - S0[0] == pytest.approx(0.04, abs=0.02)
    assert right[0, 0] - S0[0] == pytest.approx(-0.04, abs=0.02)
    assert np.abs(left[:, 1:3] - S0[1:3]).max() < 0.2


def test_latent_age_changes_the_output(toy):
    policy = toy[2].policy()
    obs = toy_obs("move left", t=5)
    latent = policy.encode_slow(obs)
    fresh = policy.predict_chunk(obs, latent, latent_age_ticks=0).actions_rad
    stale = policy.predict_chunk(obs, latent, latent_age_ticks=3).actions_rad
    assert not np.allclose(fresh, stale, atol=1e-5)
    # predict_chunk(obs) alone is the age-0 fresh latent.
    np.testing.assert_array_equal(policy.predict_chunk(obs).actions_rad, fresh)
    # delay_ticks adds to the age the expert sees: latent age 1 + delay 2 == age 3.
    delayed = toy_obs("move left", t=5, delay=2)
    np.testing.assert_array_equal(policy.predict_chunk(delayed, latent, 1).actions_rad, stale)


def test_checkpoint_holds_everything_and_round_trips_bitwise(toy, tmp_path):
    trainer = toy[2]
    trainer.policy().save(tmp_path / "ck", {"step": trainer.step})
    doc = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert doc["policy_type"] == "fastslow_flow" and doc["code_version"].startswith("robotrl")
    assert set(doc["vocabulary"]) >= {"<pad>", "<unk>", "move", "left", "right"}
    assert doc["normalization"]["action_mode"] == "delta" and doc["config"]["horizon"] == TINY["horizon"]
    loaded = load_policy(tmp_path / "ck")
    assert isinstance(loaded, FastSlowPolicy)
    assert loaded.metadata == trainer.policy().metadata
    for obs in (toy_obs("move left", 3), toy_obs("move right", 0, delay=2), toy_obs("unknown words here", 1)):
        np.testing.assert_array_equal(
            loaded.predict_chunk(obs).actions_rad, trainer.policy().predict_chunk(obs).actions_rad
        )
    # The checkpoint says its joint units; other units are refused, not served.
    assert doc["joint_units"] == "radians"
    (tmp_path / "ck" / "config.json").write_text(json.dumps({**doc, "joint_units": "lerobot"}))
    with pytest.raises(ConfigError, match="'lerobot' joint units; robotrl reads radians"):
        load_policy(tmp_path / "ck")


def test_resume_continues_exactly(toy, tmp_path):
    root, frames, _ = toy
    base = dict(
        dataset=root,
        batch_size=8,
        lr=1e-3,
        warmup_steps=2,
        flow_samples=1,
        save_every=1000,
        latent_delay_max=2,
        policy=TINY,
    )
    straight = train(TrainConfig(out=tmp_path / "a", steps=12, **base), frames=frames, progress=False)
    interrupted = Trainer(TrainConfig(out=tmp_path / "b", steps=12, **base), frames, progress=False)
    assert interrupted.train(until_step=5).steps == 5  # as if killed after its checkpoint at step 5
    with pytest.raises(ConfigError, match="--resume"):
        train(TrainConfig(out=tmp_path / "b", steps=12, **base), frames=frames, progress=False)
    resumed = train(TrainConfig(out=tmp_path / "b", steps=12, **base), resume=True, frames=frames, progress=False)
    assert resumed.steps == 12
    for (name, a), b in zip(straight.policy.model.state_dict().items(), resumed.policy.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_checkpoint_taken_with_a_batch_prefetched_resumes_before_that_batch(toy, tmp_path):
    """On a GPU the trainer assembles the next batch while a step runs; a checkpoint then
    keeps the RNG state from before that batch, so the resumed run draws it again."""
    root, frames, _ = toy
    cfg = TrainConfig(
        dataset=root, out=tmp_path / "ckpt", steps=8, batch_size=4, warmup_steps=1, save_every=1000, shift_px=2,
        policy=TINY, device="cpu",
    )  # fmt: skip
    first = Trainer(cfg, frames, progress=False)
    first.train(until_step=3)
    first._prefetch()  # what a CUDA run does after each step
    first.save()
    resumed = Trainer(cfg, frames, progress=False)
    resumed.resume()
    assert first._prefetched is not None
    expected, got = first._prefetched[0], resumed.batch()
    for field in ("state", "chunk", "mask", "age", "tokens"):
        assert torch.equal(getattr(expected, field), getattr(got, field)), field
    assert all(torch.equal(a, b) for a, b in zip(expected.images, got.images))


def test_the_two_thread_cap_applies_on_the_cpu_device(toy, tmp_path):
    root, frames, _ = toy
    before = torch.get_num_threads()
    try:
        Trainer(
            TrainConfig(dataset=root, out=tmp_path / "a", threads=4, device="cpu", policy=TINY), frames, progress=False
        )
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ConfigError, match="device 'tpu' is not one of"):
        TrainConfig(dataset=root, out=tmp_path / "b", device="tpu")


def test_rtc_training_env_state_and_ee_feature_options(toy, tmp_path):
    root, _, _ = toy
    frames = load_frames(root, image_size_px=32, use_env_state=True, progress=False)
    cfg = TrainConfig(
        dataset=root,
        out=tmp_path / "rtc",
        steps=3,
        batch_size=8,
        rtc_train=True,
        rtc_max_prefix=3,
        flow_samples=1,
        policy={
            **TINY,
            "use_env_state": True,
            "ee_features_arm": "so101",
            "env_object_dim": 3,
            "relative_objects": True,
        },
    )
    policy = train(cfg, frames=frames, progress=False).policy
    assert policy.config.rtc_train and policy.config.env_state_dim == 3 and policy.config.env_object_dim == 3
    assert policy.config.fresh_dim == 6 + 3 + 9 + 3 and policy.normalizer.ee_mean.shape == (9,)
    policy = load_policy(tmp_path / "rtc")  # the checkpoint alone rebuilds the feature pipeline
    assert policy.model.expert.objects is not None and policy.model.expert.fresh_film is not None
    obs = toy_obs("move left", 4, delay=2)
    with pytest.raises(ValueError, match="env_state"):
        policy.predict_chunk(obs)
    obs.env_state = np.array([0.2, 1.0, 0.0])
    obs.prefix_rad = np.tile(S0 + 0.5, (4, 1))
    chunk = policy.predict_chunk(obs)
    np.testing.assert_array_equal(chunk.actions_rad[:2], obs.prefix_rad[:2])  # d = 2 rows frozen
    assert chunk.start_tick == 6


def test_forwarded_states_get_noise_and_their_features_follow(toy, tmp_path):
    root, _, _ = toy
    frames = load_frames(root, image_size_px=32, progress=False)
    policy = {**TINY, "ee_features_arm": "so101"}
    cfg = TrainConfig(
        dataset=root,
        out=tmp_path / "n",
        batch_size=256,
        k_max=4,
        k_zero_prob=0.0,
        forward_noise=2.0,
        policy=policy,
    )
    trainer = Trainer(cfg, frames=frames, progress=False)
    batch = trainer.batch()
    assert trainer.ee_features is not None
    np.testing.assert_allclose(batch.ee.numpy(), trainer.ee_features(batch.state.numpy()), atol=1e-5)
    clean = Trainer(dataclasses.replace(cfg, forward_noise=0.0), frames=frames, progress=False).batch()
    error = (batch.state - clean.state).numpy()  # the same examples (same seed), noise only
    np.testing.assert_array_equal(batch.chunk.numpy(), clean.chunk.numpy())
    k = (clean.state != batch.state).any(axis=1).numpy()
    moving = trainer.motion_std > 1e-3  # the toy episodes move the shoulder pan only
    assert moving.tolist() == [True] + [False] * 5
    ratio = error[k][:, 0].std() / trainer.motion_std[0]  # k ~ U{1..4}, some clipped: std 2 k motion
    assert 3 < ratio < 8 and np.abs(error[:, ~moving]).max() < 1e-6
    with pytest.raises(ConfigError, match="forward_noise"):
        TrainConfig(dataset=root, out=tmp_path / "m", forward_noise=-0.1)


def test_end_effector_actions_train_and_decode_to_joints(toy, tmp_path):
    """action_mode ee_delta: the expert learns gripper positions (metres); chunks come back
    as joints (IK) that move the gripper the instructed way, as the data did."""
    root, frames, _ = toy
    cfg = TrainConfig(
        dataset=root,
        out=tmp_path / "ee",
        steps=400,
        batch_size=16,
        lr=2e-3,
        warmup_steps=20,
        flow_samples=2,
        save_every=10_000,
        policy={**TINY, "action_mode": "ee_delta", "ee_features_arm": "so101"},
    )
    train(cfg, frames=frames, progress=False)
    policy = load_policy(tmp_path / "ee")
    assert policy.normalizer.action_mode == "ee_delta" and policy.normalizer.arm == "so101"
    rows = policy.normalizer.ee_actions
    start = rows.to_ee(S0[None])[0, :3]
    data = rows.to_ee(frames.actions[: TINY["horizon"]])[:, :3] - start  # "move left": -4.9 mm of y per tick
    for instruction, sign in (("move left", 1.0), ("move right", -1.0)):
        joints = policy.predict_chunk(toy_obs(instruction)).actions_rad
        assert joints.shape == (TINY["horizon"], 6)
        assert np.all(sign * (joints[:, 0] - S0[0]) > 0)  # the pan turns the way the data turned it
        gripper = rows.to_ee(joints)[:, :3] - start
        assert np.all(-sign * gripper[:, 1] > 0)
        assert gripper[0, 1] == pytest.approx(sign * data[0, 1], abs=0.002)
        np.testing.assert_allclose(gripper[:, [0, 2]], data[:, [0, 2]], atol=0.005)


def test_cli_train_then_bench(toy, tmp_path, capsys, monkeypatch):
    root, _, _ = toy
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    out = tmp_path / "cli_ckpt"
    rc = main(
        [
            "train",
            "--dataset",
            str(root),
            "--out",
            str(out),
            "--steps",
            "3",
            "--batch-size",
            "4",
            "--image-size",
            "32",
            "--horizon",
            "6",
            "--execute-steps",
            "6",
        ]
    )
    assert rc == 0 and (out / "model.safetensors").is_file() and (out / "training_state.json").is_file()
    assert "parameters" in capsys.readouterr().out
    rc = main(
        [
            "bench",
            "policy",
            "--policy",
            str(out),
            "--task",
            "reach",
            "--episodes",
            "1",
            "--out",
            str(tmp_path / "bench"),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "Wilson 95% interval" in text and "latent age" in text
    assert "joints (6), camera front 32 px, camera wrist 32 px" in text  # what it reads; no sim state
    results = json.loads((tmp_path / "bench" / "policy" / "results.json").read_text())
    assert results["episodes"] == 1 and results["latent_age_ticks"] == {"0": results["latent_age_ticks"]["0"]}
    # A dataset that is not there is a one-line error, not a traceback.
    assert main(["train", "--dataset", str(tmp_path / "nope"), "--out", str(tmp_path / "x")]) == 2


def test_a_run_stopped_by_its_time_budget_is_still_evaluated(toy, tmp_path):
    root, frames, _ = toy
    cfg = TrainConfig(
        dataset=root,
        out=tmp_path / "budget",
        steps=100_000,
        batch_size=8,
        lr=1e-3,
        warmup_steps=2,
        flow_samples=1,
        save_every=100_000,
        eval_episodes=1,
        task="reach",
        time_budget_s=0.5,
        policy=TINY,
    )
    result = train(cfg, frames=frames, progress=False)
    assert 0 < result.steps < cfg.steps
    assert [e["step"] for e in result.evals] == [result.steps] and 0.0 <= result.evals[0]["success_rate"] <= 1.0
