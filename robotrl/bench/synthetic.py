"""Benchmark inputs made offline: untrained checkpoints and a synthetic dataset, for the
throughput benchmarks (`bench serve`, `train` steps/s; `scripts/gpu-bench`): what a model
costs does not depend on its weights or on what the images show.

- `fastslow_checkpoint`: a robotrl fast/slow flow policy (the `FastSlowConfig` defaults,
  cameras and image size as given) with neutral normalisation statistics;
- `act_checkpoint`: a lerobot ACT `pretrained_model` folder (lerobot's default sizes:
  ResNet-18 backbone built without downloaded weights, chunk of 100 rows) with
  statistics in radians around the SO-101 home pose;
- `synthetic_dataset`: a LeRobotDataset of a simulated SO-101 (radians) whose cameras see
  a square that moves with the arm, for `robotrl train`.

    python -c "from robotrl.bench.synthetic import act_checkpoint; act_checkpoint('outputs/act224')"
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HOME_RAD = (0.0, -1.2, 1.1, 1.3, 0.0, 0.0)
"""SO-101 joint angles the statistics centre on (radians)."""
JOINTS = len(HOME_RAD)


def fastslow_checkpoint(
    path: Path | str, *, image_size_px: int = 224, cameras: tuple[str, ...] = ("front", "wrist"), **config
) -> Path:
    """Write an untrained `FastSlowPolicy` (`FastSlowConfig` defaults, then `config`)."""
    import torch

    from robotrl.policies.fastslow.config import FastSlowConfig
    from robotrl.policies.fastslow.model import FastSlowModel
    from robotrl.policies.fastslow.normalize import Normalizer
    from robotrl.policies.fastslow.policy import FastSlowPolicy
    from robotrl.policies.fastslow.vocab import Vocabulary

    cfg = FastSlowConfig(image_size_px=image_size_px, cameras=tuple(cameras), **config)
    h = cfg.horizon
    norm = Normalizer(
        "delta", np.asarray(HOME_RAD), np.full(JOINTS, 0.3), np.zeros((h, JOINTS)), np.full((h, JOINTS), 0.02)
    )
    vocab = Vocabulary(["<pad>", "<unk>", "put", "the", "red", "cube", "in", "bin"])
    torch.manual_seed(0)
    FastSlowPolicy(FastSlowModel(cfg, len(vocab)), norm, vocab).save(Path(path))
    return Path(path)


def act_checkpoint(
    path: Path | str, *, image_size_px: int = 224, cameras: tuple[str, ...] = ("front", "wrist"), **config
) -> Path:
    """Write an untrained lerobot ACT `pretrained_model` folder (lerobot's defaults, then
    `config`), its statistics in radians (a dataset recorded with `--robot sim`)."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import get_policy_class, make_policy_config, make_pre_post_processors

    inputs = {"observation.state": PolicyFeature(FeatureType.STATE, (JOINTS,))}
    inputs |= {
        f"observation.images.{cam}": PolicyFeature(FeatureType.VISUAL, (3, image_size_px, image_size_px))
        for cam in cameras
    }
    cfg = make_policy_config(
        "act",
        input_features=inputs,
        output_features={"action": PolicyFeature(FeatureType.ACTION, (JOINTS,))},
        device="cpu",
        pretrained_backbone_weights=None,
        **config,
    )
    home = torch.tensor(HOME_RAD, dtype=torch.float32)
    joints = {"mean": home, "std": torch.full((JOINTS,), 0.3), "min": home - 1.0, "max": home + 1.0}
    image = {
        "mean": torch.full((3, 1, 1), 0.5),
        "std": torch.full((3, 1, 1), 0.25),
        "min": torch.zeros(3, 1, 1),
        "max": torch.ones(3, 1, 1),
    }
    stats = {"observation.state": joints, "action": dict(joints)}
    stats |= {f"observation.images.{cam}": dict(image) for cam in cameras}
    torch.manual_seed(0)
    policy = get_policy_class("act")(cfg)
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    folder = Path(path)
    policy.save_pretrained(folder)
    pre.save_pretrained(folder)
    post.save_pretrained(folder)
    return folder


def synthetic_dataset(
    root: Path | str,
    *,
    episodes: int = 8,
    ticks: int = 60,
    image_size_px: int = 64,
    cameras: tuple[str, ...] = ("front", "wrist"),
    fps: int = 30,
) -> Path:
    """Write a LeRobotDataset at `root` (new folder): `episodes` x `ticks` frames of an
    SO-101 sweeping its first joints, each camera a square that moves with joint 0."""
    from robotrl.core.robot import CameraSpec, RobotSpec
    from robotrl.hardware.lerobot_arm.convention import RADIANS, JointConvention
    from robotrl.hardware.models import get_arm
    from robotrl.record import features as F
    from robotrl.record.writer import DatasetWriter

    joints = JointConvention(RADIANS, "so101")
    lower, upper = np.full(JOINTS, -3.0), np.full(JOINTS, 3.0)
    spec = RobotSpec(
        "so101",
        get_arm("so101").joint_names,
        lower,
        upper,
        np.full(JOINTS, 3.0),
        float(fps),
        cameras=tuple(CameraSpec(cam, image_size_px, image_size_px) for cam in cameras),
    )
    writer = DatasetWriter(Path(root), F.dataset_features(spec, joints), fps, joints)
    rng = np.random.default_rng(0)
    for episode in range(episodes):
        state = np.asarray(HOME_RAD) + rng.normal(0.0, 0.05, JOINTS)
        step = rng.normal(0.0, 0.01, JOINTS)
        for t in range(ticks):
            action = np.clip(state + step, lower, upper)
            frame: dict = {
                F.STATE: state.astype(np.float32),
                F.ACTION: action.astype(np.float32),
                F.TELEOP_ACTION: action.astype(np.float32),
                F.MEASURED_TIME: np.array([t / fps], np.float32),
                F.REWARD: np.zeros(1, np.float32),
                F.SUCCESS: np.array([t == ticks - 1]),
                "task": "put the red cube in the bin" if episode % 2 else "reach the ball",
            }
            for k, cam in enumerate(cameras):
                frame[F.image_key(cam)] = _square(image_size_px, state[0] + k, t)
            if cameras:
                frame[F.CAMERA_AGE] = np.zeros(len(cameras), np.float32)
            writer.add_frame(frame)
            state = action
        writer.save_episode()
    writer.close()
    return Path(root)


def _square(size_px: int, position: float, t: int) -> np.ndarray:
    """(size, size, 3) uint8: a grey image with a red square placed by `position`."""
    image = np.full((size_px, size_px, 3), 60, np.uint8)
    side = max(2, size_px // 8)
    x = int((np.sin(position) * 0.5 + 0.5) * (size_px - side))
    y = (t * 2) % (size_px - side)
    image[y : y + side, x : x + side] = (230, 40, 40)
    return image
