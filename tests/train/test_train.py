"""Training: dataset loading, overfitting, what a trained model listens to, checkpoints
and resume, the CLI (the index maths: test_sampling.py)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from robotrl.cli import main
from robotrl.core.errors import ConfigError
from robotrl.core.policy import PolicyObservation
from robotrl.core.robot import CameraSpec, RobotSpec
from robotrl.hardware.lerobot_arm.convention import RADIANS, JointConvention
from robotrl.policies.fastslow import FastSlowPolicy
from robotrl.policies.loading import load_policy
from robotrl.record import features as F
from robotrl.record.dataset import load_frames
from robotrl.record.writer import DatasetWriter
from robotrl.train.loss import ENV_LOSS_WEIGHT, ESTIMATE_NOISE, flow_matching_loss
from robotrl.train.trainer import TrainConfig, Trainer, lr_at, train

TINY = {
    "width": 32,
    "cnn_channels": (8, 16, 16),
    "expert_hidden": 64,
    "expert_blocks": 2,
    "horizon": 6,
    "execute_steps": 3,
    "image_size_px": 32,
    "flow_steps": 4,
    "max_words": 6,
}
"""A policy small enough to train in seconds."""
S0 = np.array([0.0, -1.2, 1.1, 1.3, 0.0, 0.0])
SIM_JOINTS = JointConvention(RADIANS, "so101")
INSTRUCTIONS = ("move left", "move right")
EPISODE_TICKS = 20


def test_learning_rate_schedule():
    cfg = TrainConfig(dataset=".", out=".", steps=1100, lr=1e-3, warmup_steps=100)
    assert lr_at(0, cfg) == pytest.approx(1e-5)  # warm-up: lr * 1 / 100
    assert lr_at(99, cfg) == pytest.approx(1e-3)
    assert lr_at(600, cfg) == pytest.approx(0.55e-3)  # half-way: 0.1 + 0.9 * 0.5 = 0.55
    assert lr_at(1100, cfg) == pytest.approx(1e-4)  # the end: 0.1 * lr
    assert lr_at(200, cfg, time_fraction=1.0) == pytest.approx(1e-4)  # the time budget ran out first


# --- a tiny synthetic dataset with the recorder's layout --------------------------------


def _spec() -> RobotSpec:
    names = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
    return RobotSpec(
        "so101",
        names,
        -3 * np.ones(6),
        3 * np.ones(6),
        5 * np.ones(6),
        30.0,
        cameras=(CameraSpec("front", 32, 32), CameraSpec("wrist", 32, 32)),
    )


def _image(t: int, direction: float) -> np.ndarray:
    """A bright square that moves with time (the same for both instructions)."""
    img = np.full((32, 32, 3), 60, np.uint8)
    x = 2 + t
    img[12:20, x : x + 6] = (230, 40, 40)
    return img


def write_toy_dataset(root, episodes: int = 4) -> None:
    """Episodes alternate between the instructions; the arm moves joint 0 left (+) or
    right (-) from the same start, so only the instruction tells the first chunk apart."""
    writer = DatasetWriter(root, F.dataset_features(_spec(), SIM_JOINTS, env_state_dim=3), 30, SIM_JOINTS)
    for ep in range(episodes):
        direction = 1.0 if ep % 2 == 0 else -1.0
        state = S0.copy()
        for t in range(EPISODE_TICKS):
            action = state + np.array([0.04 * direction, 0.01, -0.01, 0.0, 0.0, 0.0])
            writer.add_frame(
                {
                    F.STATE: state.astype(np.float32),
                    F.ACTION: action.astype(np.float32),
                    F.TELEOP_ACTION: action.astype(np.float32),
                    F.MEASURED_TIME: np.array([t / 30], np.float32),
                    F.REWARD: np.zeros(1, np.float32),
                    F.SUCCESS: np.array([t == EPISODE_TICKS - 1]),
                    F.ENV_STATE: np.array([t / EPISODE_TICKS, direction, 0.0], np.float32),
                    F.image_key("front"): _image(t, direction),
                    F.image_key("wrist"): _image(t, direction)[::-1].copy(),
                    "task": INSTRUCTIONS[ep % 2],
                }
            )
            state = action
        writer.save_episode()
    writer.close()


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """(dataset root, FrameTable, briefly trained Trainer)."""
    base = tmp_path_factory.mktemp("toy")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HOME", str(base / "hf"))
        mp.setenv("HF_DATASETS_CACHE", str(base / "hf" / "datasets"))
        root = base / "toy_ds"
        write_toy_dataset(root)
        frames = load_frames(root, image_size_px=32, progress=False)
        cfg = TrainConfig(
            dataset=root,
            out=base / "ckpt",
            steps=400,
            batch_size=16,
            lr=2e-3,
            warmup_steps=20,
            k_max=2,
            latent_delay_max=3,
            flow_samples=2,
            save_every=10_000,
            policy=TINY,
        )
        trainer = Trainer(cfg, frames, progress=False)
        trainer.train()
        yield root, frames, trainer


def test_frames_load_into_ram(toy):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root, frames, _ = toy
    assert frames.num_frames == 4 * EPISODE_TICKS and frames.num_episodes == 4
    assert frames.images["front"].shape == (80, 3, 32, 32) and frames.images["front"].dtype == torch.uint8
    assert frames.episode_start[25] == 20 and frames.episode_end[25] == 40
    assert sorted(frames.tasks) == sorted(INSTRUCTIONS)
    np.testing.assert_allclose(frames.actions[1], frames.states[2], atol=1e-6)
    # The same frame as lerobot's own loader decodes it.
    item = LeRobotDataset(f"local/{root.name}", root=root, video_backend="pyav")[27]
    ours = frames.images["wrist"][27].float() / 255
    assert torch.allclose(ours, item[F.image_key("wrist")], atol=1 / 255 + 1e-6)
    # ... and roughly what was written (lossy video).
    written = torch.from_numpy(_image(7, -1.0)[::-1].copy()).permute(2, 0, 1).float()
    assert (frames.images["wrist"][27].float() - written).abs().mean() < 8


def test_dataset_missing_a_feature_is_a_clear_error(toy):
    root, _, _ = toy
    with pytest.raises(ConfigError, match="observation.images.top"):
        load_frames(root, cameras=("front", "top"), image_size_px=32, progress=False)


def test_training_overfits_a_tiny_dataset(toy):
    _, _, trainer = toy
    losses = [v for _, v in trainer.losses]
    first, last = np.mean(losses[:2]), np.mean(losses[-4:])
    assert last * 10 <= first, f"loss fell only from {first:.3f} to {last:.3f}"


def test_the_checkpoint_records_where_the_episodes_started(toy, tmp_path):
    """Every toy episode starts at S0 and then raises joint 1 by 0.01 rad a tick: the start
    pose is S0, not the mean state, and it survives saving (the server's hello carries it
    to a real arm)."""
    _, frames, trainer = toy
    policy = trainer.policy()
    np.testing.assert_allclose(policy.metadata.start_state_rad, S0, atol=1e-6)
    assert frames.states[:, 1].mean() > S0[1] + 0.05  # the mean state is elsewhere
    policy.save(tmp_path / "ck")
    np.testing.assert_allclose(FastSlowPolicy.load(tmp_path / "ck").metadata.start_state_rad, S0, atol=1e-6)


def _obs(instruction: str, t: int = 0, delay: int = 0) -> PolicyObservation:
    return PolicyObservation(
        state_rad=S0.copy(),
        tick=t,
        instruction=instruction,
        delay_ticks=delay,
        images={"front": _image(t, 1.0), "wrist": _image(t, 1.0)[::-1].copy()},
    )


def test_trained_model_follows_the_instruction(toy):
    policy = toy[2].policy()
    left = policy.predict_chunk(_obs("move left")).actions_rad
    right = policy.predict_chunk(_obs("move right")).actions_rad
    assert left.shape == right.shape == (TINY["horizon"], 6)
    # Radians, absolute: the first row is one step (0.04 rad) from the start, in the
    # instructed direction; the other joints follow the data.
    assert left[0, 0] - S0[0] == pytest.approx(0.04, abs=0.02)
    assert right[0, 0] - S0[0] == pytest.approx(-0.04, abs=0.02)
    assert np.abs(left[:, 1:3] - S0[1:3]).max() < 0.2


def test_latent_age_changes_the_output(toy):
    policy = toy[2].policy()
    obs = _obs("move left", t=5)
    latent = policy.encode_slow(obs)
    fresh = policy.predict_chunk(obs, latent, latent_age_ticks=0).actions_rad
    stale = policy.predict_chunk(obs, latent, latent_age_ticks=3).actions_rad
    assert not np.allclose(fresh, stale, atol=1e-5)
    # predict_chunk(obs) alone is the age-0 fresh latent.
    np.testing.assert_array_equal(policy.predict_chunk(obs).actions_rad, fresh)
    # delay_ticks adds to the age the expert sees: latent age 1 + delay 2 == age 3.
    np.testing.assert_array_equal(policy.predict_chunk(_obs("move left", t=5, delay=2), latent, 1).actions_rad, stale)


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
    for obs in (_obs("move left", 3), _obs("move right", 0, delay=2), _obs("unknown words here", 1)):
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
    obs = _obs("move left", 4, delay=2)
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
        joints = policy.predict_chunk(_obs(instruction)).actions_rad
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


def test_lerobots_policy_features_of_a_robotrl_dataset_are_what_a_real_arm_has(toy):
    """lerobot's trainer takes every `observation.*` feature as an input and every `action*`
    one as an output: a robotrl dataset shows it only the joints, the cameras and the action
    (not the simulator's state, the clock or the teleop's request)."""
    from lerobot.configs.types import FeatureType
    from lerobot.utils.feature_utils import dataset_to_policy_features

    root, _, _ = toy
    features = dataset_to_policy_features(json.loads((root / "meta" / "info.json").read_text())["features"])
    inputs = {k for k, f in features.items() if f.type is not FeatureType.ACTION}
    assert inputs == {F.STATE, F.image_key("front"), F.image_key("wrist")}
    assert {k for k, f in features.items() if f.type is FeatureType.ACTION} == {F.ACTION}


def test_a_dataset_made_with_lerobots_api_in_degrees_trains_in_radians(toy, tmp_path, monkeypatch):
    """The toy episodes written as `lerobot-record` writes an SO-101 (names `<joint>.pos`,
    arm degrees, gripper 0..100, robot_type so_follower, lerobot's own API): robotrl reads
    the same radians, trains, and its checkpoint acts in radians."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from robotrl.hardware.lerobot_arm.convention import LEROBOT

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    toy_root, toy_frames, _ = toy
    lerobot = JointConvention(LEROBOT, "so101")
    joint = {"dtype": "float32", "shape": (6,), "names": lerobot.names}
    video = {"dtype": "video", "shape": (32, 32, 3), "names": ["height", "width", "channels"]}
    root = tmp_path / "lerobot_native"
    features = {F.STATE: joint, F.ACTION: joint, F.image_key("front"): video}
    ds = LeRobotDataset.create("me/native", 30, features, root=root, robot_type="so_follower")
    for start in range(0, toy_frames.num_frames, EPISODE_TICKS):
        for i in range(start, start + EPISODE_TICKS):
            image = toy_frames.images["front"][i].permute(1, 2, 0).numpy()
            state, action = (
                lerobot.from_radians(x[i]).astype(np.float32) for x in (toy_frames.states, toy_frames.actions)
            )
            ds.add_frame({F.STATE: state, F.ACTION: action, F.image_key("front"): image, "task": "native"})
        ds.save_episode()
    ds.finalize()
    assert np.abs(ds.hf_dataset.with_format("numpy")[F.STATE]).max() > 60  # stored in degrees

    frames = load_frames(root, cameras=("front",), image_size_px=32, progress=False)
    assert frames.joint_units == "lerobot"
    np.testing.assert_allclose(frames.states, toy_frames.states, atol=1e-4)
    np.testing.assert_allclose(frames.actions, toy_frames.actions, atol=1e-4)
    out = tmp_path / "native_ckpt"
    args = ["--dataset", str(root), "--out", str(out), "--steps", "3", "--batch-size", "4", "--image-size", "32"]
    assert main(["train", *args, "--cameras", "front", "--horizon", "6", "--execute-steps", "6"]) == 0
    assert json.loads((out / "config.json").read_text())["training"]["dataset_joint_units"] == "lerobot"
    policy = load_policy(out)
    obs = _obs("native")
    obs.images = {"front": obs.images["front"]}
    assert np.abs(policy.predict_chunk(obs).actions_rad).max() < 2 * np.pi  # radians, not degrees

    # Names of neither convention: one line naming both.
    info_file = root / "meta" / "info.json"
    info = json.loads(info_file.read_text())
    info["features"][F.STATE]["names"] = [f"motor_{i}" for i in range(6)]
    info_file.write_text(json.dumps(info))
    with pytest.raises(ConfigError, match=r"neither robotrl's radians .* nor lerobot's degrees"):
        load_frames(root, cameras=("front",), image_size_px=32, progress=False)


def test_a_dataset_of_the_older_robotrl_layout_still_loads(tmp_path, monkeypatch):
    """Datasets written before the privileged columns moved out of `observation.*` keep
    loading: `observation.environment_state` and `action.teleop` are read as the new ones."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    joint = {"dtype": "float32", "shape": (6,), "names": SIM_JOINTS.names}
    old = {F.STATE: joint, F.ACTION: joint, "action.teleop": joint}
    old["observation.environment_state"] = {"dtype": "float32", "shape": (2,), "names": None}
    ds = LeRobotDataset.create("local/old", 30, old, root=tmp_path / "old", robot_type="so101", use_videos=False)
    for t in range(5):
        q = (S0 + 0.01 * t).astype(np.float32)
        env = np.array([t, -t], np.float32)
        ds.add_frame(
            {
                F.STATE: q,
                F.ACTION: q + 0.1,
                "action.teleop": q + 0.2,
                "observation.environment_state": env,
                "task": "old",
            }
        )
    ds.save_episode()
    ds.finalize()
    frames = load_frames(tmp_path / "old", cameras=(), use_env_state=True, progress=False, action_key=F.TELEOP_ACTION)
    np.testing.assert_allclose(frames.actions - frames.states, 0.2, atol=1e-6)
    np.testing.assert_allclose(frames.env_states[:, 0] if frames.env_states is not None else None, np.arange(5))


def test_an_estimating_policys_fast_pathway_trains_on_the_true_state_blurred_and_its_estimate_on_its_own_error(
    toy, tmp_path
):
    """`estimate_env_state` in training: the fast pathway reads env_state plus noise of std
    ESTIMATE_NOISE (not the estimate, which fits the training scenes better than unseen
    ones), and the estimate head is trained by its own error alone."""
    root, _, _ = toy
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
    assert noise.std() == pytest.approx(ESTIMATE_NOISE, rel=0.1) and abs(noise.mean()) < 0.1 * ESTIMATE_NOISE
    model.zero_grad()
    estimate = model.estimate_env(model.encode_slow(batch.images, batch.tokens))
    (ENV_LOSS_WEIGHT * ((estimate - normalizer.env(batch.env_state)) ** 2).mean()).backward()
    for alone, total in zip((p.grad for p in model.env_head.parameters()), head, strict=True):
        torch.testing.assert_close(alone, total)


def test_a_policy_that_estimates_the_privileged_state_from_its_cameras_reads_none(toy, tmp_path):
    """`estimate_env_state`: the privileged env_state is only a training target of the slow
    pathway; the trained estimate tracks it (the square's position in the image, the
    instruction's direction), the fast pathway uses the estimate, and the checkpoint reads
    cameras and joints only, so it may run on a real arm."""
    root, frames, _ = toy
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
    obs = _obs(INSTRUCTIONS[1], 7)
    obs.images = {cam: frames.images[cam][frame].permute(1, 2, 0).numpy() for cam in ("front", "wrist")}
    latent = policy.encode_slow(obs)
    estimate = policy.normalizer.env_from(policy.model.estimate_env(latent[None]).detach())[0].numpy()
    np.testing.assert_allclose(estimate[:2], frames.env_states[frame][:2], atol=0.25)  # (0.35, -1.0)
    assert obs.env_state is None and policy.predict_chunk(obs).actions_rad.shape == (TINY["horizon"], 6)
    loaded = load_policy(tmp_path / "estimate")
    assert loaded.metadata.env_state_dim == 0 and loaded.model.env_head is not None
    from robotrl.policies.fastslow.config import FastSlowConfig

    with pytest.raises(ConfigError, match="estimate_env_state needs use_env_state"):
        FastSlowConfig(state_dim=6, action_dim=6, estimate_env_state=True)
