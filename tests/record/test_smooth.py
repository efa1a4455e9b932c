"""`smooth_track`: polynomials pass, noise is removed on a `track`-like path, the gain of a
sine is the stated one, episodes stay apart."""

from __future__ import annotations

import numpy as np
import pytest

from robotrl.record.blob import central_velocity
from robotrl.record.smooth import SMOOTHING_S, smooth_track

FPS = 30.0


def _one_episode(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(n, int), np.full(n, n)


def test_a_quadratic_track_passes_unchanged_with_its_exact_velocity():
    t = np.arange(90) / FPS
    track = np.stack([0.2 + 0.1 * t - 0.3 * t**2, -0.05 * t, np.full_like(t, 0.1)], axis=1)
    smooth, velocity = smooth_track(track, *_one_episode(90), FPS)
    np.testing.assert_allclose(smooth, track, atol=1e-9)
    np.testing.assert_allclose(velocity, np.stack([0.1 - 0.6 * t, np.full_like(t, -0.05), 0 * t], axis=1), atol=1e-8)


def test_noise_on_a_track_like_path_is_removed_and_the_velocity_is_finer_than_a_central_difference():
    """`track`'s ball: 0.15-0.35 Hz sines of 2-9 cm; 2.5 mm of white noise per frame, 6 s."""
    t = np.arange(180) / FPS
    w, amplitude, phase = 2 * np.pi * np.array([0.15, 0.25, 0.35]), np.array([0.03, 0.09, 0.02]), np.array([0, 1, 2])
    truth = amplitude * np.sin(w * t[:, None] + phase)
    truth_velocity = amplitude * w * np.cos(w * t[:, None] + phase)
    noisy = truth + np.random.default_rng(0).normal(0.0, 0.0025, truth.shape)
    smooth, velocity = smooth_track(noisy, *_one_episode(180), FPS)

    def rms_cm(a: np.ndarray, b: np.ndarray) -> float:
        return float(100 * np.sqrt(((a - b) ** 2).mean()))

    assert rms_cm(noisy, truth) == pytest.approx(0.25, abs=0.02)
    assert rms_cm(smooth, truth) < 0.1  # measured 0.055
    # measured 0.25 cm/s; the image track's +-6-frame central difference of the same frames 0.97
    central = central_velocity(noisy, *_one_episode(180), FPS)
    assert rms_cm(velocity, truth_velocity) < 0.5 * rms_cm(central, truth_velocity)


@pytest.mark.parametrize(("frequency_hz", "gain"), [(0.35, 0.995), (0.5, 0.96), (0.84, 0.5)])
def test_a_sine_keeps_the_stated_share_of_its_amplitude(frequency_hz: float, gain: float):
    """The docstring's gains at the default 0.19 s, measured on a long sine's middle (the
    smoother's steady state)."""
    assert SMOOTHING_S == 0.19
    t = np.arange(3000) / FPS
    smooth, _ = smooth_track(np.sin(2 * np.pi * frequency_hz * t)[:, None], *_one_episode(3000), FPS)
    assert np.abs(smooth[1000:2000]).max() == pytest.approx(gain, abs=0.01)


def test_episodes_are_smoothed_apart_and_short_ones_survive():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(40, 2)), rng.normal(size=(30, 2)) + 100.0
    values = np.concatenate([a, b, [[7.0, 8.0]], [[1.0, 2.0], [3.0, 5.0]]])
    start = np.repeat([0, 40, 70, 71], [40, 30, 1, 2])
    end = np.repeat([40, 70, 71, 73], [40, 30, 1, 2])
    smooth, velocity = smooth_track(values, start, end, FPS)
    for rows, alone in ((slice(0, 40), a), (slice(40, 70), b)):
        expected = smooth_track(alone, *_one_episode(len(alone)), FPS)
        np.testing.assert_allclose(smooth[rows], expected[0], atol=1e-9)
        np.testing.assert_allclose(velocity[rows], expected[1], atol=1e-9)
    np.testing.assert_array_equal(smooth[70], [7.0, 8.0])
    np.testing.assert_array_equal(velocity[70], [0.0, 0.0])
    np.testing.assert_allclose(smooth[71:], [[1.0, 2.0], [3.0, 5.0]])  # under 4 frames: unsmoothed
    np.testing.assert_allclose(velocity[71:], [[60.0, 90.0], [60.0, 90.0]])
