"""`robotrl bench buffer`: the online replay buffer against lerobot's `ReplayBuffer`.

Same synthetic data for both: episodes of `episode_len` rows, 6 joints, 3 env-state
features, two uint8 cameras of `image_px` squared pixels, streamed in batches of
`batch_rows` (the executor's every_ticks). Measured:

- in: transitions/s through `OnlineBuffer.add` (spec check, journal append with fsync,
  commit of each finished episode: segment write, fsync, rename) vs `ReplayBuffer.add`
  one transition at a time (RAM only, images as float32 CHW, how lerobot's actor feeds it);
- out: batches/s of B=256 transitions (`sample_transitions`, and `sample_chunks` with
  H=16) vs `ReplayBuffer.sample` (use_drq off: no augmentation on either side);
- bytes per transition in RAM (allocated slots) and on disk (segments);
- recovery: seconds to reopen the buffer and rebuild the cache from the log;
- kill -9: a writer subprocess is killed while streaming; every episode it reported
  committed must be back, byte for byte (lost must be 0). lerobot's buffer lives in RAM
  and is written out only at checkpoints (`to_lerobot_dataset`), so a kill loses
  everything since the last checkpoint.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from robotrl.buffer.online import OnlineBuffer
from robotrl.buffer.spec import TransitionSpec
from robotrl.wire.messages import TransitionBatch

STATE_DIM, ENV_DIM = 6, 3
CAMERAS = ("front", "wrist")


def bench_spec(image_px: int) -> TransitionSpec:
    return TransitionSpec(STATE_DIM, STATE_DIM, {c: (image_px, image_px) for c in CAMERAS}, ENV_DIM)


def make_episode(episode: int, n: int, image_px: int, batch_rows: int, robot: str = "bench") -> list[TransitionBatch]:
    """The batches of one synthetic episode; rows are a pure function of (episode, t)."""
    rng = np.random.default_rng(episode)
    state = rng.normal(size=(n, STATE_DIM)).astype(np.float32)
    action = state + 0.01
    images = {c: rng.integers(0, 256, (n, image_px, image_px, 3), dtype=np.uint8) for c in CAMERAS}
    env = rng.normal(size=(n, ENV_DIM)).astype(np.float32)
    out = []
    for s in range(0, n, batch_rows):
        e = min(s + batch_rows, n)
        out.append(
            TransitionBatch(
                robot,
                episode,
                s,
                np.arange(s, e),
                state[s:e],
                action[s:e],
                action[s:e],
                np.full(e - s, float(e == n), np.float32),
                np.zeros(e - s, bool),
                np.full(e - s, episode, np.int64),
                np.zeros(e - s, np.int64),
                {c: v[s:e] for c, v in images.items()},
                env[s:e],
                "bench",
                episode_done=e == n,
                success=True,
            )
        )
    return out


def _ours(
    root: Path,
    episodes: list[list[TransitionBatch]],
    spec: TransitionSpec,
    batch_size: int,
    sample_s: float,
    fsync: bool,
) -> dict:
    total = sum(len(b.ticks) for ep in episodes for b in ep)
    buf = OnlineBuffer(root, spec, capacity=total, fsync=fsync)
    t0 = time.perf_counter()
    for ep in episodes:
        for b in ep:
            buf.add(b)
    add_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    version = len(episodes)
    tr = _rate(lambda: buf.sample_transitions(batch_size, version, rng), sample_s)
    ch = _rate(lambda: buf.sample_chunks(batch_size, 16, version, rng), sample_s)
    buf.close()
    reopened = OnlineBuffer(root, spec, capacity=total)
    if len(reopened) != total:
        raise RuntimeError(f"reopened buffer holds {len(reopened)} transitions, {total} were added")
    return {
        "add_transitions_per_s": total / add_s,
        "sample_batches_per_s": tr,
        "sample_chunk_batches_per_s": ch,
        "ram_bytes_per_transition": buf.cache.bytes_per_transition,
        "disk_bytes_per_transition": buf.log.disk_bytes / buf.committed_transitions,
        "recovery_s": reopened.recovery_s,
        "transitions": total,
    }


def _lerobot(episodes: list[list[TransitionBatch]], batch_size: int, sample_s: float) -> dict:
    import torch
    from lerobot.rl.buffer import ReplayBuffer

    total = sum(len(b.ticks) for ep in episodes for b in ep)
    keys = ["observation.state", "observation.environment_state"] + [f"observation.images.{c}" for c in CAMERAS]
    buf = ReplayBuffer(total, device="cpu", state_keys=keys, use_drq=False, storage_device="cpu")
    t0 = time.perf_counter()
    for ep in episodes:
        rows = [_lerobot_rows(b, torch) for b in ep]
        flat = [r for batch in rows for r in batch]
        for i, (state, action, reward) in enumerate(flat):
            nxt = flat[min(i + 1, len(flat) - 1)][0]
            buf.add(state, action, reward, nxt, done=i == len(flat) - 1, truncated=False)
    add_s = time.perf_counter() - t0
    rate = _rate(lambda: buf.sample(batch_size), sample_s)
    tensors = [
        *buf.states.values(),
        *buf.next_states.values(),
        buf.actions,
        buf.rewards,
        buf.dones,
        buf.truncateds,
        buf.episode_ends,
    ]
    return {
        "add_transitions_per_s": total / add_s,
        "sample_batches_per_s": rate,
        "ram_bytes_per_transition": sum(t.numel() * t.element_size() for t in tensors) / total,
        "disk_bytes_per_transition": None,
        "recovery_s": None,
        "transitions": total,
    }


def _lerobot_rows(b: TransitionBatch, torch) -> list:
    """(state dict, action, reward) per row the way lerobot's actor builds them (float32,
    images CHW in [0, 1], batch dim 1). Conversion is counted in the add time."""
    out = []
    assert b.env_state is not None  # make_episode always fills it
    for i in range(len(b.ticks)):
        state = {
            "observation.state": torch.from_numpy(b.state[i : i + 1]),
            "observation.environment_state": torch.from_numpy(b.env_state[i : i + 1]),
        }
        for c in CAMERAS:
            state[f"observation.images.{c}"] = torch.from_numpy(b.images[c][i]).permute(2, 0, 1)[None].float() / 255
        out.append((state, torch.from_numpy(b.action[i : i + 1]), float(b.reward[i])))
    return out


def _rate(fn, seconds: float) -> float:
    """Calls of `fn` per second over about `seconds` (after one warm-up call)."""
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        n += 1
    return n / (time.perf_counter() - t0)


def writer_main(root: str, image_px: int, episode_len: int, batch_rows: int) -> None:
    """The kill -9 victim: streams episodes forever, printing each committed episode id."""
    buf = OnlineBuffer(root, bench_spec(image_px), capacity=1_000_000, fsync=True)
    for ep in range(1_000_000):
        for b in make_episode(ep, episode_len, image_px, batch_rows):
            buf.add(b)
        print(ep, flush=True)


def kill9(root: Path, image_px: int, episode_len: int, batch_rows: int, commits: int = 10) -> dict:
    """Kill a writer after `commits` reported commits (mid-episode), reopen, compare."""
    code = (
        f"from robotrl.bench.buffer import writer_main; "
        f"writer_main({str(root)!r}, {image_px}, {episode_len}, {batch_rows})"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None  # stdout=PIPE
    try:
        reported = [int(proc.stdout.readline()) for _ in range(commits)]
        time.sleep(0.05)  # let it get into the next episode
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    reported += [int(line) for line in proc.stdout.read().split()]
    buf = OnlineBuffer(root, bench_spec(image_px), capacity=1_000_000)
    committed, _ = buf.log.recover()
    found = {ep.episode_id: ep for ep in committed}
    lost = 0
    for ep_id in reported:
        want = make_episode(ep_id, episode_len, image_px, batch_rows)
        got = found.get(ep_id)
        same = got is not None and all(
            got.state[b.seq : b.seq + len(b.ticks)].tobytes() == b.state.tobytes()
            and all(got.images[c][b.seq : b.seq + len(b.ticks)].tobytes() == b.images[c].tobytes() for c in CAMERAS)
            for b in want
        )
        lost += 0 if same else episode_len
    return {
        "kill9_reported_committed_transitions": len(reported) * episode_len,
        "kill9_recovered_transitions": buf.committed_transitions,
        "kill9_in_progress_rows_recovered": sum(p.n for p in buf.partial_episodes),
        "kill9_committed_transitions_lost": lost,
    }


def run(
    *,
    episodes: int = 50,
    episode_len: int = 200,
    image_px: int = 64,
    batch_rows: int = 8,
    batch_size: int = 256,
    sample_s: float = 3.0,
    fsync: bool = True,
    lerobot: bool = True,
) -> dict:
    """Results of both buffers on the same data (module docstring)."""
    spec = bench_spec(image_px)
    data = [make_episode(ep, episode_len, image_px, batch_rows) for ep in range(episodes)]
    tmp = Path(tempfile.mkdtemp(prefix="robotrl-bench-buffer-"))
    try:
        rows = [{"buffer": "robotrl OnlineBuffer", **_ours(tmp / "log", data, spec, batch_size, sample_s, fsync)}]
        if lerobot:
            rows.append({"buffer": "lerobot ReplayBuffer", **_lerobot(data, batch_size, sample_s)})
        crash = kill9(tmp / "kill9", image_px, episode_len, batch_rows)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "setup": {
            "episodes": episodes,
            "episode_len": episode_len,
            "image_px": image_px,
            "cameras": len(CAMERAS),
            "batch_rows": batch_rows,
            "batch_size": batch_size,
            "fsync": fsync,
        },
        "rows": rows,
        **crash,
    }
