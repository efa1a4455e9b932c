"""Calibrated cameras: pixels to base-frame rays, range from size, triangulation, the file."""

from __future__ import annotations

import json

import cv2
import mujoco
import numpy as np
import pytest

from robotrl.core.errors import ConfigError
from robotrl.core.robot import CameraSpec
from robotrl.hardware.camera_geometry import (
    CameraCalibration,
    CameraRig,
    camera_rays,
    distance_from_size,
    load_rig,
    nearest_points,
    save_rig,
)
from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.models import get_arm
from robotrl.hardware.sim_arm.render import camera_rig
from robotrl.hardware.sim_arm.scene import build_arm_spec

K640 = dict(width_px=640, height_px=480, fx=600.0, fy=590.0, cx=322.0, cy=236.0)


def _camera(**kw) -> CameraCalibration:
    return CameraCalibration(**(K640 | dict(mount="base", position_m=np.zeros(3), rotation=np.eye(3)) | kw))


def test_an_image_point_gives_the_ray_to_the_point_that_projects_there_with_lens_distortion():
    """OpenCV projects camera-frame points (distortion included) to pixels; the pixel, as
    [-1, 1] coordinates of the whole frame, gives back their directions."""
    cam = _camera(distortion=np.array([-0.2, 0.05, 0.001, -0.002, 0.0]))
    points = np.array([[0.0, 0.0, 1.0], [0.1, -0.05, 0.5], [-0.2, 0.1, 0.8]])
    k = np.array([[cam.fx, 0, cam.cx], [0, cam.fy, cam.cy], [0, 0, 1]])
    px, _ = cv2.projectPoints(points, np.zeros(3), np.zeros(3), k, cam.distortion)
    px = px.reshape(-1, 2)
    uv = np.stack([2 * (px[:, 0] + 0.5) / 640 - 1, 2 * (px[:, 1] + 0.5) / 480 - 1], axis=1)
    rays = camera_rays(cam, uv)
    np.testing.assert_allclose(rays, points / np.linalg.norm(points, axis=1, keepdims=True), atol=1e-5)


def test_a_balls_range_follows_from_its_apparent_size():
    """A 30 mm ball 0.5 m away spans fx * 0.03 / 0.5 = 36 px: as a disk in a 96 px resize
    of the frame its size (sqrt(area) / width) gives the range back."""
    cam = _camera(fy=600.0)
    diameter_px = 600.0 * 0.03 / 0.5  # in the calibration's pixels
    scale = 96 / np.sqrt(640 * 480)  # a square resize keeps the area ratio
    size = np.sqrt(np.pi / 4) * diameter_px * scale / 96
    np.testing.assert_allclose(distance_from_size(cam, np.array([size, size / 2]), 0.03), [0.5, 1.0], rtol=1e-9)


def test_rays_through_one_point_meet_there_and_weights_favour_the_trusted_ray():
    target = np.array([0.2, -0.1, 0.05])
    origins = np.array([[[0.6, 0.0, 0.4], [0.2, -0.1, 0.2]]])
    dirs = target - origins
    dirs /= np.linalg.norm(dirs, axis=-1, keepdims=True)
    np.testing.assert_allclose(nearest_points(origins, dirs, np.ones((1, 2)))[0], target, atol=1e-12)
    off = origins + np.array([[[0.0, 0.01, 0.0], [0.0, 0.0, 0.0]]])  # the first ray misses by 1 cm
    equal = nearest_points(off, dirs, np.ones((1, 2)))[0]
    trusted = nearest_points(off, dirs, np.array([[1.0, 100.0]]))[0]

    def off_trusted_ray(p: np.ndarray) -> float:
        v = p - origins[0, 1]
        return float(np.linalg.norm(v - (v @ dirs[0, 1]) * dirs[0, 1]))

    assert off_trusted_ray(trusted) < 0.02 * off_trusted_ray(equal)


