"""A camera calibration from a recording of a chessboard (`robotrl calibrate-cameras`).

The recording (any `robotrl record` dataset: a real arm through lerobot, the twin, the
simulated `calibrate` task) has the board lying still on the table in its pose episode
(the last by default) while the arm shows it to the gripper camera from many angles,
pausing at each; earlier episodes may hold the board up to the fixed cameras at many
angles, which gives their lenses a full model (`hardware.board_calibration`).

Frames are read at the recorded resolution: the middle of every pause (arm joints within
`STILL_RAD` over `STILL_TICKS`) and, for the fixed cameras, up to `FRAMES_PER_EPISODE`
evenly spaced ones. Every view of the whole board fits its camera's intrinsics; the pose
episode's pauses fit the poses, where the joints and the frame agree whatever the
camera's latency. The gripper camera is read only in pauses: in motion its frames blur
and lag the joints (through the twin's cameras, views in motion fit its lens to 0.66 px
rms with the focal length 1.2% off, pauses to 0.15 px and 0.1%). The pose episode is
read first, so a board other than `--board` says so before the other episodes are decoded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robotrl.core.errors import ConfigError
from robotrl.hardware import board_calibration as bc
from robotrl.hardware.camera_geometry import CameraCalibration, CameraRig
from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.lerobot_arm.convention import dataset_convention, model_of
from robotrl.hardware.models import get_arm
from robotrl.record import features as F
from robotrl.record.dataset import decode_frames

log = logging.getLogger(__name__)

FRAMES_PER_EPISODE = 40
STILL_RAD = 0.01
STILL_TICKS = 5


@dataclass(frozen=True)
class CameraReport:
    """What the fit of one camera saw and how well it fits, for the user."""

    views: int
    """Frames showing the whole board (all episodes)."""
    pose_views: int
    """Of them, pauses of the pose episode that fit the pose."""
    intrinsics: bc.Intrinsics
    pose_rms_px: float
    """Reprojection error of the pose (through the kinematics for the gripper camera)."""


def still_frames(states_rad: np.ndarray) -> np.ndarray:
    """(N, J) joints of one episode -> indices of the middle frame of each pause: a run of
    at least `STILL_TICKS` frames whose arm joints stay within `STILL_RAD` of its first."""
    arm = states_rad[:, :-1]
    middles, start = [], 0
    for i in range(1, len(arm) + 1):
        if i == len(arm) or np.abs(arm[i] - arm[start]).max() > STILL_RAD:
            if i - start >= STILL_TICKS:
                middles.append((start + i - 1) // 2)
            start = i
    return np.array(middles, dtype=np.int64)


def calibrate_from_recording(
    root: Path,
    board: bc.Board,
    gripper_camera: str,
    object_diameter_m: float,
    pose_episode: int = -1,
) -> tuple[CameraRig, dict[str, CameraReport]]:
    """The calibration of every camera of the dataset at `root`, the gripper camera
    mounted on the end effector and the others on the base; ConfigError where the
    recording cannot give it (no board seen, too few pauses, unknown arm)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    if not (Path(root) / "meta" / "info.json").is_file():
        raise FileNotFoundError(f"no LeRobot dataset at {root} (missing meta/info.json)")
    ds = LeRobotDataset(f"local/{Path(root).name}", root=root, video_backend="pyav")
    cameras = [k.removeprefix(F.image_key("")) for k in ds.meta.video_keys]
    if gripper_camera not in cameras:
        raise ConfigError(f"dataset {root} has no camera {gripper_camera!r} (it has: {', '.join(cameras) or 'none'})")
    model = model_of(ds.meta.robot_type)
    if model is None:
        raise ConfigError(f"dataset robot_type {ds.meta.robot_type!r} names no known arm to place the gripper camera")
    kin = Kinematics(get_arm(model))
    convention = dataset_convention(ds.features, ds.meta.robot_type, (F.STATE,), f"dataset {root}")
    table = ds.hf_dataset.with_format("numpy")
    states = convention.to_radians(np.asarray(table[F.STATE]))
    episodes = np.asarray(table["episode_index"]).reshape(-1)
    timestamps = np.asarray(table["timestamp"]).reshape(-1)
    order = list(dict.fromkeys(episodes.tolist()))
    if not -len(order) <= pose_episode < len(order):
        raise ConfigError(f"dataset {root} has {len(order)} episodes: no pose episode {pose_episode}")
    pose_ep = order[pose_episode]
    corners: dict[str, list[np.ndarray]] = {c: [] for c in cameras}
    posed: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {c: [] for c in cameras}  # (corners, joints)
    sizes: dict[str, tuple[int, int]] = {}
    for ep in [pose_ep, *(ep for ep in order if ep != pose_ep)]:  # a wrong board fails on the pose episode
        rows = np.flatnonzero(episodes == ep)
        still = still_frames(states[rows])
        even = np.linspace(0, len(rows) - 1, min(FRAMES_PER_EPISODE, len(rows))).round().astype(np.int64)
        for cam in cameras:
            picked = still if cam == gripper_camera else np.union1d(even, still)
            if not len(picked):
                continue
            frames = decode_frames(ds, ep, cam, timestamps[rows[picked]]).permute(0, 2, 3, 1).numpy()
            sizes[cam] = (frames.shape[2], frames.shape[1])
            for local, frame in zip(picked, frames):
                found = bc.find_corners(frame, board)
                if found is None:
                    continue
                corners[cam].append(found)
                if ep == pose_ep and local in still:
                    posed[cam].append((found, states[rows[local]]))
        if ep == pose_ep:
            _require_pose_views(posed, corners, pose_ep)
    return _fit(board, kin, gripper_camera, object_diameter_m, corners, posed, sizes)


