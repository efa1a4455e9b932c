"""Camera calibration from views of a chessboard lying still on the table: each camera's
intrinsics, the gripper camera's pose on the end effector and the fixed cameras' poses
on the base (`robotrl.hardware.camera_geometry`'s file).

The board's frame is OpenCV's: origin at the first inner corner, x along a row of `cols`
inner corners, y along the `rows`, z = x cross y. The detector may number the corners
from any corner either way round; `canonical_order` makes z point away from the camera
and starts at a corner whose inner square is black, which is one corner of the two left
when `cols + rows` is odd (a board turned half round then looks different), so all views
of the still board number its corners alike (the board's own pose is a by-product).

The gripper camera's views, with the arm's forward kinematics at each, give both unknown
poses at once: the board's on the base and the camera's on the end effector (OpenCV's
robot-world hand-eye calibration, refined on the reprojection error of every corner). A
fixed camera's pose is then its board pose carried into the base frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from robotrl.core.errors import ConfigError
from robotrl.hardware.camera_geometry import CameraCalibration

MIN_DISTINCT_VIEWS = 6
"""A camera with fewer views differing by `DISTINCT_VIEW_FRACTION` gets the focal length
alone (principal point at the centre, no distortion): one pose of a plane cannot tell
them apart."""
DISTINCT_VIEW_FRACTION = 0.02
"""Mean corner displacement, as a fraction of the image width, that makes a view new."""
OUTLIER_FACTOR = 3.0
OUTLIER_MIN_PX = 0.5


@dataclass(frozen=True)
class Board:
    """A chessboard: `cols` x `rows` inner corners `square_m` apart."""

    cols: int
    rows: int
    square_m: float

    def __post_init__(self) -> None:
        if min(self.cols, self.rows) < 3 or (self.cols + self.rows) % 2 == 0 or self.square_m <= 0:
            raise ConfigError(
                f"chessboard {self.cols}x{self.rows}: needs at least 3 inner corners a side, an odd "
                "sum of the two (so it has no half-turn symmetry) and a positive square size"
            )

    def points(self) -> np.ndarray:
        """(K, 3) float32 inner corners in the board frame, row by row, metres."""
        j, i = np.mgrid[0 : self.rows, 0 : self.cols]
        return np.stack([i.ravel(), j.ravel(), np.zeros(i.size)], axis=1).astype(np.float32) * self.square_m


def find_corners(image: np.ndarray, board: Board) -> np.ndarray | None:
    """(H, W, 3) uint8 RGB -> (K, 2) float32 inner corners in pixels in `Board.points`
    order (`canonical_order`), or None where the whole board is not found."""
    gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    flags = cv2.CALIB_CB_NORMALIZE_IMAGE | cv2.CALIB_CB_EXHAUSTIVE | cv2.CALIB_CB_ACCURACY
    found, corners = cv2.findChessboardCornersSB(gray, (board.cols, board.rows), flags=flags)
    return canonical_order(gray, corners.reshape(-1, 2), board) if found else None


def canonical_order(gray: np.ndarray, corners: np.ndarray, board: Board) -> np.ndarray:
    """(K, 2) corners found in some order (the detector may start at any corner and go
    either way round) -> the one order every view of the board agrees on: rows running
    so that the board's z axis points away from the camera (a row's direction turned a
    quarter clockwise in the image is the next row's), then started at the corner whose
    inner square is black (`gray`: the (H, W) image)."""
    grid = corners.reshape(board.rows, board.cols, 2)
    along, across = grid[0, 1] - grid[0, 0], grid[1, 0] - grid[0, 0]
    if along[0] * across[1] - along[1] * across[0] < 0:
        grid = grid[::-1]
    ordered = grid.reshape(-1, 2)
    c = board.cols
    first = _mean_level(gray, ordered[[0, 1, c + 1, c]])
    next_ = _mean_level(gray, ordered[[1, 2, c + 2, c + 1]])
    return ordered[::-1].copy() if first > next_ else ordered.copy()


def _mean_level(gray: np.ndarray, quad: np.ndarray) -> float:
    """Mean grey level inside the (4, 2) pixel quadrilateral `quad`, shrunk to half size."""
    centre = quad.mean(0)
    inner = (centre + (quad - centre) / 2).round().astype(np.int32)
    mask = np.zeros(gray.shape, np.uint8)
    cv2.fillConvexPoly(mask, inner, 1)
    return float(gray[mask > 0].mean()) if mask.any() else 0.0


def distinct_views(corners: list[np.ndarray], width_px: int) -> list[np.ndarray]:
    """The (K, 2) corner sets that differ from every earlier kept one by a mean
    displacement of `DISTINCT_VIEW_FRACTION` of the width: a still board filmed for a
    second is one view, not thirty."""
    kept: list[np.ndarray] = []
    for c in corners:
        if all(np.linalg.norm(c - k, axis=1).mean() > DISTINCT_VIEW_FRACTION * width_px for k in kept):
            kept.append(c)
    return kept


@dataclass(frozen=True)
class Intrinsics:
    camera_matrix: np.ndarray
    """(3, 3) OpenCV camera matrix, pixels."""
    distortion: np.ndarray
    """(5,) k1, k2, p1, p2, k3."""
    rms_px: float
    """Reprojection error of the fit over every view."""
    full_model: bool
    """Principal point and distortion fitted (else the focal length alone)."""
    views: int
    """Distinct views fitted (after dropping outliers)."""


def fit_intrinsics(board: Board, corners: list[np.ndarray], size_px: tuple[int, int]) -> Intrinsics:
    """Intrinsics of one camera from its (K, 2) corner sets in images of (width, height):
    focal length, principal point and k1, k2 from `MIN_DISTINCT_VIEWS` distinct views,
    else the focal length alone. Views that fit `OUTLIER_FACTOR` times worse than the
    median (and over `OUTLIER_MIN_PX`: a blurred frame, a board moving) are dropped and
    the rest fitted again."""
    kept = distinct_views(corners, size_px[0])
    while True:
        fit, per_view = _calibrate(board, kept, size_px)
        good = inliers(per_view)
        if good.all():
            return fit
        kept = [c for c, g in zip(kept, good) if g]


def _calibrate(board: Board, corners: list[np.ndarray], size_px: tuple[int, int]) -> tuple[Intrinsics, np.ndarray]:
    """`cv2.calibrateCamera` of distinct views with the model `fit_intrinsics` chooses:
    (the fit, (V,) rms px of each view)."""
    width, height = size_px
    full = len(corners) >= MIN_DISTINCT_VIEWS
    flags = cv2.CALIB_FIX_ASPECT_RATIO | cv2.CALIB_ZERO_TANGENT_DIST | cv2.CALIB_FIX_K3
    if not full:
        flags |= cv2.CALIB_FIX_PRINCIPAL_POINT | cv2.CALIB_FIX_K1 | cv2.CALIB_FIX_K2
    guess = np.array([[width, 0, (width - 1) / 2], [0, width, (height - 1) / 2], [0, 0, 1]], float)
    rms, matrix, dist, _, _, _, _, per_view = cv2.calibrateCameraExtended(
        [board.points()] * len(corners),
        [c.reshape(-1, 1, 2).astype(np.float32) for c in corners],
        (width, height),
        guess,
        np.zeros(5),
        flags=flags | cv2.CALIB_USE_INTRINSIC_GUESS,
    )
    fit = Intrinsics(matrix, np.asarray(dist, float).ravel()[:5], float(rms), full, len(corners))
    return fit, np.asarray(per_view, float).ravel()


def board_pose(board: Board, corners: np.ndarray, intrinsics: Intrinsics) -> tuple[np.ndarray, np.ndarray]:
    """The board in the camera frame: ((3, 3) rotation, (3,) translation m) with
    p_camera = R p_board + t."""
    ok, rvec, tvec = cv2.solvePnP(
        board.points(), corners.astype(np.float32), intrinsics.camera_matrix, intrinsics.distortion
    )
    if not ok:
        raise ConfigError("the board's pose could not be solved from a view")
    return cv2.Rodrigues(rvec)[0], tvec.ravel()


def inliers(errors_px: np.ndarray) -> np.ndarray:
    """(V,) bool: the views whose (V,) reprojection errors are within `OUTLIER_FACTOR`
    times the median or `OUTLIER_MIN_PX`."""
    return errors_px <= max(OUTLIER_FACTOR * float(np.median(errors_px)), OUTLIER_MIN_PX)


def view_errors(board: Board, corners: list[np.ndarray], intrinsics: Intrinsics) -> np.ndarray:
    """(V,) rms px of each (K, 2) corner set against the board at its best rigid pose (a
    detection gone wrong fits no pose)."""
    return np.array([_rms_px(board, *board_pose(board, c, intrinsics), intrinsics, [c]) for c in corners])


def _rms_px(board: Board, rot: np.ndarray, t: np.ndarray, intrinsics: Intrinsics, corners: list[np.ndarray]) -> float:
    """Rms distance (px) of the (K, 2) corner sets from the board projected at pose
    (`rot`, `t`: p_camera = rot p_board + t)."""
    px, _ = cv2.projectPoints(board.points(), cv2.Rodrigues(rot)[0], t, intrinsics.camera_matrix, intrinsics.distortion)
    return float(np.sqrt(np.mean([np.sum((c - px.reshape(-1, 2)) ** 2, axis=1) for c in corners])))


@dataclass(frozen=True)
class HandEye:
    board_rotation: np.ndarray
    """(3, 3) board axes as columns in the base frame."""
    board_position_m: np.ndarray
    """(3,) board origin in the base frame."""
    camera_rotation: np.ndarray
    """(3, 3) camera axes as columns in the end-effector frame."""
    camera_position_m: np.ndarray
    """(3,) optical centre in the end-effector frame."""
    rms_px: float
    """Reprojection error of every corner through the arm's kinematics."""
    views: int
    """Views fitted (after dropping outliers)."""


