"""Build the MuJoCo model of an arm on a table from its URDF.

The URDF's inertias and joints are kept; its meshes are replaced by primitives (capsules
between joint origins, boxes for the jaws) so that physics and rendering stay fast on a
CPU (322k mesh triangles render at 3-14 frames/s, primitives at hundreds). Position
actuators with servo-like gains drive every joint.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

import mujoco
import numpy as np

from robotrl.hardware.models import ArmModel, urdf_path

PHYSICS_DT_S = 1.0 / 480.0
"""MuJoCo timestep: 16 substeps per 30 Hz control tick."""

LINK_RADIUS_M = 0.018
ARM_RGBA = (0.93, 0.55, 0.15, 1.0)
JAW_RGBA = (0.25, 0.25, 0.28, 1.0)


@dataclass(frozen=True)
class ActuatorGains:
    """Position servo model for one joint (STS3215-like)."""

    kp_nm_rad: float = 50.0
    damping_nms_rad: float = 1.0
    armature_kgm2: float = 0.03
    force_limit_nm: float = 3.5


@dataclass(frozen=True)
class JawBox:
    """A box in the gripper link frame with the gripper at 0 rad (half sizes in metres)."""

    center_m: tuple[float, float, float]
    half_m: tuple[float, float, float]


# SO-101 finger geometry measured from the STL meshes, in the gripper_link frame: the
# fixed finger spans x -0.026..-0.010, the moving one x 0.008..0.027, both z -0.104..-0.05.
SO101_FIXED_JAW = JawBox((-0.016, 0.0, -0.078), (0.005, 0.011, 0.026))
SO101_MOVING_JAW = JawBox((0.014, 0.0, -0.078), (0.005, 0.011, 0.026))
GRIPPER_GAINS = ActuatorGains(kp_nm_rad=10.0, damping_nms_rad=0.3, armature_kgm2=0.005, force_limit_nm=2.0)


def _urdf_without_meshes(arm: ArmModel) -> str:
    """URDF text with visuals and collisions removed and MuJoCo compiler hints added."""
    root = ET.parse(urdf_path(arm)).getroot()
    for link in root.findall("link"):
        for tag in ("visual", "collision"):
            for element in link.findall(tag):
                link.remove(element)
    hints = ET.SubElement(root, "mujoco")
    ET.SubElement(hints, "compiler", strippath="false", fusestatic="false", discardvisual="false")
    return ET.tostring(root, encoding="unicode")


def _quat_rotate_inverse(quat: np.ndarray, vec: np.ndarray) -> np.ndarray:
    """Rotate `vec` by the inverse of unit quaternion `quat` (w, x, y, z)."""
    conj = np.array([quat[0], -quat[1], -quat[2], -quat[3]])
    out = np.zeros(3)
    mujoco.mju_rotVecQuat(out, np.asarray(vec, dtype=np.float64), conj)
    return out


def _add_link_geoms(spec: mujoco.MjSpec, arm: ArmModel) -> None:
    """Capsules from each body to its children (visual only) and the jaw boxes."""
    for body in spec.bodies[1:]:
        for child in body.bodies:
            length = float(np.linalg.norm(child.pos))
            if length < 1e-3 or child.name == arm.ee_frame:
                continue
            body.add_geom(
                type=mujoco.mjtGeom.mjGEOM_CAPSULE,
                fromto=[0, 0, 0, *child.pos],
                size=[LINK_RADIUS_M, 0, 0],
                rgba=ARM_RGBA,
                contype=0,
                conaffinity=0,
                group=1,
            )
    base = spec.bodies[1]
    base.add_geom(
        type=mujoco.mjtGeom.mjGEOM_CYLINDER,
        pos=[0, 0, 0.03],
        size=[0.05, 0.03, 0],
        rgba=ARM_RGBA,
        contype=0,
        conaffinity=0,
        group=1,
    )
    if arm.name != "so101":
        return
    gripper = spec.body("gripper_link")
    jaw = spec.body("moving_jaw_so101_v1_link")
    gripper.add_geom(
        name="fixed_jaw",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        pos=SO101_FIXED_JAW.center_m,
        size=SO101_FIXED_JAW.half_m,
        rgba=JAW_RGBA,
        friction=[1.5, 0.01, 0.001],
    )
    # Express the moving finger in the jaw body frame (jaw joint at 0 rad).
    center = _quat_rotate_inverse(jaw.quat, np.subtract(SO101_MOVING_JAW.center_m, jaw.pos))
    jaw.add_geom(
        name="moving_jaw",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        pos=center,
        quat=[jaw.quat[0], -jaw.quat[1], -jaw.quat[2], -jaw.quat[3]],
        size=SO101_MOVING_JAW.half_m,
        rgba=JAW_RGBA,
        friction=[1.5, 0.01, 0.001],
    )


def _add_actuators(spec: mujoco.MjSpec, arm: ArmModel, gains: ActuatorGains) -> None:
    for name in arm.joint_names:
        g = GRIPPER_GAINS if name == arm.joint_names[-1] else gains
        joint = spec.joint(name)
        joint.damping = [g.damping_nms_rad, 0.0, 0.0]
        joint.armature = g.armature_kgm2
        act = spec.add_actuator(name=name, target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.set_to_position(kp=g.kp_nm_rad)
        act.forcelimited = True
        act.forcerange = [-g.force_limit_nm, g.force_limit_nm]
        act.ctrllimited = True
        act.ctrlrange = list(joint.range)


def _add_world(spec: mujoco.MjSpec) -> None:
    """Table top (the z = 0 plane), light, and the fixed front camera."""
    world = spec.worldbody
    spec.option.timestep = PHYSICS_DT_S
    spec.visual.quality.shadowsize = 0
    world.add_light(pos=[0.3, 0, 1.2], dir=[0, 0, -1], diffuse=[0.8, 0.8, 0.8], castshadow=False)
    world.add_geom(
        name="table",
        type=mujoco.mjtGeom.mjGEOM_PLANE,
        size=[0.6, 0.6, 0.01],
        rgba=[0.82, 0.8, 0.76, 1],
        friction=[1.0, 0.01, 0.001],
    )
    world.add_camera(name="front", pos=[0.62, 0.0, 0.42], xyaxes=[0, 1, 0, -0.57, 0, 0.82], fovy=55)


def _add_wrist_camera(spec: mujoco.MjSpec, arm: ArmModel) -> None:
    """A camera on the gripper looking along the fingers (`ee_frame` z axis)."""
    gripper = spec.body(arm.ee_frame).parent if arm.name == "so101" else spec.body(arm.ee_frame)
    gripper.add_camera(name="wrist", pos=[0.0, 0.045, -0.02], xyaxes=[1, 0, 0, 0, 0.94, -0.34], fovy=75)


def build_arm_spec(arm: ArmModel, gains: ActuatorGains = ActuatorGains()) -> mujoco.MjSpec:
    """MjSpec of `arm` on a table with actuators and cameras "front" and "wrist".

    Callers (tasks) add their objects to `spec.worldbody` and then call `spec.compile()`.
    """
    spec = mujoco.MjSpec.from_string(_urdf_without_meshes(arm))
    _add_world(spec)
    _add_link_geoms(spec, arm)
    _add_actuators(spec, arm, gains)
    _add_wrist_camera(spec, arm)
    return spec