def test_the_simulated_cameras_calibration_is_exact(tmp_path):
    """The scene's calibration, written and read back: the front camera projects a point
    where MuJoCo's camera model does; the wrist camera, placed by the URDF's forward
    kinematics at any joint vector, is where MuJoCo puts it."""
    arm = get_arm("so101")
    model = build_arm_spec(arm).compile()
    path = tmp_path / "cams.json"
    save_rig(camera_rig(model, arm.ee_frame, (CameraSpec("front", 96, 96), CameraSpec("wrist", 64, 64)), 0.03), path)
    rig = load_rig(path)
    front, wrist = rig.cameras["front"], rig.cameras["wrist"]
    assert (front.mount, wrist.mount, wrist.width_px, rig.object_diameter_m) == ("base", "ee", 64, 0.03)
    data = mujoco.MjData(model)
    kin = Kinematics(arm)
    rng = np.random.default_rng(3)
    for _ in range(5):
        q = rng.uniform(kin.lower_rad, kin.upper_rad)
        data.qpos[:6] = q
        mujoco.mj_forward(model, data)
        pos, rot = kin.forward(q)
        cam = model.camera("wrist").id
        np.testing.assert_allclose(pos + rot @ wrist.position_m, data.cam_xpos[cam], atol=1e-9)
        looks = data.cam_xmat[cam].reshape(3, 3) @ np.array([0.0, 0.0, -1.0])  # MuJoCo looks along -z
        np.testing.assert_allclose(rot @ wrist.rotation[:, 2], looks, atol=1e-9)
    # A point on the front camera's optical axis is at the image centre (u, v = 0, 0).
    axis = camera_rays(front, np.zeros((1, 2)))[0]
    np.testing.assert_allclose(front.rotation @ axis, front.rotation[:, 2], atol=1e-12)
    cam = model.camera("front").id
    np.testing.assert_allclose(front.position_m, data.cam_xpos[cam], atol=1e-12)
    fovy = 2 * np.degrees(np.arctan(48 / front.fy))
    assert fovy == pytest.approx(model.cam_fovy[cam])
    # A camera on the arm's base link is fixed to the table; one on the elbow is neither.
    spec = build_arm_spec(arm)
    spec.body("base_link").add_camera(name="post", pos=[0.1, 0.0, 0.3])
    spec.body("lower_arm_link").add_camera(name="elbow")
    model = spec.compile()
    rig = camera_rig(model, arm.ee_frame, (CameraSpec("post", 32, 32),), 0.03)
    assert rig.cameras["post"].mount == "base"
    with pytest.raises(ValueError, match="camera elbow moves on its own"):
        camera_rig(model, arm.ee_frame, (CameraSpec("elbow", 32, 32),), 0.03)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.pop("object_diameter_m"), "KeyError 'object_diameter_m'"),
        (lambda d: d["cameras"]["front"].update(mount="table"), "mount 'table' is not one of base, ee"),
        (lambda d: d["cameras"]["front"].update(rotation=[[1, 0, 0], [0, 1, 0], [0, 0, 2]]), "not a rotation"),
        (lambda d: d["cameras"]["front"].update(fx=-1), "must be positive"),
        (lambda d: d["cameras"]["front"].update(position_m=[0, 0]), "position_m needs 3 numbers"),
        (lambda d: d.update(object_diameter_m=0), "object_diameter_m must be positive"),
    ],
)
def test_a_bad_calibration_file_is_one_line_naming_the_problem(tmp_path, edit, message):
    path = tmp_path / "cams.json"
    save_rig(CameraRig({"front": _camera()}, 0.03), path)
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=message):
        load_rig(path)


def test_a_missing_or_unreadable_calibration_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no camera calibration file"):
        load_rig(tmp_path / "none.json")
    with pytest.raises(ConfigError, match="camera calibration"):
        load_rig(tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="JSONDecodeError"):
        load_rig(tmp_path / "bad.json")