def solve_hand_eye(
    board: Board, corners: list[np.ndarray], ee_poses: list[tuple[np.ndarray, np.ndarray]], intrinsics: Intrinsics
) -> HandEye:
    """The board's pose on the base and the gripper camera's on the end effector from the
    camera's (K, 2) corner sets and the end effector's (position (3,) m, rotation (3, 3))
    in the base frame at each (forward kinematics of the joints measured with it). Views
    no rigid board fits, then views off the joint fit (`inliers`), are left out."""
    good = inliers(view_errors(board, corners, intrinsics)) if corners else np.zeros(0, bool)
    corners = [c for c, g in zip(corners, good) if g]
    ee_poses = [p for p, g in zip(ee_poses, good) if g]
    if len(corners) < 3:
        raise ConfigError(f"the gripper camera saw the whole board from {len(corners)} poses: at least 3 needed")
    board_in_cam = [board_pose(board, c, intrinsics) for c in corners]
    base_to_ee = [(rot.T, -rot.T @ pos) for pos, rot in ee_poses]
    r_base_board, t_base_board, r_ee_cam, t_ee_cam = cv2.calibrateRobotWorldHandEye(
        [r for r, _ in board_in_cam],
        [t for _, t in board_in_cam],
        [r for r, _ in base_to_ee],
        [t for _, t in base_to_ee],
    )
    # OpenCV returns p_board = R p_base + t and p_cam = R p_ee + t: invert both.
    x = np.concatenate(
        [
            cv2.Rodrigues(r_base_board.T)[0].ravel(),
            -r_base_board.T @ t_base_board.ravel(),
            cv2.Rodrigues(r_ee_cam.T)[0].ravel(),
            -r_ee_cam.T @ t_ee_cam.ravel(),
        ]
    )
    while True:
        x, per_view = _refine(board, corners, ee_poses, intrinsics, x)
        good = inliers(per_view)
        if good.all() or good.sum() < 3:
            break
        corners = [c for c, g in zip(corners, good) if g]
        ee_poses = [p for p, g in zip(ee_poses, good) if g]
    rms = float(np.sqrt(np.mean(per_view**2)))
    return HandEye(cv2.Rodrigues(x[:3])[0], x[3:6], cv2.Rodrigues(x[6:9])[0], x[9:12], rms, len(corners))


