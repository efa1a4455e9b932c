"""Pack a recording into lerobot's file layout once its session ends.

While recording, every episode is finalized and committed on its own (`commit.py`), so a
crash loses at most the episode in progress; lerobot then starts new data and video files
for the next episode. `lerobot-record` instead keeps its writers open and packs episodes
into files of up to 100 MB (data) and 200 MB (video), losing all of an open file in a
crash. `pack` gives the finished dataset lerobot's layout: lerobot's own aggregation copies
it beside itself with the episodes concatenated (videos remuxed, not re-encoded; a video
file holds at most `MAX_VIDEO_FILE_S` seconds, so lerobot's loader finds its frames), the copy
is checked (same episodes and frames), fsynced and committed, and swapped in with
`replace_dir`, so a crash while packing leaves the unpacked dataset or the packed one.

The episodes' metadata is merged after every episode instead (`merge_episode_meta`):
re-opening a dataset for the next episode reads all of it, one `datasets` load per file,
so with a file per episode each episode took longer to start than the last (measured: 2.7
s per 3 s episode at the start of a 600-episode recording, 14 s at its end, 85% of it
reading metadata).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from robotrl.fsutil import fsync_dir, fsync_file, replace_dir
from robotrl.record.commit import COMMIT_DIR, EPISODE_META, commit


def data_files(root: Path) -> list[Path]:
    """The dataset's parquet and video files (metadata and robotrl's commit excluded)."""
    return sorted(p for folder in ("data", "videos") for p in (root / folder).rglob("*") if p.is_file())


def pack(root: Path) -> tuple[int, int]:
    """Repack the dataset at `root` as lerobot-record lays one out; (files before, after).
    A dataset with at most one file per feature is left as it is."""
    from lerobot.datasets.aggregate import aggregate_datasets
    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata

    before = data_files(root)
    videos = {p.parent.parent for p in before if p.suffix == ".mp4"}  # videos/<key>/chunk-*/file-*.mp4
    if len(before) <= 1 + len(videos):
        return len(before), len(before)
    repo_id = f"local/{root.name}"
    packed, backup = root.with_name(root.name + ".packing"), root.with_name(root.name + ".unpacked")
    shutil.rmtree(packed, ignore_errors=True)
    old = LeRobotDatasetMetadata(repo_id, root=root)
    video_mb = (
        video_file_limit_mb(
            min(sum(p.stat().st_size for p in before if key in p.parents) for key in videos) / 1e6,
            old.total_frames / old.fps,
        )
        if videos
        else None
    )
    aggregate_datasets([repo_id], repo_id, roots=[root], aggr_root=packed, video_files_size_in_mb=video_mb)
    fix_episode_meta_indices(packed)
    new = LeRobotDatasetMetadata(repo_id, root=packed)
    if (new.total_episodes, new.total_frames) != (old.total_episodes, old.total_frames):
        shutil.rmtree(packed)
        raise RuntimeError(
            f"packing {root} gave {new.total_episodes} episodes / {new.total_frames} frames, "
            f"not {old.total_episodes} / {old.total_frames}; the dataset is left unpacked"
        )
    for path in packed.rglob("*"):
        if path.is_file() and COMMIT_DIR not in path.parts:
            fsync_file(path)
    commit(packed)
    replace_dir(packed, root, backup)
    return len(before), len(data_files(root))


MAX_VIDEO_FILE_S = 500.0
"""Longest packed video file (s). lerobot's decoder compares timestamps as float32, whose
spacing past 512 s (6e-5 s) nears, and past 1024 s exceeds, its 1e-4 s tolerance; 600
pick_place episodes of 96 px video (1,720 s) fit one 200 MB file and failed to load."""


def video_file_limit_mb(camera_mb: float, seconds: float) -> int:
    """Size limit (whole MB, as lerobot takes it) for packed video files of a camera with
    `camera_mb` of video over `seconds`: lerobot's default, or `MAX_VIDEO_FILE_S` of video
    at that rate if smaller (0 where that is under 1 MB: a file per episode)."""
    from lerobot.datasets.utils import DEFAULT_VIDEO_FILE_SIZE_IN_MB

    return min(DEFAULT_VIDEO_FILE_SIZE_IN_MB, int(camera_mb / max(seconds, 1e-9) * MAX_VIDEO_FILE_S))


def fix_episode_meta_indices(root: Path) -> None:
    """Point each episode's `meta/episodes/{chunk,file}_index` at the file its row is in.
    lerobot 0.6.1's aggregation keeps the source's per-episode file indices while it packs
    the rows into fewer files; the next `LeRobotDataset.resume` then numbers new files
    after them and a later aggregation looks for files that do not exist."""
    import pandas as pd

    for path in sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet")):
        chunk, file = int(path.parent.name.removeprefix("chunk-")), int(path.stem.removeprefix("file-"))
        table = pd.read_parquet(path)
        if (table["meta/episodes/chunk_index"] == chunk).all() and (table["meta/episodes/file_index"] == file).all():
            continue
        table["meta/episodes/chunk_index"], table["meta/episodes/file_index"] = chunk, file
        table.to_parquet(path, index=False)


def merge_episode_meta(root: Path) -> None:
    """Rewrite `meta/episodes`' files as one, `EPISODE_META` (atomically: a temporary file
    renamed over it; the others are removed after). Between the rename and the next commit
    the dataset is uncommitted, and `recover` restores `EPISODE_META` from the commit
    (it is one of `MUTABLE`). A dataset whose first metadata file is not `EPISODE_META` is
    left as it is."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    first = root / EPISODE_META
    paths = sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
    if len(paths) <= 1 or paths[0] != first:
        return
    tables = [pq.read_table(p) for p in paths]
    table = pa.concat_tables([t.select(tables[0].schema.names) for t in tables])
    for column in ("meta/episodes/chunk_index", "meta/episodes/file_index"):
        index = table.schema.get_field_index(column)
        table = table.set_column(index, column, pa.array([0] * len(table), table.schema.field(column).type))
    tmp = first.with_name(first.name + ".merging")
    pq.write_table(table, tmp, compression="snappy")
    fsync_file(tmp)
    tmp.replace(first)
    for path in paths[1:]:
        path.unlink()
    for folder in {p.parent for p in paths[1:]} - {first.parent}:
        if not any(folder.iterdir()):
            folder.rmdir()
    fsync_dir(first.parent)
