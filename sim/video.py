"""Write camera frames of simulated episodes to MP4 and PNG files (an episode-runner
observer)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from robotrl.inference.runner import EpisodeResult, TickEvent


class FrameSink:
    """Collects the camera images of each tick (cameras side by side).

    Args:
        video_path: MP4 file for all episodes, or None.
        png_dir: folder for the last frame of each episode as PNG (`<prefix>_seed<seed>.png`),
            or None.
        fps: video frame rate (the control rate).
        prefix: start of the PNG names (the task).
    """

    def __init__(self, video_path: Path | None, png_dir: Path | None, fps: float, prefix: str = "episode") -> None:
        import cv2

        self._cv2 = cv2
        self.video_path, self.png_dir, self.fps, self.prefix = video_path, png_dir, fps, prefix
        self._seed = 0
        self._writer = None
        self._last: np.ndarray | None = None
        self.pngs: list[Path] = []
        if png_dir is not None:
            png_dir.mkdir(parents=True, exist_ok=True)
        if video_path is not None:
            video_path.parent.mkdir(parents=True, exist_ok=True)

    def on_episode_start(self, seed: int, instruction: str) -> None:
        self._seed = seed

    def on_tick(self, event: TickEvent) -> None:
        self.add(event.state.images)

    def on_episode_end(self, result: EpisodeResult) -> None:
        self.end_episode(f"{self.prefix}_seed{self._seed}")

    def add(self, images: dict[str, np.ndarray]) -> None:
        """One frame: camera name -> (H, W, 3) uint8 RGB, side by side in name order."""
        frame = np.concatenate([images[k] for k in sorted(images)], axis=1)
        bgr = self._cv2.cvtColor(frame, self._cv2.COLOR_RGB2BGR)
        if self.video_path is not None:
            if self._writer is None:
                fourcc = self._cv2.VideoWriter.fourcc(*"mp4v")
                self._writer = self._cv2.VideoWriter(
                    str(self.video_path), fourcc, self.fps, (bgr.shape[1], bgr.shape[0])
                )
            self._writer.write(bgr)
        self._last = bgr

    def end_episode(self, name: str) -> None:
        if self.png_dir is not None and self._last is not None:
            path = self.png_dir / f"{name}.png"
            self._cv2.imwrite(str(path), self._last)
            self.pngs.append(path)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None

    def summary(self) -> str:
        parts = []
        if self.video_path is not None:
            parts.append(f"video: {self.video_path}")
        if self.pngs:
            parts.append(f"{len(self.pngs)} PNG(s) in {self.png_dir}")
        return "; ".join(parts)
