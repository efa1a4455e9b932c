"""Chessboard calibration: corners numbered alike in every view, the lens, the gripper
camera's place on the hand and the board's on the table, a fixed camera's pose."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from robotrl.core.errors import ConfigError
from robotrl.hardware import board_calibration as bc

BOARD = bc.Board(cols=7, rows=4, square_m=0.02)
K = np.array([[500.0, 0, 322.0], [0, 500.0, 236.0], [0, 0, 1]])
SIZE = (640, 480)
TEXTURE_PX_PER_M = 2000.0


def _texture() -> np.ndarray:
    """The board drawn as in `sim/tasks/calibrate.py`: one white square of margin, the
    square inside the board-frame origin black; (H, W) uint8 and its origin in pixels."""
    s = BOARD.square_m * TEXTURE_PX_PER_M
    img = np.full((int((BOARD.rows + 3) * s), int((BOARD.cols + 3) * s)), 255, np.uint8)
    for i in range(BOARD.cols + 1):
        for j in range(BOARD.rows + 1):
            if (i + j) % 2 == 0:
                x0, y0 = int((i + 0.5) * s), int((j + 0.5) * s)
                img[y0 : y0 + int(s), x0 : x0 + int(s)] = 0
    return img


def _look_at(eye: np.ndarray, target: np.ndarray, roll_rad: float = 0.0) -> np.ndarray:
    """(3, 3) camera axes as columns (x right, y down, z forward) looking from `eye` at `target`."""
    z = (target - eye) / np.linalg.norm(target - eye)
    x = np.cross(z, [0, 0, 1.0])
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    rot = np.stack([x, y, z], axis=1)
    c, s = np.cos(roll_rad), np.sin(roll_rad)
    return rot @ np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


def _render(eye: np.ndarray, axes: np.ndarray, distortion: np.ndarray | None = None) -> np.ndarray:
    """(H, W, 3) RGB view of the board (its frame = the world's) from a camera at `eye`,
    through a lens with OpenCV `distortion` (default none)."""
    r, t = axes.T, -axes.T @ eye
    homography = K @ np.stack([r[:, 0], r[:, 1], t], axis=1)  # board plane (metres) -> pixels
    shift = -1.5 * BOARD.square_m
    tex_to_board = np.array([[1 / TEXTURE_PX_PER_M, 0, shift], [0, 1 / TEXTURE_PX_PER_M, shift], [0, 0, 1]])
    gray = cv2.warpPerspective(_texture(), homography @ tex_to_board, SIZE, flags=cv2.INTER_AREA, borderValue=128)
    if distortion is not None:  # each distorted pixel samples the pinhole image where its ray lands
        grid = np.stack(np.meshgrid(np.arange(SIZE[0]), np.arange(SIZE[1])), axis=-1).reshape(-1, 1, 2)
        ideal = cv2.undistortPoints(grid.astype(np.float32), K, distortion, P=K).reshape(SIZE[1], SIZE[0], 2)
        gray = cv2.remap(gray, ideal[..., 0], ideal[..., 1], cv2.INTER_LINEAR, borderValue=128)
    return np.repeat(gray[:, :, None], 3, axis=2)


CENTRE = np.array([0.06, 0.03, 0.0])


def test_corners_are_numbered_alike_from_any_side_and_turn_of_the_camera():
    """Views from opposite sides of the board, one with the camera rolled half round,
    give the same board pose in the world (the black-square rule picks the first corner)."""
    poses = []
    for eye, roll in (([0.06, -0.25, 0.35], 0.0), ([0.06, 0.3, 0.3], 0.0), ([-0.2, 0.03, 0.35], np.pi)):
        eye = np.array(eye)
        axes = _look_at(eye, CENTRE, roll)
        corners = bc.find_corners(_render(eye, axes), BOARD)
        assert corners is not None
        rot, t = bc.board_pose(BOARD, corners, bc.Intrinsics(K, np.zeros(5), 0.0, True, 1))
        poses.append((axes @ rot, axes @ t + eye))  # the board frame in the world
    for rot, origin in poses[1:]:
        assert np.linalg.norm(origin - poses[0][1]) < 1e-3
        assert np.degrees(np.arccos(np.clip((np.trace(rot.T @ poses[0][0]) - 1) / 2, -1, 1))) < 0.3
    # the board frame is the texture's or its mirror through the x axis (either starts at a black square)
    assert np.linalg.norm(poses[0][1]) < 1e-3 or np.linalg.norm(poses[0][1] - [0, 0.06, 0]) < 1e-3


def test_any_order_the_detector_reports_becomes_the_one_canonical_order():
    """Started at any corner, going either way round: the same numbering."""
    eye = np.array([0.1, -0.25, 0.35])
    image = _render(eye, _look_at(eye, CENTRE, 0.3))
    corners = bc.find_corners(image, BOARD)
    assert corners is not None
    gray = image[:, :, 0]
    grid = corners.reshape(BOARD.rows, BOARD.cols, 2)
    for other in (grid[::-1], grid[:, ::-1], grid[::-1, ::-1]):
        assert np.array_equal(bc.canonical_order(gray, other.reshape(-1, 2), BOARD), corners)


def test_a_board_turned_half_round_would_look_the_same_so_it_is_refused():
    with pytest.raises(ConfigError, match="odd"):
        bc.Board(7, 5, 0.02)
    with pytest.raises(ConfigError):
        bc.Board(7, 4, 0.0)


def _views(n: int, rng: np.random.Generator, spread_m: float = 0.01) -> list[tuple[np.ndarray, np.ndarray]]:
    """n camera poses (eye, axes) looking near the board (`spread_m` off its centre) from
    0.25-0.4 m at up to 50 deg."""
    out = []
    while len(out) < n:
        tilt, azimuth = rng.uniform(0.1, 0.85), rng.uniform(0, 2 * np.pi)
        dist = rng.uniform(0.25, 0.4)
        eye = CENTRE + dist * np.array([np.sin(tilt) * np.cos(azimuth), np.sin(tilt) * np.sin(azimuth), np.cos(tilt)])
        out.append((eye, _look_at(eye, CENTRE + rng.normal(0, spread_m, 3), rng.uniform(-0.5, 0.5))))
    return out


def test_the_lens_comes_from_views_at_many_angles_and_the_focal_length_alone_from_one():
    """A barrel lens (k1 -0.15) seen through 16 views of the board spread over the
    image: the fitted model maps points within 80% of the frame to within 1.5 px of the
    true one; a view repeated counts once, two views 3 px off (a moving board) are
    dropped; one view alone gives the focal length alone."""
    rng = np.random.default_rng(0)
    lens = np.array([-0.15, 0.0, 0.0, 0.0, 0.0])
    corners = [bc.find_corners(_render(eye, axes, lens), BOARD) for eye, axes in _views(16, rng, 0.08)]
    found = [c for c in corners if c is not None]
    assert len(found) >= 12
    full = bc.fit_intrinsics(BOARD, found, SIZE)
    assert full.full_model and full.rms_px < 0.3
    assert abs(full.camera_matrix[0, 0] - 500) < 10 and abs(full.distortion[0] + 0.15) < 0.05
    grid = np.stack(np.meshgrid(np.linspace(0.1, 0.9, 9) * SIZE[0], np.linspace(0.1, 0.9, 9) * SIZE[1]), -1)
    rays = cv2.undistortPoints(grid.reshape(-1, 1, 2), K, lens).reshape(-1, 2)
    rays3 = np.concatenate([rays, np.ones((len(rays), 1))], axis=1)
    fitted, _ = cv2.projectPoints(rays3, np.zeros(3), np.zeros(3), full.camera_matrix, full.distortion)
    assert np.abs(fitted.reshape(-1, 2) - grid.reshape(-1, 2)).max() < 1.5  # 0.17 deg
    assert bc.fit_intrinsics(BOARD, found + found[:3], SIZE).views == len(found)  # a view held is one view
    moving = [bc.find_corners(_render(eye, axes, lens), BOARD) for eye, axes in _views(2, np.random.default_rng(2))]
    blurred = [c + rng.normal(0, 3.0, c.shape) for c in moving if c is not None]
    robust = bc.fit_intrinsics(BOARD, found + blurred, SIZE)
    assert len(blurred) == 2 and robust.views == len(found)
    assert np.allclose(robust.camera_matrix, full.camera_matrix)
    one = bc.fit_intrinsics(BOARD, found[:1] * 5, SIZE)
    assert not one.full_model
    assert one.camera_matrix[0, 2] == pytest.approx((SIZE[0] - 1) / 2) and np.all(one.distortion == 0)


def test_hand_eye_finds_the_gripper_camera_on_the_hand_and_the_board_on_the_table():
    """Corners projected (0.1 px noise) from a camera rigidly mounted on a hand posed
    around a board lying at a known place, and one detection gone wrong: the fit leaves
    it out and recovers both poses to 1 mm and 0.1 deg; a fixed camera's pose follows
    from its view of the board."""
    rng = np.random.default_rng(1)
    mount_axes = _look_at(np.zeros(3), np.array([0.0, 0.3, 1.0]), 0.3)
    mount_pos = np.array([0.0, 0.045, -0.02])
    board_rot = np.array([[np.cos(0.4), -np.sin(0.4), 0], [np.sin(0.4), np.cos(0.4), 0], [0, 0, 1]])  # yawed
    board_pos = np.array([0.22, -0.03, 0.003])
    intr = bc.Intrinsics(K, np.zeros(5), 0.0, True, 1)

    def project(eye_base: np.ndarray, axes_base: np.ndarray) -> np.ndarray:
        world = BOARD.points() @ board_rot.T + board_pos
        local = (world - eye_base) @ axes_base
        return local[:, :2] / local[:, 2:] * [K[0, 0], K[1, 1]] + K[:2, 2] + rng.normal(0, 0.1, (len(local), 2))

    corners, hands = [], []
    for eye_b, axes_b in _views(10, rng):  # camera poses in the board frame -> base frame
        eye, axes = board_rot @ eye_b + board_pos, board_rot @ axes_b
        hand_rot = axes @ mount_axes.T
        hands.append((eye - hand_rot @ mount_pos, hand_rot))
        corners.append(project(eye, axes))
    wrong = corners[0].reshape(BOARD.rows, BOARD.cols, 2)[[1, 0, 2, 3]].reshape(-1, 2)  # two rows swapped
    fit = bc.solve_hand_eye(BOARD, [*corners, wrong], [*hands, hands[0]], intr)
    assert fit.views == 10 and fit.rms_px < 0.2  # the detection gone wrong left out
    assert np.linalg.norm(fit.camera_position_m - mount_pos) < 1e-3
    assert np.degrees(np.arccos((np.trace(fit.camera_rotation.T @ mount_axes) - 1) / 2)) < 0.1
    front_eye = np.array([0.62, 0.0, 0.42])
    front_axes = _look_at(front_eye, board_pos)
    position, rotation, rms = bc.fixed_camera_pose(BOARD, [project(front_eye, front_axes) for _ in range(3)], intr, fit)
    assert rms < 0.3 and np.linalg.norm(position - front_eye) < 2e-3
    assert np.degrees(np.arccos(np.clip((np.trace(rotation.T @ front_axes) - 1) / 2, -1, 1))) < 0.2
    with pytest.raises(ConfigError, match="at least 3"):
        bc.solve_hand_eye(BOARD, corners[:2], hands[:2], intr)
