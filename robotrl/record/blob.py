"""A red object's track in recorded camera frames: an env_state target a real arm's
recording gives (`robotrl train --blob-target`).

The slow pathway of an `estimate_env_state` policy learns to estimate env_state from its
cameras; in simulation the target is the privileged `sim.environment_state`, which no real
arm records. This finds the red pixels of every frame (a colour threshold in HSV), takes
the centroid and size of their largest connected region, fills the frames where the
object is hidden or partly hidden by interpolating within the episode, and differentiates
over time. Offline labels may look ahead: the velocity at frame t is a central difference
over t - 6 .. t + 6.

Per camera, six numbers: image position u (x, rightward) and v (y, downward), each in
[-1, 1] with 0 at the image centre, size sqrt(area) / image width, then their velocities
in units per second. Cameras are concatenated in the order given.
"""

from __future__ import annotations

import logging

import cv2
import numpy as np

log = logging.getLogger(__name__)

RED_HUE = (10, 170)
"""OpenCV hue (0-179): a pixel is red at or below the first or at or above the second."""
MIN_SATURATION = 100
MIN_VALUE = 50
"""Saturation and value (0-255) a red pixel needs: dark or washed-out reds are not the object."""
MIN_AREA_PX = 2
"""Red pixels a frame needs for the object to count as visible."""
MIN_AREA_FRACTION = 0.5
"""A frame whose object has less than this fraction of the episode's median area counts as
hidden (partly occluded, e.g. behind the gripper: its centroid is off)."""
HALF_WINDOW = 6
"""Ticks either side of the central difference (0.2 s at 30 Hz). On `track`'s demonstrations
the front camera's horizontal velocity correlates 0.98 with the ball's (0.84 with 2)."""
CHUNK_FRAMES = 2048
"""Frames converted to HSV at once (bounds the temporary copy's memory)."""


def red_mask(images: np.ndarray) -> np.ndarray:
    """(N, 3, S, S) uint8 RGB -> (N, S, S) bool: the red pixels."""
    n, _, h, w = images.shape
    masks = np.empty((n, h, w), bool)
    for lo in range(0, n, CHUNK_FRAMES):
        rgb = np.ascontiguousarray(images[lo : lo + CHUNK_FRAMES].transpose(0, 2, 3, 1)).reshape(-1, w, 3)
        hsv = cv2.cvtColor(rgb, cv2.COLOR_RGB2HSV).reshape(-1, h, w, 3)
        hue, sat, val = hsv[..., 0], hsv[..., 1], hsv[..., 2]
        red = (hue <= RED_HUE[0]) | (hue >= RED_HUE[1])
        masks[lo : lo + CHUNK_FRAMES] = red & (sat >= MIN_SATURATION) & (val >= MIN_VALUE)
    return masks


def largest_region(mask: np.ndarray) -> tuple[float, float, int]:
    """(H, W) bool -> (column, row, area in pixels) of its largest 8-connected region, the
    centroid in pixel coordinates (pixel i covers [i, i + 1)); (0, 0, 0) for an empty mask."""
    count, _, stats, centroids = cv2.connectedComponentsWithStats(mask.view(np.uint8), connectivity=8)
    if count < 2:
        return 0.0, 0.0, 0
    k = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    col, row = centroids[k] + 0.5  # OpenCV's centroids count pixel centres from 0
    return float(col), float(row), int(stats[k, cv2.CC_STAT_AREA])


def blob_positions(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N, 3, S, S) uint8 RGB -> ((N, 3) u, v, size as in the module docstring; (N,) bool
    visible). The object is the largest red region: stray red pixels elsewhere (edges of
    orange parts, compression) are not averaged in. A frame without it gives zeros and
    visible False."""
    mask = red_mask(images)
    _, h, w = mask.shape
    regions = np.array([largest_region(m) for m in mask], np.float64).reshape(-1, 3)
    col, row, area = regions.T
    visible = area >= MIN_AREA_PX
    pos = np.stack([2 * col / w - 1, 2 * row / h - 1, np.sqrt(area) / w], axis=1)
    pos[~visible] = 0.0
    return pos, visible


def whole_in_view(
    size: np.ndarray, visible: np.ndarray, episode_start: np.ndarray, episode_end: np.ndarray
) -> np.ndarray:
    """(N,) bool: `visible` frames whose object area (`size` squared) is at least
    `MIN_AREA_FRACTION` of its episode's median over visible frames."""
    whole = visible.copy()
    area = size**2
    for start in np.unique(episode_start):
        rows = slice(int(start), int(episode_end[start]))
        if visible[rows].any():
            whole[rows] &= area[rows] >= MIN_AREA_FRACTION * np.median(area[rows][visible[rows]])
    return whole


def fill_gaps(
    values: np.ndarray, visible: np.ndarray, episode_start: np.ndarray, episode_end: np.ndarray
) -> np.ndarray:
    """(N, D) values with each hidden frame's replaced by linear interpolation between the
    episode's visible frames (held before the first and after the last); an episode with
    no visible frame keeps its values (zeros from `blob_positions`)."""
    out = values.copy()
    for start in np.unique(episode_start):
        end = int(episode_end[start])
        seen = np.flatnonzero(visible[start:end])
        if len(seen) in (0, end - start):
            continue
        ticks = np.arange(end - start)
        for d in range(values.shape[1]):
            out[start:end, d] = np.interp(ticks, seen, values[start:end, d][seen])
    return out


def central_velocity(
    values: np.ndarray, episode_start: np.ndarray, episode_end: np.ndarray, fps: float, half_window: int = HALF_WINDOW
) -> np.ndarray:
    """(N, D) per-second rate of change of `values`: (x[t + k] - x[t - k]) / (2 k dt),
    the window shortened at an episode's ends (never across episodes); 0 for a one-frame
    episode."""
    t = np.arange(len(values))
    ahead = np.minimum(t + half_window, episode_end - 1)
    behind = np.maximum(t - half_window, episode_start)
    span_s = (ahead - behind) / fps
    rate = (values[ahead] - values[behind]) / np.maximum(span_s, 1e-9)[:, None]
    rate[span_s == 0] = 0.0
    return rate


def blob_env_states(
    images: dict[str, np.ndarray],
    cameras: tuple[str, ...],
    episode_start: np.ndarray,
    episode_end: np.ndarray,
    fps: float,
) -> np.ndarray:
    """(N, 6 x len(cameras)) float32: per camera the red object's (u, v, size) with gaps
    filled, then their velocities; `images` maps camera -> (N, 3, S, S) uint8 RGB."""
    columns = []
    for cam in cameras:
        pos, visible = blob_positions(np.asarray(images[cam]))
        whole = whole_in_view(pos[:, 2], visible, episode_start, episode_end)
        log.info(
            "blob target: the red object is in %.1f%% of %s's frames, whole in %.1f%% (the rest interpolated)",
            100 * visible.mean(),
            cam,
            100 * whole.mean(),
        )
        pos = fill_gaps(pos, whole, episode_start, episode_end)
        columns += [pos, central_velocity(pos, episode_start, episode_end, fps)]
    return np.concatenate(columns, axis=1).astype(np.float32)
