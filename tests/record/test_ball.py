"""The red ball's base-frame position and velocity from calibrated cameras (`train --ball-target`)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from recorded import record_expert_episode

from robotrl.core.errors import ConfigError
from robotrl.core.robot import CameraSpec
from robotrl.hardware.camera_geometry import CameraCalibration, CameraRig, save_rig
from robotrl.record.ball import ball_env_states

S = 96
FPS = 30.0


def _look_at(position: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Rotation whose columns are a camera's x (right), y (down), z (towards `target`)."""
    z = (target - position) / np.linalg.norm(target - position)
    x = np.cross(z, [0.0, 0.0, 1.0])
    x /= np.linalg.norm(x)
    return np.stack([x, np.cross(z, x), z], axis=1)


def _camera(position: list[float]) -> CameraCalibration:
    pos = np.array(position)
    return CameraCalibration(S, S, 90.0, 90.0, (S - 1) / 2, (S - 1) / 2, "base", pos, _look_at(pos, np.zeros(3)))


def _draw(cam: CameraCalibration, ball_m: np.ndarray, diameter_m: float) -> np.ndarray:
    """(N, 3, S, S) uint8 frames of a red ball at `ball_m` (N, 3), drawn 8x finer then
    area-averaged (as a camera integrates light), on grey."""
    frames = np.full((len(ball_m), S * 8, S * 8, 3), 128, np.uint8)
    for frame, p in zip(frames, (ball_m - cam.position_m) @ cam.rotation):
        centre = 8 * (np.array([cam.fx * p[0] / p[2] + cam.cx, cam.fy * p[1] / p[2] + cam.cy]) + 0.5)
        radius = 8 * cam.fx * diameter_m / 2 / p[2]
        cv2.circle(frame, tuple(np.round(centre * 16).astype(int)), round(radius * 16), (220, 20, 20), -1, shift=4)
    small = np.stack([cv2.resize(f, (S, S), interpolation=cv2.INTER_AREA) for f in frames])
    return small.transpose(0, 3, 1, 2)


def test_two_calibrated_views_triangulate_the_ball_and_one_view_follows_its_ray():
    """A ball moving at a constant 0.15 m/s, seen by a front and a side camera; the side
    camera loses it for 20 ticks. Triangulated frames are within 2 mm, frames the front
    camera alone sees within 3 mm (the point of its ray nearest the track interpolated
    between triangulated frames), velocities within 1 cm/s."""
    n = 60
    velocity = np.array([0.02, 0.15, -0.01])
    truth = np.array([0.2, -0.1, 0.05]) + np.arange(n)[:, None] / FPS * velocity
    front, side = _camera([0.6, 0.0, 0.4]), _camera([0.2, -0.5, 0.3])
    rig = CameraRig({"front": front, "side": side}, 0.03)
    images = {"front": _draw(front, truth, 0.03), "side": _draw(side, truth, 0.03)}
    images["side"][20:40] = 128  # out of the side camera's view
    start, end = np.zeros(n, int), np.full(n, n)
    labels = ball_env_states(images, rig, np.zeros((n, 6)), None, start, end, FPS)
    err = np.linalg.norm(labels[:, :3] - truth, axis=1)
    seen_by_both = np.r_[0:20, 40:60]
    assert err[seen_by_both].max() < 0.002
    assert err[20:40].max() < 0.003
    np.testing.assert_allclose(labels[:, 3:], np.broadcast_to(velocity, (n, 3)), atol=0.01)
    # One camera alone: the range from the ball's apparent size, a cruder fallback (an 80 mm
    # ball, 10 px wide: its anti-aliased rim counts whole, so it reads up to 11% nearer).
    big = CameraRig({"front": front}, 0.08)
    alone = ball_env_states({"front": _draw(front, truth, 0.08)}, big, np.zeros((n, 6)), None, start, end, FPS)
    ranges = np.linalg.norm(alone[:, :3] - front.position_m, axis=1) / np.linalg.norm(truth - front.position_m, axis=1)
    assert np.abs(ranges - 1).max() < 0.15
    gripper = CameraRig({"front": CameraCalibration(**(vars(front) | {"mount": "ee"}))}, 0.03)
    with pytest.raises(ValueError, match="needs the arm's kinematics"):
        ball_env_states({"front": images["front"]}, gripper, np.zeros((n, 6)), None, start, end, FPS)


