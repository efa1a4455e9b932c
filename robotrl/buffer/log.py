"""Append-only on-disk episode log: what the learner received survives a crash.

Layout under `root`:

- `journal/<robot>-<crc>__<episode>.jnl`: the batches of an episode in progress, one record
  each: uint32 length, uint32 crc32, then the batch as one `robotrl.wire.codec` frame
  (msgpack, arrays inline). Appended and (by default) fsynced per batch.
- `segments/<index:08d>.seg`: one committed episode. Written as `.seg.tmp`, fsynced,
  renamed atomically, directory fsynced; then its journal is removed. A segment is:
  header `<8sIIIIQ` (magic, format version, meta length, meta crc32, payload crc32,
  payload length), msgpack meta (`SegmentMeta`, via msgspec), then the payload: the raw
  C-order bytes of every row array, back to back, at the offsets the meta lists.

Recovery (`EpisodeLog.__init__`): `.seg.tmp` leftovers are deleted; journals of
episodes already committed are removed; a journal whose final batch arrived (crash
between journal and segment) is committed now; a truncated journal tail is cut off with
a warning. A segment whose checksum fails is skipped with a warning, the rest load.
No pickle anywhere.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import zlib
from pathlib import Path
from typing import BinaryIO

import msgspec
import numpy as np

from robotrl.buffer.episode import ROW_FIELDS, Episode, PartialEpisode
from robotrl.core.errors import ProtocolError
from robotrl.fsutil import fsync_dir
from robotrl.wire import codec
from robotrl.wire.messages import TransitionBatch

log = logging.getLogger(__name__)

MAGIC = b"RRLSEG\r\n"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIIIIQ")
_RECORD = struct.Struct("<II")
_NO_LIMIT = 1 << 62


class ArrayInfo(msgspec.Struct, array_like=True):
    dtype: str
    shape: list[int]
    offset: int


class SegmentMeta(msgspec.Struct):
    """What a segment holds besides the array bytes."""

    robot_id: str
    episode_id: int
    n: int
    instruction: str
    done: bool
    success: bool
    source: str
    arrays: dict[str, ArrayInfo]
    """Field name ("state", "images/front", "env_state", ...) -> where its bytes are."""


class CorruptSegment(ValueError):
    """A segment file whose magic, version, lengths or checksums do not match."""


def write_segment(path: Path, episode: Episode, *, fsync: bool = True) -> int:
    """Write `episode` to `path` via `path.seg.tmp` + atomic rename; bytes written."""
    arrays = {name: getattr(episode, name) for name in ROW_FIELDS}
    arrays |= {f"images/{cam}": img for cam, img in episode.images.items()}
    if episode.env_state is not None:
        arrays["env_state"] = episode.env_state
    infos, chunks, offset = {}, [], 0
    for name, arr in arrays.items():
        raw = np.ascontiguousarray(arr)
        infos[name] = ArrayInfo(raw.dtype.str, list(raw.shape), offset)
        chunks.append(raw.reshape(-1).view(np.uint8).data)
        offset += raw.nbytes
    meta = msgspec.msgpack.encode(
        SegmentMeta(
            episode.robot_id,
            int(episode.episode_id),
            episode.n,
            episode.instruction,
            bool(episode.done),
            bool(episode.success),
            episode.source,
            infos,
        )
    )
    payload_crc = 0
    for c in chunks:
        payload_crc = zlib.crc32(c, payload_crc)
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, len(meta), zlib.crc32(meta), payload_crc, offset)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(header)
        f.write(meta)
        for c in chunks:
            f.write(c)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)
    return _HEADER.size + len(meta) + offset


def read_segment_meta(path: Path) -> SegmentMeta:
    """The meta of the segment at `path`; `CorruptSegment` if header or meta are bad."""
    with open(path, "rb") as f:
        head = f.read(_HEADER.size)
        meta, _ = _parse_head(path, head, f.read)
    return meta


def read_segment(path: Path) -> Episode:
    """The episode in the segment at `path`; `CorruptSegment` if anything fails its check.
    Arrays are read-only views of the file's bytes."""
    data = path.read_bytes()
    view = memoryview(data)
    pos = _HEADER.size

    def take(k: int) -> memoryview:
        nonlocal pos
        out = view[pos : pos + k]
        pos += k
        return out

    meta, (payload_crc, payload_len) = _parse_head(path, view[: _HEADER.size], take)
    payload = view[pos:]
    if len(payload) != payload_len or zlib.crc32(payload) != payload_crc:
        raise CorruptSegment(f"{path}: payload checksum or length mismatch (truncated or corrupt)")
    arrays = {}
    for name, info in meta.arrays.items():
        dtype = np.dtype(info.dtype)
        count = int(np.prod(info.shape, dtype=np.int64))
        if info.offset + count * dtype.itemsize > payload_len:
            raise CorruptSegment(f"{path}: array {name} runs past the payload")
        arrays[name] = np.frombuffer(payload, dtype, count, info.offset).reshape(info.shape)
    images = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("images/")}
    try:
        return Episode(
            meta.robot_id,
            meta.episode_id,
            **{k: arrays[k] for k in ROW_FIELDS},
            images=images,
            env_state=arrays.get("env_state"),
            instruction=meta.instruction,
            done=meta.done,
            success=meta.success,
            source=meta.source,
        )
    except (KeyError, ValueError) as exc:
        raise CorruptSegment(f"{path}: inconsistent arrays ({exc})") from None


