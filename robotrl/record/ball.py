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
gives; frames no camera sees whole are interpolated within the episode. Where the frames'
ages are known, each ray is then moved by the ball's motion over its frame's age (the
velocity of that first pass) and the ball placed again, so that it is where it was when
the joints were read, the instant the policy pairs it with (on a twin recording whose
frames are 0-34 ms old this moves the labels half a tick later in time, their mean age,
and leaves their scatter as it was). The episode's track is then smoothed and
differentiated (`robotrl.record.smooth`: a 0.19 s jerk-penalised fit, the whole episode
at once). On 20 of `track`'s recorded episodes (96 px front and wrist
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


def known_lags(lags: np.ndarray) -> np.ndarray:
    """(N,) lags (frames or seconds; NaN unknown) -> the same with each NaN the median of
    the finite ones (0 without any) and negatives 0."""
    lag = np.asarray(lags, dtype=float)
    finite = np.isfinite(lag)
    return np.maximum(np.where(finite, lag, np.median(lag[finite]) if finite.any() else 0.0), 0.0)


def states_at(states: np.ndarray, lag_frames: np.ndarray, episode_start: np.ndarray) -> np.ndarray:
    """(N, J) per-frame joints and (N,) lags in frames -> (N, J) the joints `lag` frames
    before each frame, interpolated linearly within its episode (its first frame's joints
    before its start); lags as `known_lags` reads them."""
    at = np.maximum(np.arange(len(states)) - known_lags(lag_frames), episode_start)
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
    """(N, 6) float32: the ball's base-frame position (m) then velocity (m/s) per frame, at
    the instant its joints were read. `images` maps each calibrated camera to use -> (N, 3,
    S, S) uint8 RGB frames, `states_rad` (N, J) the joints measured with them, `ages_s` a
    camera -> (N,) seconds its frames were captured before those joints were read (a
    recording's camera_age_s; NaN unknown; a camera not in it: 0). With ages, each ray is
    moved by the ball's motion over its frame's age (the velocity of a first pass) before
    the rays are triangulated again: each then passes where the ball was at the reading."""
    cameras = tuple(images)
    n = len(states_rad)
    origins, dirs = np.zeros((n, len(cameras), 3)), np.zeros((n, len(cameras), 3))
    sizes, whole, ages = np.zeros((n, len(cameras))), np.zeros((n, len(cameras)), bool), np.zeros((n, len(cameras)))
    given = ages_s or {}
    for k, cam in enumerate(cameras):
        pos, visible = blob_positions(np.asarray(images[cam]))
        whole[:, k] = whole_in_view(pos[:, 2], visible, episode_start, episode_end)
        sizes[:, k] = pos[:, 2]
        if cam in given:
            ages[:, k] = known_lags(np.asarray(given[cam]))
        origins[:, k], dirs[:, k] = base_rays(
            rig, cam, pos[:, :2], states_at(states_rad, ages[:, k] * fps, episode_start), kinematics
        )
    track = RayTrack(rig, cameras, dirs, sizes, whole, episode_start, episode_end)
    ball = track.positions(origins)
    if ages.any():
        _, velocity = smooth_track(ball, episode_start, episode_end, fps)
        ball = track.positions(origins + velocity[:, None] * ages[:, :, None])
    log.info(
        "ball target: triangulated in %.1f%% of frames, on one camera's ray in %.1f%%, interpolated in %.1f%%",
        100 * track.two.mean(),
        100 * track.one.mean(),
        100 * (track.views == 0).mean(),
    )
    return np.concatenate(smooth_track(ball, episode_start, episode_end, fps), axis=1).astype(np.float32)


class RayTrack:
    """Which rays of each frame place the ball (they depend on the rays' directions and the
    ball's image sizes, not on where the rays start): `positions(origins)` places it."""

    def __init__(
        self,
        rig: CameraRig,
        cameras: tuple[str, ...],
        dirs: np.ndarray,
        sizes: np.ndarray,
        whole: np.ndarray,
        episode_start: np.ndarray,
        episode_end: np.ndarray,
    ) -> None:
        """(N, C, 3) unit ray directions, (N, C) the ball's image area and whether camera c
        sees it whole, per frame."""
        self.rig, self.cameras, self.dirs, self.sizes, self.whole = rig, cameras, dirs, sizes, whole
        self.episode_start, self.episode_end = episode_start, episode_end
        self.views = whole.sum(1)
        cos = np.einsum("nki,nli->nkl", dirs, dirs)
        self.two = ((cos < np.cos(np.radians(MIN_RAY_ANGLE_DEG))) & whole[:, :, None] & whole[:, None, :]).any((1, 2))
        self.one = (self.views > 0) & ~self.two
        self.best = np.argmax(np.where(whole, sizes, -1.0), axis=1)  # the larger whole view
        self.has_two = np.zeros(len(dirs), bool)
        for first in np.unique(episode_start):
            self.has_two[first : episode_end[first]] = self.two[first : episode_end[first]].any()

    def positions(self, origins: np.ndarray) -> np.ndarray:
        """(N, C, 3) ray origins (base frame, m) -> (N, 3) the ball per frame: triangulated
        where two rays are far enough apart, on the larger view's ray where one is, else
        interpolated within the episode."""
        start, end, whole, sizes, dirs = self.episode_start, self.episode_end, self.whole, self.sizes, self.dirs
        ball = np.zeros((len(origins), 3))
        if self.two.any():
            ball[self.two] = nearest_points(origins[self.two], dirs[self.two], (whole * sizes**2)[self.two])
        ball = fill_gaps(ball, self.two, start, end)
        for k, cam in enumerate(self.cameras):
            rows = np.flatnonzero(self.one & (self.best == k))
            o, d = origins[rows, k], dirs[rows, k]
            along = np.where(
                self.has_two[rows],
                np.einsum("ni,ni->n", ball[rows] - o, d),
                distance_from_size(self.rig.cameras[cam], sizes[rows, k], self.rig.object_diameter_m),
            )
            ball[rows] = o + d * along[:, None]
        return fill_gaps(ball, self.views > 0, start, end)