def _refine(
    board: Board,
    corners: list[np.ndarray],
    ee_poses: list[tuple[np.ndarray, np.ndarray]],
    intrinsics: Intrinsics,
    x0: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Least squares on every corner's reprojection over x = (board rotation vector,
    board position, camera rotation vector, camera position): ((12,), (V,) rms px of
    each view)."""
    from scipy.optimize import least_squares

    points = board.points().astype(float)
    observed = np.concatenate(corners)

    def residuals(x: np.ndarray) -> np.ndarray:
        board_rot, cam_rot = cv2.Rodrigues(x[:3])[0], cv2.Rodrigues(x[6:9])[0]
        world = points @ board_rot.T + x[3:6]
        out = []
        for pos, rot in ee_poses:
            eye_rot = rot @ cam_rot
            eye = pos + rot @ x[9:12]
            local = np.asarray((world - eye) @ eye_rot, np.float64)  # (K, 3) camera frame
            px, _ = cv2.projectPoints(local, np.zeros(3), np.zeros(3), intrinsics.camera_matrix, intrinsics.distortion)
            out.append(px.reshape(-1, 2))
        return (np.concatenate(out) - observed).ravel()

    fit = least_squares(residuals, x0, method="lm")
    per_corner = np.sum(fit.fun.reshape(len(corners), -1, 2) ** 2, axis=2)
    return fit.x, np.sqrt(per_corner.mean(axis=1))


def calibration(
    intrinsics: Intrinsics, size_px: tuple[int, int], mount: str, position_m: np.ndarray, rotation: np.ndarray
) -> CameraCalibration:
    """The camera calibration file's entry for one camera."""
    m = intrinsics.camera_matrix
    return CameraCalibration(
        width_px=size_px[0],
        height_px=size_px[1],
        fx=float(m[0, 0]),
        fy=float(m[1, 1]),
        cx=float(m[0, 2]),
        cy=float(m[1, 2]),
        mount=mount,
        position_m=np.asarray(position_m, float),
        rotation=np.asarray(rotation, float),
        distortion=intrinsics.distortion,
    )


def fixed_camera_pose(
    board: Board, corners: list[np.ndarray], intrinsics: Intrinsics, hand_eye: HandEye
) -> tuple[np.ndarray, np.ndarray, float]:
    """A camera fixed to the table: ((3,) optical centre m, (3, 3) axes as columns) in the
    base frame from its (K, 2) corner sets of the still board (their median), and the
    reprojection error (px) over the sets."""
    rot, t = board_pose(board, np.median(np.stack(corners), axis=0), intrinsics)
    rms = _rms_px(board, rot, t, intrinsics, corners)
    return (
        hand_eye.board_rotation @ (-rot.T @ t) + hand_eye.board_position_m,
        hand_eye.board_rotation @ rot.T,
        rms,
    )
