"""LeRobotDataset feature layout of a robotrl recording.

| key | dtype | shape | what |
|---|---|---|---|
| observation.state | float32 | (J,) | measured joint positions, radians |
| observation.images.<cam> | video | (H, W, 3) | camera frames |
| observation.environment_state | float32 | (E,) | privileged task features (sim only), metres |
| action | float32 | (J,) | the **executed** joint target (what `SafeRobot.command` returned), radians |
| action.teleop | float32 | (J,) | what the teleop device asked for, before safety |
| observation.measured_time_s | float32 | (1,) | measured time since the episode started, seconds |
| next.reward, next.success | float32, bool | (1,) | task reward and success after the step (sim) |

Actions are absolute joint positions in robot units (radians), never normalised.
LeRobot's own `timestamp` column stays at frame_index / fps, as its video decoder needs;
the measured time lives beside it, so slow loops are visible instead of hidden.
"""

from __future__ import annotations

from robotrl.core.robot import RobotSpec

STATE = "observation.state"
ENV_STATE = "observation.environment_state"
ACTION = "action"
TELEOP_ACTION = "action.teleop"
MEASURED_TIME = "observation.measured_time_s"
REWARD = "next.reward"
SUCCESS = "next.success"


def image_key(camera: str) -> str:
    return f"observation.images.{camera}"


def dataset_features(spec: RobotSpec, env_state_dim: int = 0, use_videos: bool = True) -> dict[str, dict]:
    """The `features` argument of `LeRobotDataset.create` for a robot with `spec`."""
    joints = list(spec.joint_names)
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
    for cam in spec.cameras:
        features[image_key(cam.name)] = {
            "dtype": "video" if use_videos else "image",
            "shape": (cam.height_px, cam.width_px, 3),
            "names": ["height", "width", "channels"],
        }
    return features
