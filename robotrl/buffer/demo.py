"""Demonstrations for the replay buffer: a recorded LeRobotDataset as demo `Episode`s.

Frames are decoded once (`robotrl.record.dataset.load_frames`), images resized to the
spec's (h, w) and kept uint8. The reward of a row is the dataset's `next.reward` when it
has one, else 0; an episode succeeded when any row's `next.success` is set (False when
the dataset has no such column). Demo rows carry version -1 and no intervention flag.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robotrl.buffer.episode import Episode
from robotrl.buffer.spec import TransitionSpec
from robotrl.record import features as F


def load_demo_episodes(
    root: Path | str, spec: TransitionSpec, *, action_key: str = F.ACTION, progress: bool = False
) -> list[Episode]:
    """The episodes of the LeRobotDataset at `root`, shaped to `spec` (source "demo"). Their
    actions are the `action_key` column: "action" (what the arm executed) or
    "teleop.action" (the teleop's clean command of a `record --perturb` recording), the
    column the policy was trained on."""
    from robotrl.record.dataset import load_frames

    root = Path(root)
    size_px = max((max(h, w) for h, w in spec.cameras.values()), default=8)
    frames = load_frames(
        root,
        tuple(spec.cameras),
        size_px,
        use_env_state=spec.env_state_dim > 0,
        progress=progress,
        action_key=action_key,
    )
    if frames.states.shape[1] != spec.state_dim or frames.actions.shape[1] != spec.action_dim:
        raise ValueError(
            f"dataset {root}: state/action dims {frames.states.shape[1]}/{frames.actions.shape[1]}, "
            f"the buffer expects {spec.state_dim}/{spec.action_dim}"
        )
    env_states = frames.env_states
    if spec.env_state_dim:
        if env_states is None:  # load_frames(use_env_state=True) always reads it
            raise RuntimeError(f"dataset {root}: load_frames returned no env_state")
        if env_states.shape[1] != spec.env_state_dim:
            raise ValueError(
                f"dataset {root}: env_state dim {env_states.shape[1]}, the buffer expects {spec.env_state_dim}"
            )
    images = {cam: _to_hwc(frames.images[cam].numpy(), spec.cameras[cam]) for cam in spec.cameras}
    reward, success = _reward_success(root, frames.num_frames)
    episodes = []
    for start in np.unique(frames.episode_start):
        end = int(frames.episode_end[start])
        rows = slice(int(start), end)
        n = end - int(start)
        episodes.append(
            Episode(
                robot_id=f"demo:{root.name}",
                episode_id=len(episodes),
                ticks=np.arange(n, dtype=np.int64),
                state=frames.states[rows],
                action=frames.actions[rows],
                policy_action=frames.actions[rows],
                reward=reward[rows],
                intervention=np.zeros(n, bool),
                version=np.full(n, -1, np.int64),
                delay_ticks=np.zeros(n, np.int64),
                images={cam: img[rows] for cam, img in images.items()},
                env_state=env_states[rows] if spec.env_state_dim and env_states is not None else None,
                instruction=frames.tasks[int(frames.task_ids[start])],
                done=True,
                success=bool(success[rows].any()),
                source="demo",
            )
        )
    return episodes


def _to_hwc(chw: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(N, 3, s, s) uint8 -> (N, h, w, 3) uint8 (cv2 INTER_AREA when the size differs)."""
    hwc = np.ascontiguousarray(chw.transpose(0, 2, 3, 1))
    h, w = size
    if hwc.shape[1:3] == (h, w):
        return hwc
    import cv2

    return np.stack([cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA) for img in hwc])


def _reward_success(root: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(N,) float32 `next.reward` (zeros if absent), (N,) bool `next.success` (False if absent),
    in dataset order."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset(f"local/{root.name}", root=root, video_backend="pyav")
    table = ds.hf_dataset.with_format("numpy")
    cols = set(table.column_names)
    reward = np.asarray(table[F.REWARD], np.float32).reshape(-1) if F.REWARD in cols else np.zeros(n, np.float32)
    success = np.asarray(table[F.SUCCESS]).reshape(-1).astype(bool) if F.SUCCESS in cols else np.zeros(n, bool)
    if len(reward) != n or len(success) != n:
        raise ValueError(f"dataset {root}: reward/success columns have {len(reward)}/{len(success)} rows, frames {n}")
    return reward, success