class _Slider:
    """The kinematics of a gripper that slides along y by joint 0 (metres), never turning."""

    def forward(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.array([0.0, q[0], 0.0]), np.eye(3)


def test_a_gripper_camera_is_placed_by_the_joints_of_the_instant_its_frame_was_captured():
    """A gripper camera sliding at 0.3 m/s whose frames were captured a tick (33 ms) before
    the joints stored with them, as a real camera's reader delivers them (showing the
    ball, at 0.1 m/s, where it was then): placed by the stored joints, the triangulated
    ball is 6.7 mm off (median; max 7.2); placed by the joints interpolated to each frame's
    capture (the recording's camera ages) and its ray moved by the ball's motion over the
    age, within 1 mm (0.8); with a third of the ages unknown (NaN: the median of the
    others, a tick, also for the first frame that was not old at all), within 1.5 mm."""
    n = 40
    velocity = np.array([0.0, 0.1, 0.0])
    truth = np.array([0.2, -0.05, 0.05]) + np.arange(n)[:, None] / FPS * velocity
    slide = -0.1 + 0.3 * np.arange(n) / FPS  # joint 0, the gripper's y (m), when the joints are read
    states = np.zeros((n, 6))
    states[:, 0] = slide
    mounted = _camera([0.6, 0.0, 0.4])
    gripper = CameraCalibration(**(vars(mounted) | {"mount": "ee"}))
    side = _camera([0.2, -0.5, 0.3])
    rig = CameraRig({"gripper": gripper, "side": side}, 0.03)
    ages = np.r_[0.0, np.full(n - 1, 1 / FPS)]  # each frame a tick before its joints (the first: with them)
    captured_at = slide - 0.3 * ages
    images = {
        "gripper": np.concatenate(
            [
                _draw(
                    CameraCalibration(**(vars(mounted) | {"position_m": mounted.position_m + [0, y, 0]})), p[None], 0.03
                )
                for y, p in zip(captured_at, truth - ages[:, None] * velocity)
            ]
        ),
        "side": _draw(side, truth, 0.03),
    }
    start, end = np.zeros(n, int), np.full(n, n)

    def error_mm(ages: dict[str, np.ndarray] | None) -> np.ndarray:
        labels = ball_env_states(images, rig, states, _Slider(), start, end, FPS, ages)  # type: ignore[arg-type]
        return 1000 * np.linalg.norm(labels[:, :3] - truth, axis=1)

    assert 6.0 < np.median(error_mm(None)) and error_mm(None).max() < 8.0
    assert error_mm({"gripper": ages}).max() < 1.0
    ages[::3] = np.nan
    assert error_mm({"gripper": ages}).max() < 1.5


def test_each_ray_is_moved_by_the_balls_motion_over_its_frames_age():
    """A ball at 0.15 m/s seen by two fixed cameras whose frames are 0 to 2 ticks old,
    each camera on its own clock (as a real camera's reader delivers its newest frame):
    triangulated as if both showed the ball at the reading, it is 5 mm off (median; up to
    5.4); with each ray moved by the ball's motion over its frame's age (the velocity of a
    first pass), within 1 mm (0.8), its velocity within 3 mm/s."""
    n = 60
    rng = np.random.default_rng(0)
    velocity = np.array([0.02, 0.15, -0.01])
    truth = np.array([0.2, -0.1, 0.05]) + np.arange(n)[:, None] / FPS * velocity
    front, side = _camera([0.6, 0.0, 0.4]), _camera([0.2, -0.5, 0.3])
    rig = CameraRig({"front": front, "side": side}, 0.03)
    ages = {name: rng.uniform(0.0, 2 / FPS, n) for name in ("front", "side")}
    images = {name: _draw(cam, truth - ages[name][:, None] * velocity, 0.03) for name, cam in rig.cameras.items()}
    start, end = np.zeros(n, int), np.full(n, n)

    def labels(ages_s: dict[str, np.ndarray] | None) -> np.ndarray:
        return ball_env_states(images, rig, np.zeros((n, 6)), None, start, end, FPS, ages_s)

    as_if_now = np.linalg.norm(labels(None)[:, :3] - truth, axis=1)
    assert np.median(as_if_now) > 0.004
    moved = labels(ages)
    assert np.linalg.norm(moved[:, :3] - truth, axis=1).max() < 0.001
    np.testing.assert_allclose(moved[:, 3:], np.broadcast_to(velocity, (n, 3)), atol=0.003)


def test_a_recorded_track_episode_gives_the_balls_position_from_its_front_and_wrist_videos(tmp_path):
    """Through the recorder's video files and the scene's calibration: the ball's position
    triangulated in the front and wrist frames (the wrist camera placed by forward
    kinematics of the recorded joints) is within 0.5 cm rms per axis of where the
    simulator has it and its velocity within 1.2 cm/s (0.38 / 0.18 / 0.09 cm and 0.86 /
    0.68 / 0.37 cm/s smoothed, 0.40 / 0.19 / 0.13 cm and 0.9 / 0.6 / 0.5 cm/s per frame
    with central differences: this expert episode's error is mostly slow; with the stray
    red pixels of the orange arm averaged into the front camera's centroid it was 0.57 /
    0.37 / 0.64 cm and 1.8 / 1.3 / 1.8 cm/s); no simulator state is read."""
    from robotrl.record.dataset import load_frames
    from robotrl.sim.env import TaskEnv

    env = TaskEnv("track", cameras=(CameraSpec("front", 96, 96), CameraSpec("wrist", 96, 96)))
    root = tmp_path / "track"
    record_expert_episode(env, root, seed=7, max_ticks=150)
    save_rig(env.camera_rig(), tmp_path / "cams.json")
    env.close()
    ball = load_frames(
        root, ("front", "wrist"), 96, use_env_state=True, ball_calibration=tmp_path / "cams.json", progress=False
    )
    sim = load_frames(root, (), use_env_state=True, progress=False)
    assert ball.env_states is not None and sim.env_states is not None
    rms_cm = 100 * np.sqrt(((ball.env_states[:, :3] - sim.env_states[:, :3]) ** 2).mean(0))
    assert (rms_cm < 0.5).all(), rms_cm
    velocity_rms_cm_s = 100 * np.sqrt(((ball.env_states[:, 3:] - sim.env_states[:, 3:]) ** 2).mean(0))
    assert (velocity_rms_cm_s < 1.2).all(), velocity_rms_cm_s
    rig = env.camera_rig()
    save_rig(CameraRig({"top": rig.cameras["front"]}, 0.03), tmp_path / "top.json")
    with pytest.raises(ConfigError, match="none of the cameras read"):
        load_frames(root, ("front",), 96, use_env_state=True, ball_calibration=tmp_path / "top.json", progress=False)
    wide = rig
    wide.cameras["front"] = CameraCalibration(**(vars(wide.cameras["front"]) | {"width_px": 128}))
    save_rig(wide, tmp_path / "wide.json")
    with pytest.raises(ConfigError, match="a different aspect ratio"):
        load_frames(root, ("front",), 96, use_env_state=True, ball_calibration=tmp_path / "wide.json", progress=False)
