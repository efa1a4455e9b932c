"""The toy dataset the training tests share: two instructions, four 20-tick episodes from
one start pose, written with the recorder's layout (two 32 px cameras, privileged state)."""

from __future__ import annotations

import numpy as np

from robotrl.core.policy import PolicyObservation
from robotrl.core.robot import CameraSpec, RobotSpec
from robotrl.hardware.lerobot_arm.convention import RADIANS, JointConvention
from robotrl.record import features as F
from robotrl.record.writer import DatasetWriter

TINY = {
    "width": 32,
    "cnn_channels": (8, 16, 16),
    "expert_hidden": 64,
    "expert_blocks": 2,
    "horizon": 6,
    "execute_steps": 3,
    "image_size_px": 32,
    "flow_steps": 4,
    "max_words": 6,
}
"""A policy small enough to train in seconds."""
S0 = np.array([0.0, -1.2, 1.1, 1.3, 0.0, 0.0])
SIM_JOINTS = JointConvention(RADIANS, "so101")
INSTRUCTIONS = ("move left", "move right")
EPISODE_TICKS = 20


def toy_spec() -> RobotSpec:
    names = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
    return RobotSpec(
        "so101",
        names,
        -3 * np.ones(6),
        3 * np.ones(6),
        5 * np.ones(6),
        30.0,
        cameras=(CameraSpec("front", 32, 32), CameraSpec("wrist", 32, 32)),
    )


def toy_image(t: int, direction: float) -> np.ndarray:
    """A bright square that moves with time (the same for both instructions)."""
    img = np.full((32, 32, 3), 60, np.uint8)
    x = 2 + t
    img[12:20, x : x + 6] = (230, 40, 40)
    return img


def write_toy_dataset(root, episodes: int = 4) -> None:
    """Episodes alternate between the instructions; the arm moves joint 0 left (+) or
    right (-) from the same start, so only the instruction tells the first chunk apart."""
    writer = DatasetWriter(root, F.dataset_features(toy_spec(), SIM_JOINTS, env_state_dim=3), 30, SIM_JOINTS)
    for ep in range(episodes):
        direction = 1.0 if ep % 2 == 0 else -1.0
        state = S0.copy()
        for t in range(EPISODE_TICKS):
            action = state + np.array([0.04 * direction, 0.01, -0.01, 0.0, 0.0, 0.0])
            env_state = np.array([t / EPISODE_TICKS, direction, 0.0], np.float32)
            _add_frame(writer, t, state, action, toy_image(t, direction), INSTRUCTIONS[ep % 2], env_state)
            state = action
        writer.save_episode()
    writer.close()


def motion_image(x: int) -> np.ndarray:
    """The bright square with its left edge at column `x`."""
    img = np.full((32, 32, 3), 60, np.uint8)
    img[12:20, x : x + 6] = (230, 40, 40)
    return img


def motion_x(t: int, direction: float) -> int:
    """The square's column at tick t: 1 px a tick rightward (+1) or leftward (-1) over
    the same columns 4..23, so one frame does not tell the direction."""
    return 4 + t if direction > 0 else 23 - t


TURN_TICK = 10


def turn_x(t: int, direction: float) -> int:
    """The square's column at tick t: for +1 it moves left until `TURN_TICK`, then right
    at 1 px a tick; for -1 it moves right all along. From the turn on both are at 4 + t,
    so at ticks TURN_TICK + G .. TURN_TICK + 2 G - 1 only the frame 2 G back tells them apart."""
    return abs(t - TURN_TICK) + TURN_TICK + 4 if direction > 0 else 4 + t


def write_motion_dataset(root, episodes: int = 4, path=motion_x) -> None:
    """One instruction and a still arm (state always S0); the action offsets joint 0 by
    +-0.3 rad with the episode's direction, which only the square's motion shows
    (`path(t, direction)`: its column at tick t)."""
    writer = DatasetWriter(root, F.dataset_features(toy_spec(), SIM_JOINTS, env_state_dim=3), 30, SIM_JOINTS)
    for ep in range(episodes):
        direction = 1.0 if ep % 2 == 0 else -1.0
        action = S0 + np.array([0.3 * direction, 0.0, 0.0, 0.0, 0.0, 0.0])
        for t in range(EPISODE_TICKS):
            image = motion_image(path(t, direction))
            _add_frame(writer, t, S0, action, image, INSTRUCTIONS[0], np.zeros(3, np.float32))
        writer.save_episode()
    writer.close()


def _add_frame(writer, t: int, state, action, image, instruction: str, env_state) -> None:
    writer.add_frame(
        {
            F.STATE: state.astype(np.float32),
            F.ACTION: action.astype(np.float32),
            F.TELEOP_ACTION: action.astype(np.float32),
            F.MEASURED_TIME: np.array([t / 30], np.float32),
            F.REWARD: np.zeros(1, np.float32),
            F.SUCCESS: np.array([t == EPISODE_TICKS - 1]),
            F.ENV_STATE: env_state,
            F.image_key("front"): image,
            F.image_key("wrist"): image[::-1].copy(),
            F.CAMERA_AGE: np.zeros(2, np.float32),
            "task": instruction,
        }
    )


def toy_obs(instruction: str, t: int = 0, delay: int = 0) -> PolicyObservation:
    return PolicyObservation(
        state_rad=S0.copy(),
        tick=t,
        instruction=instruction,
        delay_ticks=delay,
        images={"front": toy_image(t, 1.0), "wrist": toy_image(t, 1.0)[::-1].copy()},
    )
