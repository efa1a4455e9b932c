"""Loading datasets for training: the recorder's, lerobot's (degrees), the older layout;
what lerobot's trainer sees of them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from toy_data import EPISODE_TICKS, INSTRUCTIONS, S0, SIM_JOINTS, toy_image, toy_obs

from robotrl.cli import main
from robotrl.core.errors import ConfigError
from robotrl.hardware.lerobot_arm.convention import JointConvention
from robotrl.policies.loading import load_policy
from robotrl.record import features as F
from robotrl.record.dataset import load_frames


def test_frames_load_into_ram(toy_dataset):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root, frames = toy_dataset
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
    written = torch.from_numpy(toy_image(7, -1.0)[::-1].copy()).permute(2, 0, 1).float()
    assert (frames.images["wrist"][27].float() - written).abs().mean() < 8


def test_dataset_missing_a_feature_is_a_clear_error(toy_dataset):
    root, _ = toy_dataset
    with pytest.raises(ConfigError, match="observation.images.top"):
        load_frames(root, cameras=("front", "top"), image_size_px=32, progress=False)


def test_lerobots_policy_features_of_a_robotrl_dataset_are_what_a_real_arm_has(toy_dataset):
    """lerobot's trainer takes every `observation.*` feature as an input and every `action*`
    one as an output: a robotrl dataset shows it only the joints, the cameras and the action
    (not the simulator's state, the clock or the teleop's request)."""
    from lerobot.configs.types import FeatureType
    from lerobot.utils.feature_utils import dataset_to_policy_features

    root, _ = toy_dataset
    features = dataset_to_policy_features(json.loads((root / "meta" / "info.json").read_text())["features"])
    inputs = {k for k, f in features.items() if f.type is not FeatureType.ACTION}
    assert inputs == {F.STATE, F.image_key("front"), F.image_key("wrist")}
    assert {k for k, f in features.items() if f.type is FeatureType.ACTION} == {F.ACTION}


def test_a_dataset_made_with_lerobots_api_in_degrees_trains_in_radians(toy_dataset, tmp_path, monkeypatch):
    """The toy episodes written as `lerobot-record` writes an SO-101 (names `<joint>.pos`,
    arm degrees, gripper 0..100, robot_type so_follower, lerobot's own API): robotrl reads
    the same radians, trains, and its checkpoint acts in radians."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from robotrl.hardware.lerobot_arm.convention import LEROBOT

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    toy_root, toy_frames = toy_dataset
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
    obs = toy_obs("native")
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
