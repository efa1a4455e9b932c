"""`DatasetWriter`: a LeRobotDataset (v3) on disk that stays loadable after any crash.

Frames go through lerobot's own dataset API with streaming video encoding (h264), so
images are never written as PNG files first. Every saved episode is finalized at once
(parquet footers and metadata written) and committed (`robotrl.record.commit`), so a
`kill -9` loses at most the episode being recorded or saved; `--resume` returns the
folder to its last commit and re-opens it with `LeRobotDataset.resume`. So does the next
episode: its episode metadata was merged into one file (`merge_episode_meta`) and the
`datasets` cache that reading it makes lives in a temporary folder removed with it, so
neither the time to start an episode nor the cache grows with the episodes recorded.

Frames arrive in robotrl radians; the writer stores joint columns in the dataset's
`JointConvention` (lerobot's degrees on a real arm), the one place recordings convert.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from robotrl.core.errors import ConfigError, UserError
from robotrl.hardware.lerobot_arm.convention import JointConvention
from robotrl.record import features as F
from robotrl.record.commit import begin_write, commit, end_write, recover
from robotrl.record.pack import merge_episode_meta

log = logging.getLogger(__name__)

VIDEO_CODEC = "h264"
"""Fast to encode on a CPU and decodable everywhere; lerobot's default AV1 is slower."""
VIDEO_PRESET = "veryfast"
"""x264 speed preset: the encoder shares the cores with rendering and the control loop."""
VIDEO_PIX_FMT = "yuv444p"
"""Colour at full resolution: yuv420p halves the chroma, and a small red ball's position
is in its colour."""
VIDEO_CRF = 10
"""x264 quality (lower is finer). lerobot's default quality (crf 30, yuv420p) moves the
red ball's centroid in a 96 px `track` frame by 0.2-0.7 px rms (2-4 mm at the ball, about
the pixel policy's position error); yuv444p at crf 10 by 0.03-0.09 px, for about 4.5x the
bytes (0.8-0.9 kB a frame at 96 px; docs/results.md section 34)."""


def read_info(root: Path) -> dict:
    """`meta/info.json` of the dataset at `root`."""
    info = root / "meta" / "info.json"
    if not info.is_file():
        raise UserError(f"{root} is not a LeRobot dataset (no meta/info.json)")
    return json.loads(info.read_text())


def feature_mismatches(existing: dict[str, dict], wanted: dict[str, dict]) -> list[str]:
    """Differences in names, dtypes and shapes between two feature dicts (lerobot's
    default columns such as `timestamp` are ignored)."""
    defaults = {"timestamp", "frame_index", "episode_index", "index", "task_index"}
    problems = []
    for key in sorted((set(existing) | set(wanted)) - defaults):
        if key not in existing:
            problems.append(f"{key}: not in the existing dataset")
        elif key not in wanted:
            problems.append(f"{key}: in the existing dataset but not recorded now")
        else:
            a, b = existing[key], wanted[key]
            if a["dtype"] != b["dtype"] or tuple(a["shape"]) != tuple(b["shape"]):
                problems.append(f"{key}: existing {a['dtype']}{tuple(a['shape'])}, now {b['dtype']}{tuple(b['shape'])}")
            elif key in F.JOINT_KEYS and a.get("names") != b.get("names"):
                problems.append(f"{key}: existing names {a.get('names')}, now {b.get('names')} (other units)")
    return problems


