"""Off-screen camera rendering for the simulated arm (shadows and reflections off)."""

from __future__ import annotations

import mujoco
import numpy as np

from robotrl.core.robot import CameraSpec


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
