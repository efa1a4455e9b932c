"""Calibrated cameras: where an image point looks in the arm's base frame.

A camera calibration file (JSON) holds, per camera, OpenCV's pinhole model at the
resolution it was measured at (`cv2.calibrateCamera`: pixel centres at integer
coordinates) and the camera's pose on the arm (e.g. `cv2.solvePnP` on a board at a known
place for a fixed camera, a hand-eye calibration for one on the gripper):

    {"object_diameter_m": 0.03,
     "cameras": {"front": {"width_px": 640, "height_px": 480, "fx": 600.0, "fy": 600.0,
                           "cx": 319.5, "cy": 239.5, "distortion": [k1, k2, p1, p2, k3],
                           "mount": "base", "position_m": [x, y, z], "rotation": [[...], ...]},
                 "wrist": {..., "mount": "ee", ...}}}

`mount` is "base" (the URDF's root frame: fixed to the table) or "ee" (the arm's
`ee_frame`, moving with the gripper; its pose comes from the joints by forward
kinematics). `position_m` is the camera's optical centre in that frame and `rotation`
(3 x 3) has the camera's axes as columns (OpenCV's: x right, y down, z along the optical
axis). `distortion` is optional (none by default). `object_diameter_m` is the tracked
object's size, which gives its distance when only one camera sees it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from robotrl.core.errors import ConfigError
from robotrl.fsutil import replace_json

MOUNTS = ("base", "ee")


@dataclass(frozen=True)
class CameraCalibration:
    """One camera's intrinsics (pixels at `width_px` x `height_px`) and pose in its mount."""

    width_px: int
    height_px: int
    fx: float
    fy: float
    cx: float
    cy: float
    mount: str
    position_m: np.ndarray
    """(3,) optical centre in the mount frame, metres."""
    rotation: np.ndarray
    """(3, 3) camera axes (x right, y down, z forward) as columns, in the mount frame."""
    distortion: np.ndarray = field(default_factory=lambda: np.zeros(5))
    """OpenCV distortion coefficients (k1, k2, p1, p2[, k3, ...])."""

    def __post_init__(self) -> None:
        rot = np.asarray(self.rotation, float)
        if min(self.width_px, self.height_px, self.fx, self.fy) <= 0:
            raise ConfigError("camera calibration: width_px, height_px, fx and fy must be positive")
        if self.mount not in MOUNTS:
            raise ConfigError(f"camera calibration: mount {self.mount!r} is not one of {', '.join(MOUNTS)}")
        if np.shape(self.position_m) != (3,) or rot.shape != (3, 3):
            raise ConfigError("camera calibration: position_m needs 3 numbers and rotation 3 x 3")
        if not np.allclose(rot.T @ rot, np.eye(3), atol=1e-4) or np.linalg.det(rot) < 0:
            raise ConfigError("camera calibration: rotation is not a rotation matrix (orthonormal, det +1)")


@dataclass(frozen=True)
class CameraRig:
    """The calibration file's contents."""

    cameras: dict[str, CameraCalibration]
    object_diameter_m: float


def load_rig(path: Path | str) -> CameraRig:
    """Read a camera calibration file (module docstring); ConfigError naming what is wrong."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
        cameras = {
            name: CameraCalibration(
                width_px=int(c["width_px"]),
                height_px=int(c["height_px"]),
                fx=float(c["fx"]),
                fy=float(c["fy"]),
                cx=float(c["cx"]),
                cy=float(c["cy"]),
                mount=str(c["mount"]),
                position_m=np.asarray(c["position_m"], float),
                rotation=np.asarray(c["rotation"], float),
                distortion=np.asarray(c.get("distortion", [0.0] * 5), float),
            )
            for name, c in raw["cameras"].items()
        }
        diameter = float(raw["object_diameter_m"])
    except FileNotFoundError:
        raise ConfigError(f"no camera calibration file {path}") from None
    except OSError as e:
        raise ConfigError(f"camera calibration {path}: {e.strerror}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"camera calibration {path}: {e.__class__.__name__} {e}") from None
    if diameter <= 0:
        raise ConfigError(f"camera calibration {path}: object_diameter_m must be positive")
    return CameraRig(cameras, diameter)


def save_rig(rig: CameraRig, path: Path | str) -> None:
    """Write `rig` in the format `load_rig` reads (atomically)."""
    cameras = {
        name: {
            "width_px": c.width_px,
            "height_px": c.height_px,
            "fx": c.fx,
            "fy": c.fy,
            "cx": c.cx,
            "cy": c.cy,
            "distortion": np.asarray(c.distortion).tolist(),
            "mount": c.mount,
            "position_m": np.asarray(c.position_m).tolist(),
            "rotation": np.asarray(c.rotation).tolist(),
        }
        for name, c in rig.cameras.items()
    }
    replace_json(Path(path), {"object_diameter_m": rig.object_diameter_m, "cameras": cameras}, indent=1)


def camera_rays(cam: CameraCalibration, uv: np.ndarray) -> np.ndarray:
    """(N, 2) image points, u rightward and v downward in [-1, 1] across the whole frame
    (any resize of it) -> (N, 3) unit directions in the camera frame (z forward)."""
    uv = np.asarray(uv, float)
    px = np.stack([(uv[:, 0] + 1) / 2 * cam.width_px - 0.5, (uv[:, 1] + 1) / 2 * cam.height_px - 0.5], axis=1)
    k = np.array([[cam.fx, 0, cam.cx], [0, cam.fy, cam.cy], [0, 0, 1]])
    xy = cv2.undistortPoints(px.reshape(-1, 1, 2), k, np.asarray(cam.distortion, float)).reshape(-1, 2)
    rays = np.concatenate([xy, np.ones((len(xy), 1))], axis=1)
    return rays / np.linalg.norm(rays, axis=1, keepdims=True)


def distance_from_size(cam: CameraCalibration, size: np.ndarray, diameter_m: float) -> np.ndarray:
    """(N,) range (m) of a sphere of `diameter_m` whose image covers (`size` x image
    width) squared of a square resize of the frame (`robotrl.record.blob` sizes): its
    image diameter is 2 size sqrt(W H / pi) calibration pixels."""
    diameter_px = 2 * np.asarray(size, float) * math.sqrt(cam.width_px * cam.height_px / math.pi)
    return math.sqrt(cam.fx * cam.fy) * diameter_m / np.maximum(diameter_px, 1e-9)


def nearest_points(origins: np.ndarray, directions: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(N, K, 3) ray origins and unit directions, (N, K) weights >= 0 -> (N, 3) per row
    the point with the least weighted sum of squared distances to the rays (rows need two
    weighted rays that are not parallel)."""
    proj = np.eye(3) - directions[..., :, None] * directions[..., None, :]  # (N, K, 3, 3)
    proj = proj * np.asarray(weights, float)[..., None, None]
    a = proj.sum(1)
    b = np.einsum("nkij,nkj->ni", proj, origins)
    return np.linalg.solve(a, b[..., None])[..., 0]