def _parse_head(path: Path, head, read) -> tuple[SegmentMeta, tuple[int, int]]:
    if len(head) != _HEADER.size:
        raise CorruptSegment(f"{path}: truncated header")
    magic, version, meta_len, meta_crc, payload_crc, payload_len = _HEADER.unpack(head)
    if magic != MAGIC:
        raise CorruptSegment(f"{path}: not a robotrl segment (bad magic)")
    if version != FORMAT_VERSION:
        raise CorruptSegment(f"{path}: segment format {version}, this robotrl reads {FORMAT_VERSION}")
    meta_bytes = read(meta_len)
    if len(meta_bytes) != meta_len or zlib.crc32(meta_bytes) != meta_crc:
        raise CorruptSegment(f"{path}: meta checksum mismatch")
    try:
        meta = msgspec.msgpack.decode(meta_bytes, type=SegmentMeta)
    except msgspec.MsgspecError as exc:
        raise CorruptSegment(f"{path}: undecodable meta ({exc})") from None
    return meta, (payload_crc, payload_len)


def _journal_name(key: tuple[str, int]) -> str:
    """File name of an episode's journal: the robot id made file-safe, plus its crc32 so
    that two ids that differ only in unsafe characters never share a file."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", key[0])
    return f"{safe}-{zlib.crc32(key[0].encode()):08x}__{key[1]}.jnl"


def read_journal(path: Path) -> tuple[list[TransitionBatch], int]:
    """(the intact records of a journal, bytes they span); a truncated or corrupt tail
    is reported with a warning."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        if pos + _RECORD.size > len(data):
            break
        length, crc = _RECORD.unpack_from(data, pos)
        body = data[pos + _RECORD.size : pos + _RECORD.size + length]
        if len(body) != length or zlib.crc32(body) != crc:
            break
        try:
            msg = codec.decode(body)
        except ProtocolError:
            break
        if not isinstance(msg, TransitionBatch):
            break
        out.append(msg)
        pos += _RECORD.size + length
    if pos < len(data):
        log.warning(
            "journal %s: dropped %d bytes of a truncated or corrupt record at byte %d", path, len(data) - pos, pos
        )
    return out, pos


