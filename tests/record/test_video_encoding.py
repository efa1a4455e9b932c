"""How recorded camera videos are encoded: a small object stays where it was rendered, and
a resumed dataset keeps the encoding its files were made with."""

from __future__ import annotations

import json

import numpy as np
from recorded import load, record_expert_episode

from robotrl.cli import main
from robotrl.record import features as F
from robotrl.record.writer import DatasetWriter
from robotrl.sim.env import TaskEnv


class KeepingWriter(DatasetWriter):
    """A writer that also keeps every frame's front image as it was rendered."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.front: list[np.ndarray] = []

    def add_frame(self, frame: dict[str, np.ndarray | str]) -> None:
        self.front.append(np.array(frame[F.image_key("front")]))
        super().add_frame(frame)


def red_centroid_px(image: np.ndarray) -> np.ndarray:
    """(2,) x, y of the red ball in an (H, W, 3) uint8 image: redness-weighted mean pixel."""
    rgb = image.astype(np.float64)
    weight = np.clip(rgb[..., 0] - 0.5 * (rgb[..., 1] + rgb[..., 2]) - 40, 0, None)
    ys, xs = np.mgrid[: image.shape[0], : image.shape[1]]
    return np.array([(weight * xs).sum(), (weight * ys).sum()]) / weight.sum()


def test_recorded_videos_keep_a_small_ball_where_it_was_rendered(tmp_path):
    """The recorder encodes colour at full resolution and fine quality: a 96 px `track`
    frame decodes within a grey level or so of the render and the red ball's centroid
    within 0.15 px (lerobot's default crf 30 yuv420p: 2.7 grey levels, 0.3-0.7 px)."""
    from robotrl.core.robot import CameraSpec

    env = TaskEnv("track", cameras=(CameraSpec("front", 96, 96), CameraSpec("wrist", 96, 96)))
    root = tmp_path / "track"
    writer = record_expert_episode(env, root, seed=3, max_ticks=60, writer_class=KeepingWriter)
    env.close()
    ds = load(root)
    info = json.loads((root / "meta" / "info.json").read_text())["features"][F.image_key("front")]["info"]
    assert (info["video.pix_fmt"], info["video.crf"]) == ("yuv444p", 10)
    decoded = [(ds[i][F.image_key("front")].permute(1, 2, 0).numpy() * 255).round() for i in range(len(ds))]
    rendered = np.stack(writer.front).astype(np.float64)
    assert len(decoded) == len(rendered) == 60
    assert np.abs(np.stack(decoded) - rendered).mean() < 1.2
    shift = np.stack([red_centroid_px(d) - red_centroid_px(r) for d, r in zip(decoded, writer.front)])
    assert np.sqrt((shift**2).mean(0)).max() < 0.15


def test_a_resume_appends_with_the_datasets_own_encoding(tmp_path, monkeypatch):
    """Episodes appended to a dataset encoded otherwise (lerobot's crf 30 yuv420p, as
    datasets recorded before the finer default) keep its settings, so its video files stay
    one stream and every frame loads."""
    import robotrl.record.writer as writer_module

    root = tmp_path / "old"
    args = ["record", "--task", "reach", "--root", str(root), "--image-size", "32"]
    with monkeypatch.context() as m:
        m.setattr(writer_module, "VIDEO_PIX_FMT", "yuv420p")
        m.setattr(writer_module, "VIDEO_CRF", 30)
        assert main([*args, "--episodes", "1"]) == 0
    assert main([*args, "--episodes", "1", "--resume", "--seed", "5"]) == 0
    info = json.loads((root / "meta" / "info.json").read_text())["features"][F.image_key("front")]["info"]
    assert (info["video.pix_fmt"], info["video.crf"]) == ("yuv420p", 30)
    ds = load(root)
    assert ds.num_episodes == 2
    assert ds[len(ds) - 1][F.image_key("front")].shape == (3, 32, 32)
