"""What the recording tests share: the simulated arm's joint convention and a dataset loader."""

from __future__ import annotations

from pathlib import Path

from robotrl.hardware.lerobot_arm.convention import RADIANS, JointConvention
from robotrl.record import features as F
from robotrl.record.loop import record_episode
from robotrl.record.writer import DatasetWriter

SIM_JOINTS = JointConvention(RADIANS, "so101")


def record_expert_episode(env, root: Path, seed: int, max_ticks: int, writer_class=DatasetWriter) -> DatasetWriter:
    """One episode of `env`'s scripted expert recorded into a new dataset at `root`; the
    (closed) writer."""
    from robotrl.sim.teleop import ExpertTeleop

    writer = writer_class(root, F.dataset_features(env.spec, SIM_JOINTS, env.env_state_dim), 30, SIM_JOINTS)
    record_episode(env, ExpertTeleop(env), writer, seed=seed, max_ticks=max_ticks)
    writer.save_episode()
    writer.close()
    return writer


def load(root: Path):
    """The dataset at `root` through lerobot's own class (pyav decoding)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    return LeRobotDataset(f"local/{root.name}", root=root, video_backend="pyav")