class EpisodeLog:
    """The log at `root` (created if missing), recovered on construction (module docstring).

    `fsync`: fsync every journal append and every commit (durable against power loss,
    not only process crashes). Counters cover committed episodes with intact meta.
    """

    def __init__(self, root: Path | str, *, fsync: bool = True) -> None:
        self.root = Path(root)
        self.fsync = fsync
        self.segments_dir, self.journal_dir = self.root / "segments", self.root / "journal"
        self.segments_dir.mkdir(parents=True, exist_ok=True)
        self.journal_dir.mkdir(parents=True, exist_ok=True)
        self._metas: dict[Path, SegmentMeta] = {}
        self._committed: set[tuple[str, int]] = set()
        self._partials: dict[tuple[str, int], PartialEpisode] = {}
        self._journals: dict[tuple[str, int], BinaryIO] = {}
        self.committed_transitions = 0
        self.disk_bytes = 0
        self._next_index = 0
        self._scan_segments()
        self._recover_journals()

    @property
    def committed_episodes(self) -> int:
        return len(self._metas)

    def _scan_segments(self) -> None:
        for tmp in self.segments_dir.glob("*.seg.tmp"):
            tmp.unlink()
        for path in sorted(self.segments_dir.glob("*.seg")):
            self._next_index = max(self._next_index, int(path.stem) + 1) if path.stem.isdigit() else self._next_index
            try:
                meta = read_segment_meta(path)
            except (CorruptSegment, OSError) as exc:
                log.warning("skipping segment: %s", exc)
                continue
            self._add_meta(path, meta)

    def _add_meta(self, path: Path, meta: SegmentMeta) -> None:
        self._metas[path] = meta
        self._committed.add((meta.robot_id, meta.episode_id))
        self.committed_transitions += meta.n
        self.disk_bytes += path.stat().st_size

    def _recover_journals(self) -> None:
        for path in sorted(self.journal_dir.glob("*.jnl")):
            batches, intact = read_journal(path)
            key = (batches[0].robot_id, batches[0].episode_id) if batches else None
            if key is None or key in self._committed:
                path.unlink()
                continue
            if intact < path.stat().st_size:
                os.truncate(path, intact)  # so that appends after the reopen stay readable
            partial = self._partials[key] = PartialEpisode(*key)
            for b in batches:
                partial.add(b)
            if partial.last is not None:
                self._commit(partial)

    def recover(self, online_capacity: int | None = None) -> tuple[list[Episode], list[Episode]]:
        """(committed episodes in commit order, in-progress partial episodes).

        `online_capacity`: load only the newest online episodes that fill this many
        transitions (older ones stay on disk, counted but not read). Segments whose
        payload fails its checksum are skipped with a warning and dropped from the counts.
        """
        chosen, online_rows = [], 0
        for path, meta in reversed(list(self._metas.items())):
            if meta.source == "online" and online_capacity is not None and online_rows >= online_capacity:
                continue
            online_rows += meta.n if meta.source == "online" else 0
            chosen.append(path)
        episodes = []
        for path in reversed(chosen):
            try:
                episodes.append(read_segment(path))
            except (CorruptSegment, OSError) as exc:
                log.warning("skipping segment: %s", exc)
                meta = self._metas.pop(path)
                self.committed_transitions -= meta.n
        partials = [p.to_episode() for p in self._partials.values() if p.batches]
        return episodes, partials

    def append(self, batch: TransitionBatch) -> Episode | None:
        """Journal `batch`; if it ends its episode, commit the episode and return it.
        Batches of an already committed episode and exact duplicates are ignored."""
        key = (batch.robot_id, int(batch.episode_id))
        if key in self._committed:
            log.warning("episode %s is already committed: batch at seq %d ignored", key, batch.seq)
            return None
        partial = self._partials.setdefault(key, PartialEpisode(*key))
        if not partial.add(batch):
            return None
        self._journal(key, batch)
        return self._commit(partial) if batch.episode_done else None

    def _journal(self, key: tuple[str, int], batch: TransitionBatch) -> None:
        f = self._journals.get(key)
        if f is None:
            f = self._journals[key] = open(self.journal_dir / _journal_name(key), "ab")
            if self.fsync:
                fsync_dir(self.journal_dir)
        (body,) = codec.encode(batch, inline_limit_bytes=_NO_LIMIT)
        f.write(_RECORD.pack(len(body), zlib.crc32(body)))
        f.write(body)
        f.flush()
        if self.fsync:
            os.fsync(f.fileno())

    def _commit(self, partial: PartialEpisode) -> Episode:
        episode = partial.to_episode()
        path = self.segments_dir / f"{self._next_index:08d}.seg"
        self._next_index += 1
        write_segment(path, episode, fsync=self.fsync)
        meta = read_segment_meta(path)
        self._add_meta(path, meta)
        del self._partials[partial.key]
        f = self._journals.pop(partial.key, None)
        if f is not None:
            f.close()
        (self.journal_dir / _journal_name(partial.key)).unlink(missing_ok=True)
        return episode

    def close(self) -> None:
        """Close open journal files (their episodes stay in progress on disk)."""
        for f in self._journals.values():
            f.close()
        self._journals.clear()
