"""A red ball's position and velocity in the arm's base frame from a recording's calibrated
cameras: the env_state target of `robotrl train --ball-target`, in the units of the
simulator's `track` state (metres, metres per second), from what a real arm records.

Per frame, every camera that sees the ball whole (`robotrl.record.blob`) gives a ray from
its optical centre through the ball's centroid, in the base frame (a camera on the gripper
is placed by forward kinematics of the measured joints, interpolated to the instant its
frame was captured where the recording has the frames' ages). Two rays at least
`MIN_RAY_ANGLE_DEG` apart are triangulated: the point nearest to the rays, each weighted by
the ball's image area (a pixel's error costs a camera metres in proportion to its range).
A frame one camera sees (the larger view where two rays are near parallel) takes the
point of that ray nearest the position interpolated between the episode's triangulated
frames, or, in an episode without any, the point at the range the ball's apparent size
gives; frames no camera sees whole are interpolated within the episode. The episode's track
is then smoothed and differentiated (`robotrl.record.smooth`: a 0.19 s jerk-penalised fit,
the whole episode at once). On 20 of `track`'s recorded episodes (96 px front and wrist
videos) this is within 0.14 / 0.07 / 0.14 cm and 0.56 / 0.30 / 0.48 cm/s rms of the
simulator's ball (x / y / z); per frame, with a +-6-frame central difference, it was
0.26 / 0.14 / 0.25 cm and 1.01 / 0.58 / 0.91 cm/s.
"""

from __future__ import annotations

import logging

import numpy as np

from robotrl.hardware.camera_geometry import CameraRig, camera_rays, distance_from_size, nearest_points
from robotrl.hardware.kinematics import Kinematics
from robotrl.record.blob import blob_positions, fill_gaps, whole_in_view
from robotrl.record.smooth import smooth_track

log = logging.getLogger(__name__)

MIN_RAY_ANGLE_DEG = 5.0
"""Rays closer to parallel than this triangulate poorly along their common direction."""


def states_at(states: np.ndarray, lag_frames: np.ndarray, episode_start: np.ndarray) -> np.ndarray:
    """(N, J) per-frame joints and (N,) lags in frames -> (N, J) the joints `lag` frames
    before each frame, interpolated linearly within its episode (its first frame's joints
    before its start). A NaN lag takes the median of the finite ones (0 without any); a
    negative one counts as 0."""
    lag = np.asarray(lag_frames, dtype=float)
    finite = np.isfinite(lag)
    lag = np.maximum(np.where(finite, lag, np.median(lag[finite]) if finite.any() else 0.0), 0.0)
    at = np.maximum(np.arange(len(states)) - lag, episode_start)
    low = np.floor(at).astype(int)
    high, weight = np.minimum(low + 1, len(states) - 1), (at - low)[:, None]
    return states[low] * (1 - weight) + states[high] * weight


def base_rays(
    rig: CameraRig, camera: str, uv: np.ndarray, states_rad: np.ndarray, kinematics: Kinematics | None
) -> tuple[np.ndarray, np.ndarray]:
    """(N, 2) image points of `camera` and (N, J) joint states (radians) -> ((N, 3) ray
    origins, (N, 3) unit directions), in the base frame (`kinematics` places a camera
    mounted on "ee"; None only for a rig without one)."""
    cam = rig.cameras[camera]
    dirs = camera_rays(cam, uv) @ cam.rotation.T
    origins = np.broadcast_to(cam.position_m, dirs.shape).copy()
    if cam.mount == "ee":
        if kinematics is None:
            raise ValueError(f"camera {camera} is on the gripper: placing it needs the arm's kinematics")
        for i, q in enumerate(states_rad):
            pos, rot = kinematics.forward(q)
            origins[i] = pos + rot @ cam.position_m
            dirs[i] = rot @ dirs[i]
    return origins, dirs


def ball_env_states(
    images: dict[str, np.ndarray],
    rig: CameraRig,
    states_rad: np.ndarray,
    kinematics: Kinematics | None,
    episode_start: np.ndarray,
    episode_end: np.ndarray,
    fps: float,
    ages_s: dict[str, np.ndarray] | None = None,
) -> np.ndarray:
    """(N, 6) float32: the ball's base-frame position (m) then velocity (m/s) per frame.
    `images` maps each calibrated camera to use -> (N, 3, S, S) uint8 RGB frames,
    `states_rad` (N, J) the joints measured with them, `ages_s` a camera -> (N,) seconds
    its frames were captured before those joints were read (a recording's camera_age_s;
    NaN unknown; a camera not in it: 0)."""
    cameras = tuple(images)
    n = len(states_rad)
    origins, dirs = np.zeros((n, len(cameras), 3)), np.zeros((n, len(cameras), 3))
    sizes, whole = np.zeros((n, len(cameras))), np.zeros((n, len(cameras)), bool)
    for k, cam in enumerate(cameras):
        pos, visible = blob_positions(np.asarray(images[cam]))
        whole[:, k] = whole_in_view(pos[:, 2], visible, episode_start, episode_end)
        sizes[:, k] = pos[:, 2]
        age = (ages_s or {}).get(cam)
        at_capture = states_rad if age is None else states_at(states_rad, np.asarray(age) * fps, episode_start)
        origins[:, k], dirs[:, k] = base_rays(rig, cam, pos[:, :2], at_capture, kinematics)
    views = whole.sum(1)
    cos = np.einsum("nki,nli->nkl", dirs, dirs)
    two = ((cos < np.cos(np.radians(MIN_RAY_ANGLE_DEG))) & whole[:, :, None] & whole[:, None, :]).any((1, 2))
    ball = np.zeros((n, 3))
    if two.any():
        ball[two] = nearest_points(origins[two], dirs[two], (whole * sizes**2)[two])
    ball = fill_gaps(ball, two, episode_start, episode_end)
    has_two = np.zeros(n, bool)
    for first in np.unique(episode_start):
        has_two[first : episode_end[first]] = two[first : episode_end[first]].any()
    one = (views > 0) & ~two
    best = np.argmax(np.where(whole, sizes, -1.0), axis=1)
    for k, cam in enumerate(cameras):
        rows = np.flatnonzero(one & (best == k))
        o, d = origins[rows, k], dirs[rows, k]
        along = np.where(
            has_two[rows],
            np.einsum("ni,ni->n", ball[rows] - o, d),
            distance_from_size(rig.cameras[cam], sizes[rows, k], rig.object_diameter_m),
        )
        ball[rows] = o + d * along[:, None]
    log.info(
        "ball target: triangulated in %.1f%% of frames, on one camera's ray in %.1f%%, interpolated in %.1f%%",
        100 * two.mean(),
        100 * one.mean(),
        100 * (views == 0).mean(),
    )
    ball = fill_gaps(ball, views > 0, episode_start, episode_end)
    return np.concatenate(smooth_track(ball, episode_start, episode_end, fps), axis=1).astype(np.float32)
