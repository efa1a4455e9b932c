"""LeRobotDataset feature layout of a robotrl recording.

| key | dtype | shape | what |
|---|---|---|---|
| observation.state | float32 | (J,) | measured joint positions |
| observation.images.<cam> | video | (H, W, 3) | camera frames |
| action | float32 | (J,) | the **executed** joint target (what `SafeRobot.command` returned) |
| teleop.action | float32 | (J,) | what the teleop device asked for, before safety |
| sim.environment_state | float32 | (E,) | privileged task features (sim only), metres |
| measured_time_s | float32 | (1,) | measured time since the episode started, seconds |
| camera_age_s | float32 | (C,) | seconds each camera's frame was captured before measured_time_s |
| next.reward, next.success | float32, bool | (1,) | task reward and success after the step (sim) |

Joint columns are absolute positions in the dataset's `JointConvention`
(`hardware/lerobot_arm/convention.py`): lerobot's degrees and gripper 0..100 with names
`<joint>.pos` on a real arm, as `lerobot-record` writes them; radians with the URDF joint
names in simulation. Never normalised.

lerobot's trainer takes every `observation.*` feature as a policy input and every
`action*` one as an output, so only what a real arm has is stored under those prefixes: the
simulator's privileged state, the teleop's request and the clock live outside them.
LeRobot's own `timestamp` column stays at frame_index / fps, as its video decoder needs; the
measured time lives beside it, so slow loops are visible instead of hidden. So do the
frames' ages (`RobotState.image_ages_s`: lerobot's capture stamps on a real arm, 0 where
frames are rendered at the reading, NaN where unknown): a gripper camera's frame a tick
older than the joints stored with it is placed by the joints of its own instant
(`robotrl.record.ball`).
"""

from __future__ import annotations

from robotrl.core.robot import RobotSpec
from robotrl.hardware.lerobot_arm.convention import JointConvention

CAMERA_CALIBRATION = "meta/camera_calibration.json"
"""Where in a dataset `robotrl record` keeps its cameras' calibration
(`robotrl.hardware.camera_geometry`; the simulated arm's are exact), relative to the root."""
STATE = "observation.state"
ACTION = "action"
TELEOP_ACTION = "teleop.action"
ENV_STATE = "sim.environment_state"
MEASURED_TIME = "measured_time_s"
CAMERA_AGE = "camera_age_s"
REWARD = "next.reward"
SUCCESS = "next.success"
JOINT_KEYS = (STATE, ACTION, TELEOP_ACTION)
"""Columns of joint values, stored in the dataset's convention."""

LEGACY_KEYS = {
    ENV_STATE: "observation.environment_state",
    TELEOP_ACTION: "action.teleop",
    MEASURED_TIME: "observation.measured_time_s",
}
"""Names older robotrl datasets used (read, never written)."""


def image_key(camera: str) -> str:
    return f"observation.images.{camera}"


def stored_key(features: dict, key: str) -> str:
    """`key`, or its legacy name where an older robotrl dataset stored it that way."""
    legacy = LEGACY_KEYS.get(key)
    return legacy if legacy is not None and key not in features and legacy in features else key


def dataset_features(
    spec: RobotSpec, convention: JointConvention, env_state_dim: int = 0, use_videos: bool = True
) -> dict[str, dict]:
    """The `features` argument of `LeRobotDataset.create` for a robot with `spec`."""
    joints = convention.names
    if len(joints) != spec.num_joints:
        raise ValueError(f"{convention.model} has {len(joints)} joints, the robot {spec.num_joints}")
    features: dict[str, dict] = {
        STATE: {"dtype": "float32", "shape": (len(joints),), "names": joints},
        ACTION: {"dtype": "float32", "shape": (len(joints),), "names": joints},
        TELEOP_ACTION: {"dtype": "float32", "shape": (len(joints),), "names": joints},
        MEASURED_TIME: {"dtype": "float32", "shape": (1,), "names": None},
        REWARD: {"dtype": "float32", "shape": (1,), "names": None},
        SUCCESS: {"dtype": "bool", "shape": (1,), "names": None},
    }
    if env_state_dim:
        features[ENV_STATE] = {"dtype": "float32", "shape": (env_state_dim,), "names": None}
    if spec.cameras:
        names = [cam.name for cam in spec.cameras]
        features[CAMERA_AGE] = {"dtype": "float32", "shape": (len(names),), "names": names}
    for cam in spec.cameras:
        features[image_key(cam.name)] = {
            "dtype": "video" if use_videos else "image",
            "shape": (cam.height_px, cam.width_px, 3),
            "names": ["height", "width", "channels"],
        }
    return features
