"""The red object's track in recorded frames (`robotrl.record.blob`): the env_state target
`robotrl train --blob-target` learns from a recording that has no simulator state."""

from __future__ import annotations

import numpy as np
import pytest
from recorded import record_expert_episode

from robotrl.core.errors import ConfigError
from robotrl.record.blob import (
    MIN_AREA_FRACTION,
    blob_env_states,
    blob_positions,
    central_velocity,
    fill_gaps,
    whole_in_view,
)

S = 32


def disk_frame(cx: float, cy: float, radius: float = 3.0, rgb=(220, 30, 30)) -> np.ndarray:
    """(3, S, S) uint8 grey frame with a disk of `rgb` centred at pixel coordinates (cx, cy)
    (pixel i covers [i, i + 1))."""
    ys, xs = np.mgrid[:S, :S] + 0.5
    img = np.full((S, S, 3), 90, np.uint8)
    img[(xs - cx) ** 2 + (ys - cy) ** 2 <= radius**2] = rgb
    return img.transpose(2, 0, 1)


def test_the_centroid_of_the_largest_red_region_gives_the_objects_image_position_and_size():
    """u, v in [-1, 1] from the image centre, size sqrt(area) / width, of the largest red
    region: a smaller red patch elsewhere is not averaged in (before, the front camera's
    stray red pixels on the orange arm pulled the ball's centroid 1.4 px up on average);
    pixels too dark, too pale or of another hue are not the object; a frame without it is
    not visible."""
    frames = np.stack(
        [
            disk_frame(8.0, 20.0),
            disk_frame(16.0, 16.0, radius=5.0),
            disk_frame(16.0, 16.0, rgb=(40, 5, 5)),  # dark red (value 40 of 255)
            disk_frame(16.0, 16.0, rgb=(230, 130, 40)),  # orange (hue 15 of 180)
            disk_frame(16.0, 16.0, rgb=(200, 150, 150)),  # pale red (saturation 25%)
        ]
    )
    frames[0, :, 2:5, 26:29] = np.array([230, 40, 40])[:, None, None]  # a smaller red patch, 9 px, at (27.5, 3.5)
    frames[1, :, 0, 0] = [230, 40, 40]  # one stray red pixel in the corner
    pos, visible = blob_positions(frames)
    # the r = 3 disk covers 32 pixel centres
    np.testing.assert_allclose(pos[0], [2 * 8.0 / S - 1, 2 * 20.0 / S - 1, np.sqrt(32) / S], atol=1e-9)
    np.testing.assert_allclose(pos[1, :2], [0.0, 0.0], atol=1e-9)
    assert pos[1, 2] == pytest.approx(np.sqrt(80) / S)  # 80 pixel centres within r = 5
    assert visible.tolist() == [True, True, False, False, False]
    assert np.all(pos[2:] == 0.0)


def test_hidden_and_partly_hidden_frames_are_interpolated_within_their_episode():
    """Episode 0 (8 frames): hidden at frames 0 and 4, half hidden at 6; episode 1 (3
    frames): never visible. Interpolation runs within an episode, held at its start."""
    u = np.array([0.0, 0.1, 0.2, 0.3, 0.0, 0.5, 0.9, 0.7, 0.0, 0.0, 0.0])
    area = np.array([0, 1.0, 1.0, 1.0, 0, 1.0, 0.8 * MIN_AREA_FRACTION, 1.0, 0, 0, 0])
    visible = area > 0
    start = np.array([0] * 8 + [8] * 3)
    end = np.array([8] * 8 + [11] * 3)
    pos = np.stack([u, -u, np.sqrt(area)], axis=1)
    whole = whole_in_view(pos[:, 2], visible, start, end)
    assert whole.tolist() == [False, True, True, True, False, True, False, True, False, False, False]
    filled = fill_gaps(pos, whole, start, end)
    np.testing.assert_allclose(filled[:8, 0], [0.1, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    np.testing.assert_allclose(filled[:8, 1], -filled[:8, 0])
    np.testing.assert_array_equal(filled[8:], 0.0)


def test_velocities_are_central_differences_that_never_cross_an_episode():
    """Two episodes moving at 0.3 and -0.6 units a tick: every frame, ends included, gets
    its own episode's rate in units per second."""
    fps = 30.0
    ticks = np.arange(20.0)
    values = np.concatenate([0.3 * ticks, 5.0 - 0.6 * ticks[:12]])[:, None]
    start = np.array([0] * 20 + [20] * 12)
    end = np.array([20] * 20 + [32] * 12)
    rate = central_velocity(values, start, end, fps)
    np.testing.assert_allclose(rate[:20, 0], 0.3 * fps)
    np.testing.assert_allclose(rate[20:, 0], -0.6 * fps)
    one = central_velocity(np.ones((1, 2)), np.array([0]), np.array([1]), fps)
    np.testing.assert_array_equal(one, 0.0)


def test_blob_env_states_stack_position_then_velocity_per_camera():
    """A disk moving 1 px a tick rightward in "front" and still in "wrist": (N, 12) with
    front's u rising 2 / S a tick, i.e. 60 / S per second at 30 Hz."""
    frames = np.stack([disk_frame(6.0 + t, 10.0) for t in range(12)])
    still = np.stack([disk_frame(20.0, 20.0)] * 12)
    start, end = np.zeros(12, np.int64), np.full(12, 12)
    env = blob_env_states({"front": frames, "wrist": still}, ("front", "wrist"), start, end, 30.0)
    assert env.shape == (12, 12) and env.dtype == np.float32
    np.testing.assert_allclose(np.diff(env[:, 0]), 2 / S, atol=1e-6)
    np.testing.assert_allclose(env[:, 3], 60 / S, rtol=1e-5)
    np.testing.assert_allclose(env[:, 4:6], 0.0, atol=1e-6)
    np.testing.assert_allclose(env[:, 6:9], np.tile(env[0, 6:9], (12, 1)))
    np.testing.assert_allclose(env[:, 9:], 0.0, atol=1e-6)


def test_a_recorded_track_episode_gives_the_balls_motion_from_its_front_video(tmp_path):
    """Through the recorder's video files: on the simulated `track` scene the blob track
    of the front camera follows the ball the simulator knows (its base-frame y, left
    to right in the image, and its velocity), with no simulator state read."""
    from robotrl.core.robot import CameraSpec
    from robotrl.record.dataset import load_frames
    from robotrl.sim.env import TaskEnv

    env = TaskEnv("track", cameras=(CameraSpec("front", 96, 96),))
    root = tmp_path / "track"
    record_expert_episode(env, root, seed=7, max_ticks=150)
    env.close()
    blob = load_frames(root, ("front",), 96, use_env_state=True, blob_cameras=("front",), progress=False)
    sim = load_frames(root, (), use_env_state=True, progress=False)
    assert blob.env_states is not None and sim.env_states is not None
    assert blob.env_states.shape == (150, 6)
    ball_y, ball_vy = sim.env_states[:, 1], sim.env_states[:, 4]
    assert abs(np.corrcoef(blob.env_states[:, 0], ball_y)[0, 1]) > 0.98
    assert abs(np.corrcoef(blob.env_states[:, 3], ball_vy)[0, 1]) > 0.9
    with pytest.raises(ConfigError, match="must be among the cameras read"):
        load_frames(root, ("front",), 96, use_env_state=True, blob_cameras=("wrist",), progress=False)
