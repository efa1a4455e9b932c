"""A local LeRobotDataset decoded once into RAM for training.

Tables (state, action, env_state) come from the dataset's parquet files, joints converted
to radians from the dataset's convention (lerobot's degrees for a real-arm or
`lerobot-record` dataset; see `hardware/lerobot_arm/convention.py`); every video frame is
decoded once (PyAV, one pass per episode and camera), resized to the training
resolution and kept as uint8, so training never touches a decoder again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from robotrl.core.errors import ConfigError
from robotrl.hardware.camera_geometry import CameraRig, load_rig
from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.lerobot_arm.convention import dataset_convention, model_of
from robotrl.hardware.models import get_arm
from robotrl.policies.fastslow.slow import resize_images
from robotrl.record import features as F
from robotrl.record.ball import ball_env_states
from robotrl.record.blob import blob_env_states

log = logging.getLogger(__name__)


@dataclass
class FrameTable:
    """Every frame of a dataset, in dataset order (episodes contiguous)."""

    states: np.ndarray
    """(N, S) float32 measured joints, radians (converted from the dataset's units)."""
    actions: np.ndarray
    """(N, A) float32 joint targets, radians (executed, or the teleop's: `load_frames`)."""
    env_states: np.ndarray | None
    """(N, E) float32 env_state: the privileged sim.environment_state, or the red object's
    track in the images (`robotrl.record.blob`), or the red ball's position and velocity
    from calibrated cameras (`robotrl.record.ball`), or None."""
    images: dict[str, torch.Tensor]
    """camera -> (N, 3, S, S) uint8."""
    task_ids: np.ndarray
    """(N,) index into `tasks`."""
    tasks: list[str]
    """Instruction strings."""
    episode_start: np.ndarray
    """(N,) first frame of each frame's episode."""
    episode_end: np.ndarray
    """(N,) one past the last frame of each frame's episode."""
    fps: float
    joint_units: str = "radians"
    """The convention the dataset stores joints in ("radians" or "lerobot")."""

    @property
    def num_frames(self) -> int:
        return len(self.states)

    @property
    def num_episodes(self) -> int:
        return len(np.unique(self.episode_start))

    @property
    def image_bytes(self) -> int:
        return sum(t.numel() for t in self.images.values())


def require_features(
    features: dict, root: Path, cameras: tuple[str, ...], use_env_state: bool, action_key: str = F.ACTION
) -> None:
    """ConfigError naming the first feature the training needs that the dataset lacks."""
    needed = [F.STATE, action_key] + [F.image_key(c) for c in cameras] + ([F.ENV_STATE] if use_env_state else [])
    for key in needed:
        if F.stored_key(features, key) not in features:
            have = ", ".join(k for k in features if k.startswith(("observation", "action")))
            raise ConfigError(f"dataset {root} has no feature {key!r} (it has: {have})")


def load_frames(
    root: Path,
    cameras: tuple[str, ...] = ("front", "wrist"),
    image_size_px: int = 64,
    use_env_state: bool = False,
    progress: bool = True,
    action_key: str = F.ACTION,
    blob_cameras: tuple[str, ...] = (),
    ball_calibration: Path | None = None,
) -> FrameTable:
    """Read the dataset at `root` into RAM (HF hub offline: set HF_HUB_OFFLINE=1). The
    training targets come from `action_key`: "action" (executed) or "teleop.action" (what
    the teleop asked for: the clean labels of a `record --perturb` dataset). With
    `use_env_state`, env_state is the dataset's sim.environment_state, or with
    `blob_cameras` (a subset of `cameras`) the red object's track in those cameras'
    frames at `image_size_px` (`robotrl.record.blob.blob_env_states`), which any
    recording has, or with `ball_calibration` (a camera calibration file,
    `robotrl.hardware.camera_geometry`) the red ball's base-frame position and velocity
    from the calibrated cameras among `cameras` (`robotrl.record.ball`)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from tqdm import tqdm

    root = Path(root)
    if set(blob_cameras) - set(cameras):
        raise ConfigError(f"blob target cameras {list(blob_cameras)} must be among the cameras read {list(cameras)}")
    rig = load_rig(ball_calibration) if ball_calibration is not None else None
    if rig is not None and not set(rig.cameras) & set(cameras):
        raise ConfigError(
            f"{ball_calibration} calibrates {list(rig.cameras)}: none of the cameras read {list(cameras)}"
        )
    if not (root / "meta" / "info.json").is_file():
        raise FileNotFoundError(f"no LeRobot dataset at {root} (missing meta/info.json)")
    ds = LeRobotDataset(f"local/{root.name}", root=root, video_backend="pyav")
    from_column = use_env_state and not blob_cameras and rig is None
    require_features(ds.features, root, cameras, from_column, action_key)
    for cam in cameras:
        if ds.features[F.image_key(cam)]["dtype"] != "video":
            raise ConfigError(f"dataset {root}: {F.image_key(cam)} is stored as images; training reads videos")
    action_col, env_col = F.stored_key(ds.features, action_key), F.stored_key(ds.features, F.ENV_STATE)
    convention = dataset_convention(ds.features, ds.meta.robot_type, (F.STATE, action_col), f"dataset {root}")
    table = ds.hf_dataset.with_format("numpy")
    cols = [F.STATE, action_col, "episode_index", "frame_index", "timestamp", "task_index"]
    cols += [env_col] if from_column else []
    data = {c: np.asarray(table[c]) for c in cols}
    episodes = data["episode_index"].reshape(-1)
    start, end = _episode_bounds(episodes)
    tasks_df = ds.meta.tasks
    if tasks_df is None:
        raise ConfigError(f"dataset {root}: meta lists no tasks")
    tasks = [""] * (int(tasks_df["task_index"].max()) + 1)
    for text, idx in zip(tasks_df.index, tasks_df["task_index"]):
        tasks[int(idx)] = str(text)
    images = {cam: torch.empty((len(episodes), 3, image_size_px, image_size_px), dtype=torch.uint8) for cam in cameras}
    timestamps = data["timestamp"].reshape(-1)
    firsts = np.flatnonzero(np.r_[True, episodes[1:] != episodes[:-1]])
    for first in tqdm(firsts, desc="decoding videos", unit="ep", disable=not progress):
        ep, last = int(episodes[first]), int(end[first])
        for cam in cameras:
            frames = decode_frames(ds, ep, cam, timestamps[first:last])
            images[cam][first:last] = resize_images(frames, image_size_px)
    states_rad = convention.to_radians(data[F.STATE])
    env_states = data[env_col].astype(np.float32) if from_column else None
    if use_env_state and blob_cameras:
        env_states = blob_env_states(
            {cam: images[cam].numpy() for cam in blob_cameras}, blob_cameras, start, end, float(ds.fps)
        )
    if use_env_state and rig is not None:
        env_states = _ball_labels(ds, rig, images, states_rad, start, end, _camera_ages(ds, table))
    return FrameTable(
        states=states_rad.astype(np.float32),
        actions=convention.to_radians(data[action_col]).astype(np.float32),
        env_states=env_states,
        images=images,
        task_ids=data["task_index"].reshape(-1).astype(np.int64),
        tasks=tasks,
        episode_start=start,
        episode_end=end,
        fps=float(ds.fps),
        joint_units=convention.name,
    )


def decode_frames(ds, episode: int, camera: str, timestamps: np.ndarray) -> torch.Tensor:
    """(n, 3, H, W) uint8 frames of `camera` at `timestamps` (n,) seconds into `episode`
    of the LeRobotDataset `ds`, at the recorded resolution."""
    from lerobot.datasets.video_utils import decode_video_frames

    if ds.meta.episodes is None:  # loaded whenever the dataset has episodes
        raise ConfigError(f"dataset {ds.root}: meta lists no episodes")
    key = F.image_key(camera)
    ts = (np.asarray(timestamps) + ds.meta.episodes[episode][f"videos/{key}/from_timestamp"]).tolist()
    return decode_video_frames(
        ds.root / ds.meta.get_video_file_path(episode, key),
        ts,
        frame_tolerance_s(ds.tolerance_s, ts[-1]),
        backend="pyav",
        return_uint8=True,
    )


def _camera_ages(ds, table) -> dict[str, np.ndarray]:
    """Camera -> (N,) seconds each frame was captured before its joints were read, from the
    recording's camera_age_s column ({} in recordings made before it)."""
    feature = ds.features.get(F.CAMERA_AGE)
    if feature is None:
        return {}
    ages = np.asarray(table[F.CAMERA_AGE], dtype=np.float64).reshape(len(table), -1)
    return {str(name): ages[:, k] for k, name in enumerate(feature["names"])}


def _ball_labels(
    ds, rig: CameraRig, images: dict[str, torch.Tensor], states_rad, start, end, ages_s: dict[str, np.ndarray]
) -> np.ndarray:
    """`ball_env_states` from the calibrated cameras among `images`; ConfigError where the
    calibration does not fit the recording (frame shape, arm)."""
    cams = [c for c in images if c in rig.cameras]
    for cam in cams:
        height, width = ds.features[F.image_key(cam)]["shape"][:2]
        calibrated = rig.cameras[cam]
        if abs(width / height - calibrated.width_px / calibrated.height_px) > 0.01:
            raise ConfigError(
                f"camera {cam} records {width}x{height} frames, calibrated at "
                f"{calibrated.width_px}x{calibrated.height_px}: a different aspect ratio (cropped?)"
            )
    model = model_of(ds.meta.robot_type)
    if model is None and any(rig.cameras[c].mount == "ee" for c in cams):
        raise ConfigError(f"dataset robot_type {ds.meta.robot_type!r} names no known arm to place the gripper camera")
    kinematics = Kinematics(get_arm(model)) if model else None
    log.info("ball target from the calibrated cameras %s", ", ".join(cams))
    images_np = {c: images[c].numpy() for c in cams}
    return ball_env_states(images_np, rig, states_rad, kinematics, start, end, float(ds.fps), ages_s)


def frame_tolerance_s(tolerance_s: float, last_s: float) -> float:
    """The decoding tolerance (s) for frames up to `last_s` into a video file: lerobot's
    `tolerance_s`, or twice float32's spacing at `last_s` where that is larger. lerobot's
    decoder compares timestamps as float32, whose spacing past 1024 s (1.2e-4 s) exceeds
    the default 1e-4 s, so a packed file longer than that (600 episodes of 96 px video fit
    one 200 MB file) fails on frames that are there; either bound is far below a frame
    period (33 ms at 30 fps)."""
    return max(tolerance_s, 2 * float(np.spacing(np.float32(last_s))))


def _episode_bounds(episodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per frame, the [start, end) of its episode; episodes must be contiguous."""
    firsts = np.flatnonzero(np.r_[True, episodes[1:] != episodes[:-1]])
    if len(np.unique(episodes[firsts])) != len(firsts):
        raise ConfigError("dataset frames are not grouped by episode")
    lasts = np.r_[firsts[1:], len(episodes)]
    lengths = lasts - firsts
    return np.repeat(firsts, lengths), np.repeat(lasts, lengths)
