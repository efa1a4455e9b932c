"""`ReplayTeleop`: play back the actions of one recorded episode of a local LeRobotDataset.

Rows come out in frame order, one per tick, as float64 joint targets in radians, converted
from the dataset's own convention (`convention.py`: radians, or lerobot's degrees and
gripper 0..100 as `lerobot-record` and robotrl's real-arm recordings store them). The read
that returns the last row raises `success`, so a recorder that keeps the frame of the
ending tick records exactly the episode's length; reads after that hold the last row,
still with `success`.
lerobot is imported inside `connect()` only; nothing is downloaded (a local `root` only).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from robotrl.core.errors import ConfigError, DeviceNotConnected
from robotrl.core.robot import RobotState
from robotrl.hardware.lerobot_arm.convention import dataset_convention
from robotrl.hardware.teleop.base import TeleopCommand, TeleopEvents

log = logging.getLogger(__name__)


class ReplayTeleop:
    """A `TeleopDevice` replaying episode `episode` of the dataset in folder `root`.

    Args:
        root: dataset folder (holding `meta/info.json`); its name is used as the repo id.
        episode: episode index in the dataset.
        action_key: feature holding the (J,) joint targets.
    """

    def __init__(self, root: str | Path, episode: int, action_key: str = "action") -> None:
        self.root = Path(root).expanduser()
        self.episode = int(episode)
        self.action_key = action_key
        self._rows: np.ndarray | None = None
        self._index = 0

    @property
    def rows_rad(self) -> np.ndarray:
        """(T, J) the episode's targets in radians (a copy)."""
        return self._require().copy()

    def connect(self) -> None:
        """Load the episode's rows. `ConfigError` for a missing dataset, an episode out of
        range or a missing action feature."""
        if self._rows is not None:
            return
        if not (self.root / "meta" / "info.json").is_file():
            raise ConfigError(
                f"no LeRobotDataset at {self.root} (no meta/info.json): pass the dataset "
                "folder that `robotrl record` wrote"
            )
        from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

        meta = LeRobotDatasetMetadata(repo_id=self.root.name, root=self.root)
        if self.action_key not in meta.features:
            raise ConfigError(
                f"dataset {self.root} has no feature {self.action_key!r}; it has: {', '.join(sorted(meta.features))}"
            )
        if not 0 <= self.episode < meta.total_episodes:
            raise ConfigError(
                f"episode {self.episode} is out of range: {self.root} holds episodes 0..{meta.total_episodes - 1}"
            )
        convention = dataset_convention(meta.features, meta.robot_type, (self.action_key,), f"dataset {self.root}")
        dataset = LeRobotDataset(repo_id=self.root.name, root=self.root, episodes=[self.episode])
        table = dataset.hf_dataset.with_format("numpy")
        keep = np.asarray(table["episode_index"]) == self.episode
        order = np.argsort(np.asarray(table["frame_index"])[keep], kind="stable")
        rows = np.asarray(table[self.action_key], dtype=np.float64)[keep][order]
        if rows.ndim != 2 or len(rows) == 0:
            raise ConfigError(f"episode {self.episode} of {self.root} has no (T, J) {self.action_key!r} rows")
        self._rows = convention.to_radians(rows)
        self._index = 0
        log.info("replaying %d rows of episode %d from %s", len(rows), self.episode, self.root)

    def disconnect(self) -> None:
        self._rows = None

    def reset(self, state: RobotState) -> None:
        """Back to the first row (move the arm near it first; `SafeRobot` limits the step)."""
        self._check_width(state)
        self._index = 0

    def read(self, state: RobotState) -> TeleopCommand:
        """The next row; the last row (and every read after it) with `success`."""
        rows = self._require()
        self._check_width(state)
        done = self._index >= len(rows) - 1
        row = rows[min(self._index, len(rows) - 1)]
        self._index += 1
        return TeleopCommand(row.copy(), TeleopEvents(success=done))

    def _check_width(self, state: RobotState) -> None:
        rows = self._require()
        if rows.shape[1] != len(state.q_rad):
            raise ConfigError(
                f"{self.action_key!r} rows have {rows.shape[1]} values, the robot has {len(state.q_rad)} joints"
            )

    def _require(self) -> np.ndarray:
        if self._rows is None:
            raise DeviceNotConnected("ReplayTeleop is not connected: call connect() first")
        return self._rows
