"""Scenarios: the physics and sensing a task runs under.

`nominal` (A) is the model as built; `shifted` (B) changes friction, masses, actuator
gains and damping, observation noise and the front camera pose, for sim-to-sim tests;
`camera_lag` is `nominal` with every camera frame a control tick older than the joints
(on the twin, through lerobot's cameras, frames are 14-16 ms old at the median when
read; a real camera adds its own delivery latency).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import mujoco
import numpy as np

from robotrl.core.errors import ConfigError


@dataclass(frozen=True)
class Scenario:
    """Multipliers and offsets applied to a compiled model; 1.0 / 0.0 change nothing."""

    name: str = "nominal"
    friction_scale: float = 1.0
    """Multiplies every geom's sliding friction."""
    mass_scale: float = 1.0
    """Multiplies every body's mass and inertia (arm and objects)."""
    kp_scale: float = 1.0
    """Multiplies the position actuators' stiffness."""
    damping_scale: float = 1.0
    """Multiplies joint damping."""
    obs_noise_rad: float = 0.0
    """Std of Gaussian noise added to measured joint positions, radians."""
    camera_shift_m: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Offset added to the front camera position, metres."""
    camera_latency_ticks: int = 0
    """Frames show the scene this many control ticks before the reading, as a real
    camera's arrive late (`SimRobot`); the joints are read now."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_scale") and not value > 0:
                raise ConfigError(f"Scenario.{f.name} must be > 0, got {value}")
        if self.obs_noise_rad < 0 or self.camera_latency_ticks < 0:
            raise ConfigError("Scenario.obs_noise_rad and camera_latency_ticks must be >= 0")

    def apply(self, model: mujoco.MjModel) -> None:
        """Change `model` in place (call once, right after compiling)."""
        model.geom_friction[:, 0] *= self.friction_scale
        model.body_mass[:] *= self.mass_scale
        model.body_inertia[:] *= self.mass_scale
        model.actuator_gainprm[:, 0] *= self.kp_scale
        model.actuator_biasprm[:, 1] *= self.kp_scale  # position servo: bias = -kp * q
        model.dof_damping[:] *= self.damping_scale
        cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "front")
        if cam >= 0:
            model.cam_pos[cam] += np.asarray(self.camera_shift_m)


SCENARIOS: dict[str, Scenario] = {
    "nominal": Scenario(),
    "shifted": Scenario(
        name="shifted",
        friction_scale=0.6,
        mass_scale=1.3,
        kp_scale=0.7,
        damping_scale=1.5,
        obs_noise_rad=0.004,
        camera_shift_m=(0.02, -0.03, 0.02),
    ),
    "camera_lag": Scenario(name="camera_lag", camera_latency_ticks=1),
}


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ConfigError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
