"""Off-screen camera rendering for the simulated arm (shadows and reflections off)."""

from __future__ import annotations

import mujoco
import numpy as np

from robotrl.core.robot import CameraSpec
from robotrl.hardware.camera_geometry import CameraCalibration, CameraRig


class CameraRenderer:
    """Renders each `CameraSpec` (by camera name in the model) to (H, W, 3) uint8."""

    def __init__(self, model: mujoco.MjModel, cameras: tuple[CameraSpec, ...]) -> None:
        for cam in cameras:
            if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, cam.name) < 0:
                raise ValueError(f"the model has no camera {cam.name!r}")
        self.cameras = cameras
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}
        for cam in cameras:
            size = (cam.height_px, cam.width_px)
            if size not in self._renderers:
                renderer = mujoco.Renderer(model, *size)
                renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
                renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
                self._renderers[size] = renderer

    def render(self, data: mujoco.MjData) -> dict[str, np.ndarray]:
        frames = {}
        for cam in self.cameras:
            renderer = self._renderers[(cam.height_px, cam.width_px)]
            renderer.update_scene(data, camera=cam.name)
            frames[cam.name] = renderer.render()
        return frames

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()


def camera_rig(
    model: mujoco.MjModel, ee_frame: str, cameras: tuple[CameraSpec, ...], object_diameter_m: float
) -> CameraRig:
    """The exact calibration of the model's `cameras` at their sizes: a camera on a body
    fixed to the world is mounted on "base" (MuJoCo's world frame is the URDF's root:
    `build_arm_spec`), one on a body rigid with `ee_frame` (the wrist camera) on "ee";
    ValueError for any other."""
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    ee = model.body(ee_frame).id
    ee_rot, ee_pos = data.xmat[ee].reshape(3, 3), data.xpos[ee]
    rig = {}
    for spec in cameras:
        cam = model.camera(spec.name)
        rot = data.cam_xmat[cam.id].reshape(3, 3) @ np.diag([1.0, -1.0, -1.0])  # MuJoCo looks along -z, y up
        pos = data.cam_xpos[cam.id]
        body = int(cam.bodyid[0])
        on_base = _rigid_below(model, 0, body)
        if not on_base:
            if not _rigid_below(model, body, ee):
                raise ValueError(f"camera {spec.name} moves on its own: neither on the table nor on {ee_frame}")
            rot, pos = ee_rot.T @ rot, ee_rot.T @ (pos - ee_pos)
        fy = spec.height_px / 2 / np.tan(np.radians(float(cam.fovy[0])) / 2)
        rig[spec.name] = CameraCalibration(
            width_px=spec.width_px,
            height_px=spec.height_px,
            fx=fy,
            fy=fy,
            cx=(spec.width_px - 1) / 2,
            cy=(spec.height_px - 1) / 2,
            mount="base" if on_base else "ee",
            position_m=pos.copy(),
            rotation=rot.copy(),
        )
    return CameraRig(rig, object_diameter_m)


def _rigid_below(model: mujoco.MjModel, ancestor: int, body: int) -> bool:
    """Whether `body` is `ancestor` or hangs from it with no joint between them."""
    while body != ancestor:
        if body == 0 or model.body_jntnum[body] > 0:
            return False
        body = int(model.body_parentid[body])
    return True
