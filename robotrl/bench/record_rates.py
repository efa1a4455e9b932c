"""`robotrl bench record`: can the recorder keep up with the cameras?

Records expert episodes of the simulated SO-101 (two 224x224 cameras, streaming h264)
twice: paced on the wall clock at 30 Hz (what a real arm does: frames written per second
must match the camera fps, with no dropped frames and no overruns) and unpaced (the
headroom: how many frames per second the pipeline can take). Frames/s count the ticks of
the episodes; the reset and dataset re-open between episodes are reported apart, as are
the seconds needed to save an episode relative to its duration.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from robotrl.core.clock import WallClock
from robotrl.core.robot import CameraSpec
from robotrl.hardware.lerobot_arm.convention import RADIANS, JointConvention
from robotrl.record.features import dataset_features
from robotrl.record.run import RecordConfig, record_dataset
from robotrl.record.writer import DatasetWriter
from robotrl.sim.env import TaskEnv
from robotrl.sim.teleop import ExpertTeleop


def measure(realtime: bool, episodes: int, task: str, image_px: int, root: Path) -> dict:
    cameras = (CameraSpec("front", image_px, image_px), CameraSpec("wrist", image_px, image_px))
    env = TaskEnv(task, cameras=cameras, clock=WallClock() if realtime else None)
    fps = round(env.spec.control_rate_hz)
    joints = JointConvention(RADIANS, env.spec.name)
    writer = DatasetWriter(root, dataset_features(env.spec, joints, env.env_state_dim), fps, joints)
    try:
        s = record_dataset(env, ExpertTeleop(env), writer, RecordConfig(episodes, 0, env.task.max_ticks, True))
    finally:
        writer.close()
        env.close()
    return {
        "mode": "realtime 30 Hz" if realtime else "unpaced",
        "camera_fps": fps,
        "episodes": s.episodes_saved,
        "frames": s.frames,
        "frames_written_per_s": s.frames / s.ticks_wall_s,
        "between_episodes_s": (s.loop_wall_s - s.ticks_wall_s) / max(s.episodes_saved, 1),
        "dropped_frames": s.dropped_frames,
        "overruns": s.overruns,
        "save_s_per_episode": s.encode_s / max(s.episodes_saved, 1),
        "save_time_over_episode_time": s.encode_s / s.recorded_s,
    }


def run(episodes: int = 3, task: str = "pick_place", image_px: int = 224) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        return [
            measure(realtime, episodes, task, image_px, Path(tmp) / name)
            for realtime, name in ((True, "paced"), (False, "unpaced"))
        ]
