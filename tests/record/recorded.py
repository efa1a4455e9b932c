"""What the recording tests share: the simulated arm's joint convention and a dataset loader."""

from __future__ import annotations

from pathlib import Path

from robotrl.hardware.lerobot_arm.convention import RADIANS, JointConvention

SIM_JOINTS = JointConvention(RADIANS, "so101")


def load(root: Path):
    """The dataset at `root` through lerobot's own class (pyav decoding)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    return LeRobotDataset(f"local/{root.name}", root=root, video_backend="pyav")