def _require_pose_views(
    posed: dict[str, list[tuple[np.ndarray, np.ndarray]]], corners: dict[str, list[np.ndarray]], pose_ep: int
) -> None:
    """ConfigError for a camera that saw the whole board in none of the pose episode's pauses."""
    for cam, views in posed.items():
        if not views:
            raise ConfigError(
                f"camera {cam} never saw the whole board while the arm paused in episode {pose_ep} "
                f"({len(corners[cam])} views in that episode)"
            )


def _fit(
    board: bc.Board,
    kin: Kinematics,
    gripper_camera: str,
    object_diameter_m: float,
    corners: dict[str, list[np.ndarray]],
    posed: dict[str, list[tuple[np.ndarray, np.ndarray]]],
    sizes: dict[str, tuple[int, int]],
) -> tuple[CameraRig, dict[str, CameraReport]]:
    intrinsics = {cam: bc.fit_intrinsics(board, corners[cam], sizes[cam]) for cam in corners}
    ee_poses = [kin.forward(q) for _, q in posed[gripper_camera]]
    hand_eye = bc.solve_hand_eye(board, [c for c, _ in posed[gripper_camera]], ee_poses, intrinsics[gripper_camera])
    rig: dict[str, CameraCalibration] = {
        gripper_camera: bc.calibration(
            intrinsics[gripper_camera],
            sizes[gripper_camera],
            "ee",
            hand_eye.camera_position_m,
            hand_eye.camera_rotation,
        )
    }
    reports = {
        gripper_camera: CameraReport(
            len(corners[gripper_camera]), hand_eye.views, intrinsics[gripper_camera], hand_eye.rms_px
        )
    }
    for cam in corners:
        if cam == gripper_camera:
            continue
        views = [c for c, _ in posed[cam]]
        position, rotation, rms = bc.fixed_camera_pose(board, views, intrinsics[cam], hand_eye)
        rig[cam] = bc.calibration(intrinsics[cam], sizes[cam], "base", position, rotation)
        reports[cam] = CameraReport(len(corners[cam]), len(views), intrinsics[cam], rms)
    return CameraRig(rig, object_diameter_m), reports
