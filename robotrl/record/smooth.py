"""`smooth_track`: a recorded object's per-frame positions -> smoothed positions and velocities,
each episode on its own, using the whole episode (training labels are computed after the fact).

The Whittaker smoother with a jerk penalty: per episode and axis, the track p minimising
sum_t (p_t - y_t)^2 + lam * sum_t (p_t+3 - 3 p_t+2 + 3 p_t+1 - p_t)^2, i.e. the solution of
(I + lam D'D) p = y with D the third difference (a banded system, solved in O(frames)). A
quadratic in time passes unchanged. lam = (smoothing_s * fps)^6 makes the smoothing a time
constant: at 30 fps, 0.19 s is lam = 3.4e4. Velocities are the central differences of the
smoothed track (second order at the episode's ends).

Chosen on `track`: 20 simulated episodes' triangulated ball (`robotrl.record.ball`, 96 px
front and wrist) against the simulator's ball, x / y / z rms. Raw positions 0.26 / 0.14 /
0.25 cm; velocity as the image track's +-6-frame central difference 1.01 / 0.58 / 0.91 cm/s.
Smoothed (0.19 s): 0.14 / 0.07 / 0.14 cm, 0.56 / 0.30 / 0.48 cm/s; 0.13 s: 0.16 / 0.07 /
0.15 cm, 0.73 / 0.32 / 0.63 cm/s; 0.23 s: 0.13 / 0.08 / 0.13 cm, 0.48 / 0.44 / 0.43 cm/s
(y, the axis of the widest motion, flattened). A Savitzky-Golay fit (25 frames, quadratic) reached 0.65 / 0.45 /
0.54 cm/s. Generalised cross-validation picks the least smoothing tried: the triangulation's
errors are correlated from frame to frame, not white.

What it costs: a sine of frequency f keeps 1 / (1 + lam (2 sin(pi f / fps))^6) of its
amplitude (and so of its velocity): at 0.19 s, 0.995 at `track`'s fastest 0.35 Hz, 0.96 at
0.5 Hz, half at 0.84 Hz. An object that moves faster than about 0.5 Hz needs a shorter
`smoothing_s`.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solveh_banded

SMOOTHING_S = 0.19
"""Time constant of `smooth_track`, seconds (chosen on `track`: the module docstring)."""
THIRD_DIFFERENCE = np.array([-1.0, 3.0, -3.0, 1.0])


def smooth_track(
    values: np.ndarray,
    episode_start: np.ndarray,
    episode_end: np.ndarray,
    fps: float,
    smoothing_s: float = SMOOTHING_S,
) -> tuple[np.ndarray, np.ndarray]:
    """(N, D) per-frame positions -> ((N, D) smoothed positions, (N, D) velocities in units
    per second). `episode_start` / `episode_end` (N,) give each frame's episode as
    [start, end) frame indices; nothing is smoothed across episodes. An episode of one
    frame keeps its value and gets velocity 0."""
    values = np.asarray(values, dtype=float)
    smooth, velocity = np.empty_like(values), np.zeros_like(values)
    lam = (smoothing_s * fps) ** 6
    for first in np.unique(episode_start):
        rows = slice(first, episode_end[first])
        smooth[rows] = _whittaker(values[rows], lam)
        frames = episode_end[first] - first
        if frames > 1:
            velocity[rows] = np.gradient(smooth[rows], 1.0 / fps, axis=0, edge_order=2 if frames > 2 else 1)
    return smooth, velocity


def _whittaker(y: np.ndarray, lam: float) -> np.ndarray:
    """(M, D) -> (M, D): solve (I + lam D'D) p = y, D (M - 3, M) the third difference."""
    m, width = len(y), len(THIRD_DIFFERENCE)
    if m < width:  # no third difference: nothing to smooth
        return y.copy()
    band = np.zeros((width, m))  # upper banded form: band[width - 1 + i - j, j] = A[i, j]
    band[-1] = 1.0
    for a in range(width):
        for b in range(a, width):
            band[width - 1 - (b - a), b : b + m - width + 1] += lam * THIRD_DIFFERENCE[a] * THIRD_DIFFERENCE[b]
    return solveh_banded(band, y)
