"""`estimate_env_state`: privileged state as a training target only, estimated from the
cameras at deploy time."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from toy_data import INSTRUCTIONS, TINY, toy_obs

from robotrl.cli import main
from robotrl.core.errors import ConfigError
from robotrl.core.robot import CameraSpec
from robotrl.hardware.camera_geometry import save_rig
from robotrl.inference.stepped import run_stepped_episode
from robotrl.policies.fastslow.config import FastSlowConfig
from robotrl.policies.loading import load_policy
from robotrl.record.blob import blob_env_states
from robotrl.record.dataset import load_frames
from robotrl.record.features import CAMERA_CALIBRATION
from robotrl.sim.env import TaskEnv
from robotrl.train.loss import ENV_LOSS_WEIGHT, ESTIMATE_NOISE, flow_matching_loss
from robotrl.train.trainer import TrainConfig, Trainer, train


def test_an_estimating_policys_fast_pathway_trains_on_the_true_state_blurred_and_its_estimate_on_its_own_error(
    toy_dataset, tmp_path
):
    """`estimate_env_state` in training: the fast pathway reads env_state plus noise of std
    ESTIMATE_NOISE on every feature, however badly the estimate does on the batch (not the
    estimate, which fits the training scenes better than unseen ones; not the estimate's
    error, which teaches it to hedge toward a still world), and the estimate head is
    trained by its own error alone."""
    root, _ = toy_dataset
    frames = load_frames(root, image_size_px=32, use_env_state=True, progress=False)
    cfg = TrainConfig(
        dataset=root,
        out=tmp_path / "blur",
        batch_size=256,
        flow_samples=1,
        policy={**TINY, "use_env_state": True, "estimate_env_state": True},
    )
    trainer = Trainer(cfg, frames=frames, progress=False)
    batch, model, normalizer = trainer.batch(), trainer.model, trainer.normalizer
    seen = []
    fresh = normalizer.fresh
    normalizer.fresh = lambda state, env, *rest: seen.append(env) or fresh(state, env, *rest)
    flow_matching_loss(model, normalizer, batch, flow_samples=1).backward()
    head = [p.grad.clone() for p in model.env_head.parameters()]
    noise = (seen[0] - batch.env_state).numpy()
    model.zero_grad()
    estimate = model.estimate_env(model.encode_slow(batch.images, batch.tokens))
    error_m = (estimate.detach() - normalizer.env(batch.env_state)) * normalizer.stat("env_std", estimate)
    rms_m = error_m.pow(2).mean(0).sqrt().numpy()
    assert (rms_m > 10 * ESTIMATE_NOISE).sum() >= 2  # untrained: the square's position is estimated badly
    np.testing.assert_allclose(noise.std(0), ESTIMATE_NOISE, rtol=0.25)
    assert np.all(np.abs(noise.mean(0)) < 0.5 * ESTIMATE_NOISE)
    (ENV_LOSS_WEIGHT * ((estimate - normalizer.env(batch.env_state)) ** 2).mean()).backward()
    for alone, total in zip((p.grad for p in model.env_head.parameters()), head, strict=True):
        torch.testing.assert_close(alone, total)


def test_a_policy_that_estimates_the_privileged_state_from_its_cameras_reads_none(toy_dataset, tmp_path):
    """`estimate_env_state`: the privileged env_state is only a training target of the slow
    pathway; the trained estimate tracks it (the square's position in the image, the
    instruction's direction), the fast pathway uses the estimate, and the checkpoint reads
    cameras and joints only, so it may run on a real arm."""
    root, frames = toy_dataset
    frames = load_frames(root, image_size_px=32, use_env_state=True, progress=False)
    cfg = TrainConfig(
        dataset=root,
        out=tmp_path / "estimate",
        steps=300,
        batch_size=16,
        lr=2e-3,
        warmup_steps=20,
        flow_samples=1,
        policy={**TINY, "use_env_state": True, "estimate_env_state": True},
    )
    policy = train(cfg, frames=frames, progress=False).policy
    assert policy.metadata.env_state_dim == 0  # nothing privileged on the wire
    frame = 27  # episode 1 (direction -1), t = 7
    obs = toy_obs(INSTRUCTIONS[1], 7)
    obs.images = {cam: frames.images[cam][frame].permute(1, 2, 0).numpy() for cam in ("front", "wrist")}
    latent = policy.encode_slow(obs)
    estimate = policy.estimate_env_state(latent)
    np.testing.assert_allclose(estimate[:2], frames.env_states[frame][:2], atol=0.25)  # (0.35, -1.0)
    read = []  # the env_state the fast pathway reads is that estimate
    fresh = policy.normalizer.fresh
    policy.normalizer.fresh = lambda state, env, *rest: read.append(env) or fresh(state, env, *rest)
    assert obs.env_state is None and policy.predict_chunk(obs, latent).actions_rad.shape == (TINY["horizon"], 6)
    np.testing.assert_allclose(read[0][0].numpy(), estimate, rtol=1e-6)
    loaded = load_policy(tmp_path / "estimate")
    assert loaded.metadata.env_state_dim == 0 and loaded.model.env_head is not None
    with pytest.raises(ConfigError, match="estimate_env_state needs use_env_state"):
        FastSlowConfig(state_dim=6, action_dim=6, estimate_env_state=True)


def test_a_policy_that_reads_no_estimate_has_none_to_report(tiny_flow):
    policy = tiny_flow(cameras=("front",))
    assert policy.estimate_env_state(policy.encode_slow(toy_obs(INSTRUCTIONS[0], 0))) is None


def test_a_blob_target_policy_learns_the_red_objects_track_that_any_recording_has(toy_dataset, tmp_path, capsys):
    """`robotrl train --blob-target front`: the estimate's target is the red square's image
    position, size and velocities in the front video (6 numbers; the dataset's simulator
    state has 3), the checkpoint keeps where its target came from and reads no env_state."""
    root, _ = toy_dataset
    out = tmp_path / "blob"
    args = ["train", "--dataset", str(root), "--out", str(out), "--steps", "3", "--batch-size", "4"]
    args += ["--image-size", "32", "--horizon", "6", "--execute-steps", "3"]
    assert main([*args, "--blob-target", "front"]) == 0
    policy = load_policy(out)
    c = policy.config
    assert (c.use_env_state, c.estimate_env_state, c.env_blob_cameras, c.env_state_dim) == (True, True, ("front",), 6)
    assert policy.metadata.env_state_dim == 0  # nothing privileged on the wire
    frames = load_frames(root, image_size_px=32, progress=False)
    labels = blob_env_states(frames.images, ("front",), frames.episode_start, frames.episode_end, frames.fps)
    np.testing.assert_allclose(policy.normalizer.env_mean, labels.mean(0), atol=1e-5)
    np.testing.assert_allclose(labels[:, 3], 60 / 32, rtol=0.02)  # 1 px a tick rightward at 30 Hz
    # On the simulated track scene (env_state: the ball, 6 numbers) it runs as on a real arm,
    # its estimate (image units) compared with nothing.
    env = TaskEnv("track", cameras=(CameraSpec("front", 32, 32), CameraSpec("wrist", 32, 32)))
    episode = run_stepped_episode(env, 0, "vlash", 2, policy=policy)
    env.close()
    assert episode.ticks == 180 and episode.estimate_errors is None
    assert policy.estimate_env_state(policy.encode_slow(toy_obs(INSTRUCTIONS[0], 0))) is None
    capsys.readouterr()
    assert main([*args, "--blob-target", "front", "--env-state"]) == 2
    assert "--blob-target, --ball-target and --env-state (the simulator's state) exclude" in capsys.readouterr().err
    assert main([*args, "--blob-target", "top", "--out", str(tmp_path / "top")]) == 2
    assert "must be among the cameras read" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="env_blob_cameras"):
        FastSlowConfig(use_env_state=True, env_state_dim=6, env_blob_cameras=("front",))
    with pytest.raises(ConfigError, match="cameras among"):
        FastSlowConfig(use_env_state=True, estimate_env_state=True, env_state_dim=6, env_blob_cameras=("top",))


def test_a_ball_target_policy_learns_the_balls_base_frame_state_from_calibrated_cameras(toy_dataset, tmp_path, capsys):
    """`robotrl train --ball-target [CALIBRATION]`: the estimate's target is the red
    object's position and velocity in the base frame from the calibrated cameras (the
    dataset's own calibration without a value), in the units of the simulator's ball, so
    the stepped benchmark compares the estimate with the simulator's; nothing privileged
    on the wire."""
    root, _ = toy_dataset
    scene = TaskEnv("track", cameras=(CameraSpec("front", 32, 32),))
    save_rig(scene.camera_rig(), root / CAMERA_CALIBRATION)
    scene.close()
    out = tmp_path / "ball"
    args = ["train", "--dataset", str(root), "--steps", "3", "--batch-size", "4"]
    args += ["--image-size", "32", "--horizon", "6", "--execute-steps", "3"]
    try:
        assert main([*args, "--out", str(out), "--ball-target"]) == 0
    finally:
        (root / CAMERA_CALIBRATION).unlink()
    policy = load_policy(out)
    c = policy.config
    assert (c.use_env_state, c.estimate_env_state, c.env_blob_cameras, c.env_state_dim) == (True, True, (), 6)
    assert policy.metadata.env_state_dim == 0
    capsys.readouterr()
    assert main([*args, "--out", str(out), "--resume", "--env-state", "--estimate-env-state"]) == 2
    assert f"the run in {out} was trained with --ball-target {root / CAMERA_CALIBRATION}" in capsys.readouterr().err
    env = TaskEnv("track", cameras=(CameraSpec("front", 32, 32), CameraSpec("wrist", 32, 32)))
    episode = run_stepped_episode(env, 0, "vlash", 2, policy=policy)
    env.close()
    assert episode.estimate_errors is not None and episode.estimate_errors.shape[1] == 6
    capsys.readouterr()
    assert main([*args, "--out", str(tmp_path / "none"), "--ball-target"]) == 2
    assert f"no camera calibration file {root / CAMERA_CALIBRATION}" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "both"), "--ball-target", "x.json", "--env-state"]) == 2
    assert "exclude each other" in capsys.readouterr().err
