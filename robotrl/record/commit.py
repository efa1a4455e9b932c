"""Crash-safe commits of a LeRobotDataset folder.

lerobot writes every episode into new data/video/metadata files, but rewrites
`meta/info.json`, `meta/stats.json` and `meta/tasks.parquet` in place, non-atomically,
and robotrl merges the episodes' metadata into the first metadata file after each episode
(`robotrl.record.pack.merge_episode_meta`).
After each saved episode we therefore store a commit: copies of those files plus the list
of every file in the dataset, written to a temporary folder, fsynced and renamed into
place. A marker (`begin_write`) says robotrl is writing: from opening the dataset for an
episode until that episode's commit, or until the writer closes.

`recover` repairs a dataset only when the marker says robotrl was interrupted: the mutable
files go back to the last commit and files written since are removed. Without the marker,
a dataset that differs from the last commit was changed by another tool (say
`lerobot-edit-dataset`, which rewrites files in place): its state is adopted as the new
commit, never reverted.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from robotrl.fsutil import fsync_file, read_json, replace_dir

log = logging.getLogger(__name__)

COMMIT_DIR = ".robotrl_commit"
WRITING = "writing"
"""Marker file in COMMIT_DIR while robotrl has uncommitted writes in the dataset."""
EPISODE_META = "meta/episodes/chunk-000/file-000.parquet"
"""The first episode-metadata file: every episode's row once `merge_episode_meta` ran."""
MUTABLE = ("meta/info.json", "meta/stats.json", "meta/tasks.parquet", EPISODE_META)


def _dataset_files(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and COMMIT_DIR not in p.relative_to(root).parts
    )


def commit(root: Path) -> None:
    """Record the dataset's current state as the last good one (atomic)."""
    base = root / COMMIT_DIR
    tmp, current, old = base / "tmp", base / "current", base / "old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for rel in MUTABLE:
        if (root / rel).is_file():
            target = tmp / rel.replace("/", "__")
            shutil.copyfile(root / rel, target)
            fsync_file(target)
    manifest = tmp / "manifest.json"
    manifest.write_text(json.dumps(_dataset_files(root)))
    fsync_file(manifest)
    replace_dir(tmp, current, old)
    end_write(root)


def begin_write(root: Path) -> None:
    """Mark `root` as being written by robotrl (until `commit` or `end_write`)."""
    marker = root / COMMIT_DIR / WRITING
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    fsync_file(marker)


def end_write(root: Path) -> None:
    """robotrl's writes to `root` are all committed or abandoned cleanly."""
    (root / COMMIT_DIR / WRITING).unlink(missing_ok=True)


def recover(root: Path) -> bool:
    """Return `root` to its last commit if robotrl was interrupted while writing it; True
    if anything had to be repaired. A dataset without a commit is left as it is; one
    changed by another tool since the last commit is adopted (committed as it is)."""
    base = root / COMMIT_DIR
    snapshot = base / "current" if (base / "current").is_dir() else base / "old"
    if not (snapshot / "manifest.json").is_file():
        return False
    committed = set(json.loads((snapshot / "manifest.json").read_text()))
    if not (base / WRITING).is_file():
        if _differs(root, snapshot, committed):
            log.info("%s was changed by another tool since robotrl's last commit: adopting it as it is", root)
            commit(root)
        return False
    repaired = False
    for rel in _dataset_files(root):
        if rel not in committed:
            log.warning("removing %s, written by an interrupted save", rel)
            (root / rel).unlink()
            repaired = True
    for rel in MUTABLE:
        saved = snapshot / rel.replace("/", "__")
        if saved.is_file() and (not (root / rel).is_file() or saved.read_bytes() != (root / rel).read_bytes()):
            log.warning("restoring %s from the last commit", rel)
            shutil.copyfile(saved, root / rel)
            repaired = True
    for folder in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
        if COMMIT_DIR not in folder.relative_to(root).parts and not any(folder.iterdir()):
            folder.rmdir()
    missing = [rel for rel in committed if not (root / rel).is_file()]
    if missing:
        raise FileNotFoundError(f"{root}: committed files are missing: {', '.join(missing[:5])}")
    end_write(root)
    return repaired


def saved_episodes(root: Path) -> int:
    """Episodes of the dataset at `root` that survive a crash: while robotrl's marker says
    it is writing, those of its last commit (an interrupted save is rolled back on resume),
    else `meta/info.json`'s `total_episodes`; 0 when there is no dataset (yet)."""
    info = root / "meta" / "info.json"
    if (root / COMMIT_DIR / WRITING).is_file():
        base = root / COMMIT_DIR
        snapshot = base / "current" if (base / "current").is_dir() else base / "old"
        info = snapshot / "meta__info.json"
    data = read_json(info) or {}
    total = data.get("total_episodes", 0)
    return total if isinstance(total, int) else 0


def _differs(root: Path, snapshot: Path, committed: set[str]) -> bool:
    """Whether `root`'s files or mutable files differ from the commit in `snapshot`."""
    if set(_dataset_files(root)) != committed:
        return True
    for rel in MUTABLE:
        saved = snapshot / rel.replace("/", "__")
        if saved.is_file() != (root / rel).is_file():
            return True
        if saved.is_file() and saved.read_bytes() != (root / rel).read_bytes():
            return True
    return False