class DatasetWriter:
    """Appends episodes to the LeRobotDataset at `root`.

    Args:
        root: dataset folder. Must not exist unless `resume`.
        features: from `robotrl.record.features.dataset_features` (same `convention`).
        fps: recording rate (stored in the dataset).
        convention: units of the joint columns; also gives the dataset's `robot_type`.
        resume: append to an existing dataset whose features match.
        repo_id: the dataset's hub id ("user/name"); None: "local/<folder name>".
    """

    def __init__(
        self,
        root: Path,
        features: dict[str, dict],
        fps: int,
        convention: JointConvention,
        resume: bool = False,
        repo_id: str | None = None,
    ) -> None:
        self.root = Path(root)
        self.repo_id = repo_id or f"local/{self.root.name}"
        self.features = features
        self.fps = fps
        self.convention = convention
        if resume:
            if not self.root.exists():
                raise UserError(f"--resume: {self.root} does not exist")
            if recover(self.root):
                log.warning("%s was interrupted while saving; returned it to its last saved episode", self.root)
            info = read_info(self.root)
            problems = feature_mismatches(info["features"], features)
            if int(info["fps"]) != fps:
                problems.append(f"fps: existing {info['fps']}, now {fps}")
            if info.get("robot_type") != convention.robot_type:
                problems.append(f"robot_type: existing {info.get('robot_type')}, now {convention.robot_type}")
            if problems:
                raise ConfigError(f"cannot resume {self.root}, features differ: " + "; ".join(problems))
            self._remove_interrupted_leftovers()
            commit(self.root)  # a commit of this version's MUTABLE files before the first merge
        elif self.root.exists():
            raise UserError(f"{self.root} already exists: pass --resume to append, or choose a new --root")
        self._dataset = None
        self._cache: Path | None = None
        self._fresh = not resume
        self._frames_in_episode = 0

    @property
    def num_episodes(self) -> int:
        """Episodes saved on disk."""
        if not (self.root / "meta" / "info.json").is_file():
            return 0
        return int(read_info(self.root)["total_episodes"])

    def prepare(self) -> None:
        """Open (or re-open) the dataset now, so the first frame of the next episode does
        not pay for it inside the control loop."""
        self._open()

    def add_frame(self, frame: dict[str, np.ndarray | str]) -> None:
        """One frame: every feature key plus "task" (the instruction); joints in radians."""
        stored = dict(frame)
        for key in F.JOINT_KEYS:
            if key in stored:
                stored[key] = self.convention.from_radians(np.asarray(stored[key])).astype(np.float32)
        self._open().add_frame(stored)
        self._frames_in_episode += 1

    def save_episode(self) -> float:
        """Encode, write and finalize the current episode; returns the seconds it took."""
        import datasets

        start = time.perf_counter()
        dataset = self._open()
        datasets.disable_progress_bars()  # one "Map" bar per episode otherwise
        dataset.save_episode()
        dataset.finalize()
        merge_episode_meta(self.root)
        commit(self.root)
        self._release()
        self._frames_in_episode = 0
        return time.perf_counter() - start

    def discard_episode(self) -> None:
        """Drop the frames of the current episode (re-record)."""
        if self._dataset is not None and self._frames_in_episode:
            self._dataset.clear_episode_buffer()
        self._frames_in_episode = 0

    def close(self) -> None:
        """Discard an unfinished episode and release the dataset."""
        self.discard_episode()
        if self._dataset is not None:
            self._dataset.finalize()
            self._release()
            end_write(self.root)

    def push_to_hub(self, private: bool = False) -> str:
        """Upload the saved dataset to the hub as `repo_id`; its URL. `UserError` (one line,
        the dataset stays on disk) when the hub cannot be reached or refuses it."""
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        if self.repo_id.startswith("local/"):
            raise UserError("--push-to-hub needs --repo-id user/name")
        try:
            dataset = LeRobotDataset(self.repo_id, root=self.root)
            dataset.push_to_hub(private=private, allow_patterns=["meta/**", "data/**", "videos/**", "README.md"])
        except Exception as exc:  # offline mode, no network, no token, hub refusal: all one line
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UserError(
                f"could not push {self.root} to the hub as {self.repo_id}: {reason} (the dataset is saved)"
            ) from exc
        return f"https://huggingface.co/datasets/{self.repo_id}"

    def _open(self):
        if self._dataset is not None:
            return self._dataset
        import av.logging
        from lerobot.configs.video import RGBEncoderConfig
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        # lerobot hands FFmpeg back its own stderr logger after every video, and x264
        # then prints its statistics: keep FFmpeg's native level at errors.
        av.logging.set_libav_level(av.logging.ERROR)
        encoder = RGBEncoderConfig(vcodec=VIDEO_CODEC, preset=VIDEO_PRESET, pix_fmt=VIDEO_PIX_FMT, crf=VIDEO_CRF)
        stored = None if self._fresh else stored_video_info(self.root)
        if stored is not None:  # appended videos must match those already in the files
            encoder = RGBEncoderConfig.from_video_info(stored)
        options: dict[str, Any] = dict(streaming_encoding=True, rgb_encoder=encoder, video_backend="pyav")
        if self._fresh:
            self._dataset = LeRobotDataset.create(
                self.repo_id,
                self.fps,
                self.features,
                root=self.root,
                robot_type=self.convention.robot_type,
                use_videos=True,
                metadata_buffer_size=1,
                **options,
            )
            self._fresh = False
            begin_write(self.root)
        else:
            begin_write(self.root)
            self._cache = Path(tempfile.mkdtemp(prefix="robotrl-record-cache-"))
            with datasets_cache(self._cache):
                self._dataset = LeRobotDataset.resume(self.repo_id, root=self.root, **options)
        return self._dataset

    def _release(self) -> None:
        """Drop the open dataset and the `datasets` cache its metadata was read into."""
        self._dataset = None
        if self._cache is not None:
            shutil.rmtree(self._cache, ignore_errors=True)
            self._cache = None

    def _remove_interrupted_leftovers(self) -> None:
        """Temporary frames or videos of an episode that was never saved (a crash)."""
        for leftover in (self.root / "images",):
            if leftover.exists():
                log.warning("removing %s left by an interrupted episode", leftover)
                shutil.rmtree(leftover)


def stored_video_info(root: Path) -> dict | None:
    """The encoding (codec, pixel format, crf, ...) of the dataset's videos, from the `info`
    block of its first video feature; None when it has no encoded video yet."""
    for feature in read_info(root)["features"].values():
        info = feature.get("info") or {}
        if feature.get("dtype") == "video" and info.get("video.codec"):
            return info
    return None


@contextmanager
def datasets_cache(folder: Path) -> Iterator[None]:
    """Point the `datasets` library's cache at `folder` for the duration."""
    import datasets.config

    before = datasets.config.HF_DATASETS_CACHE
    datasets.config.HF_DATASETS_CACHE = folder
    try:
        yield
    finally:
        datasets.config.HF_DATASETS_CACHE = before
