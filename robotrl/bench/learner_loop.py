"""`robotrl bench learner`, the learner's own loop and its weights' way to a robot.

- Loop vs bare: updates/s of `Learner.run` (SAC, the bench's networks, batch 256, utd 2)
  on a filled `OnlineBuffer` (online and demo episodes, RLPD mix; sampling, receiving,
  health, publishing and logging at the default cadence, timed from the end of the first
  update to the end of the last) against the bare update rate: the same update function
  on one pre-built batch already on the device (images there as uint8). Measured in
  `repeats` rounds, each a loop with prefetching and one without (alternating which goes
  first) between two bare runs; a round's ratio is its loop rate over the mean of the bare
  runs around it (drift on a shared machine cancels), medians reported. Within each loop
  run, `loop_update_share` is the share of its time spent inside the update function
  (sampling included): 1 minus the loop's own overhead, free of that drift. A checkpoint
  (every 200 updates by default) is timed apart: `checkpoint_s`.
- Publish -> first chunk: a learner (the same SAC, state inputs) publishes its weights
  to a real `PolicyServer` on loopback (`--weights-from`) while one robot asks for chunks
  in a closed loop; per version, milliseconds from `publish` to the server's subscriber
  receiving it, to the swap, and to the robot receiving the first chunk stamped with it.
  The swap is staged off the serving thread (`stage_ms`), the serving thread only swaps
  (`swap_ms`, compared with a chunk's model time). All in one process: the learner,
  server and robot share this machine's cores (and Python's GIL).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from robotrl.bench.learner import CAMERAS, A, E, S, _FixedBuffer, _timed
from robotrl.buffer.episode import Episode
from robotrl.buffer.online import OnlineBuffer
from robotrl.buffer.spec import TransitionSpec
from robotrl.learn.learner import Learner, LearnerConfig
from robotrl.learn.prefetch import Prefetcher
from robotrl.learn.sac import Sac

EPISODES, ROWS = 10, 200
"""Online episodes and demo episodes in the buffer, rows each."""
PUBLISH_GAP_S = 0.25
"""Shortest time between two publishes of the weights measurement (about)."""


def bench_spec(image_px: int | None, cameras: int) -> TransitionSpec:
    return TransitionSpec(S, A, {cam: (image_px, image_px) for cam in CAMERAS[:cameras]} if image_px else {}, E)


def _episode(k: int, spec: TransitionSpec, source: str) -> Episode:
    """Synthetic episode `k` of ROWS rows (values a function of k)."""
    rng = np.random.default_rng(k)
    state = rng.normal(0, 0.5, (ROWS, S)).astype(np.float32)
    images = {cam: rng.integers(0, 255, (ROWS, h, w, 3), dtype=np.uint8) for cam, (h, w) in spec.cameras.items()}
    return Episode(
        "bench",
        k,
        np.arange(ROWS),
        state,
        state + rng.uniform(-0.05, 0.05, (ROWS, A)).astype(np.float32),
        np.zeros((ROWS, A), np.float32),
        rng.normal(0, 1, ROWS).astype(np.float32),
        np.arange(ROWS) % 10 == 0,
        np.zeros(ROWS, np.int64),
        np.zeros(ROWS, np.int64),
        images,
        rng.normal(0, 1, (ROWS, E)).astype(np.float32),
        "bench",
        success=bool(k % 2),
        source=source,
    )


def filled_buffer(root: Path, spec: TransitionSpec) -> OnlineBuffer:
    """An OnlineBuffer at `root` holding EPISODES online and EPISODES demo episodes."""
    buffer = OnlineBuffer(root, spec, 4 * EPISODES * ROWS, fsync=False)
    for k in range(EPISODES):
        buffer.cache.add(_episode(k, spec, "online"))  # as committed episodes are cached
    buffer.add_demo_episodes([_episode(1000 + k, spec, "demo") for k in range(EPISODES)])
    return buffer


def _sac(spec: TransitionSpec, batch: int, device: torch.device) -> Sac:
    from robotrl.learn.registry import make_algorithm

    algo = make_algorithm("sac", spec, preset="default", overrides={"batch_size": batch, "utd_ratio": 2}, device=device)
    assert isinstance(algo, Sac)  # make_algorithm("sac", ...) builds a Sac
    return algo


def bare_rate(buffer: OnlineBuffer, spec: TransitionSpec, batch: int, updates: int, device: torch.device) -> float:
    """updates/s of the SAC update on one batch of `buffer` already on `device`."""
    prefetcher = Prefetcher(buffer, device)
    try:
        sample = prefetcher.sample_transitions(batch, 0, np.random.default_rng(0))  # staged as the loop stages it
    finally:
        prefetcher.close()
    algo, fixed, rng = _sac(spec, batch, device), _FixedBuffer(sample), np.random.default_rng(0)
    return _timed(lambda: algo.update(fixed, 0, rng), updates, device)


class _NoPublisher:
    def publish(self, version: int, safetensors_bytes: bytes) -> None:
        pass


def loop_rate(root: Path, spec: TransitionSpec, batch: int, updates: int, device: torch.device, prefetch: bool) -> dict:
    """updates/s of a `Learner` loop over `updates` timed updates (and what prefetching
    did), the seconds its final checkpoint took."""
    from robotrl.wire.weights import WeightPublisher

    buffer = filled_buffer(root / "buffer", spec)
    publisher = WeightPublisher("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
    cfg = LearnerConfig(
        out=root / "run",
        transitions_endpoint="tcp://127.0.0.1:*",
        min_transitions=1,
        max_updates=updates + 1,
        prefetch=prefetch,
    )
    try:
        with Learner(_sac(spec, batch, device), buffer, publisher, cfg, device=str(device)) as learner:
            learner.run()
            start = time.perf_counter()
            learner.save()
            checkpoint_s = time.perf_counter() - start
    finally:
        publisher.close()
        buffer.close()
    return {
        "rate": learner.loop_clock.updates_per_s or 0.0,
        "share": learner.loop_clock.update_share or 0.0,
        "prefetch": learner.prefetch_counts,
        "ckpt": checkpoint_s,
    }


def loop_vs_bare(
    spec: TransitionSpec, inputs: str, batch: int, updates: int, device: torch.device, repeats: int = 3
) -> dict:
    """One row: bare and loop updates/s (with and without prefetching) and their ratios,
    medians over `repeats` rounds of (loop, other loop) each between two bare runs."""
    default = device.type == "cuda"  # LearnerConfig.prefetch None
    with tempfile.TemporaryDirectory(prefix="robotrl-bench-learner-") as tmp:
        root = Path(tmp)
        buffer = filled_buffer(root / "bare", spec)
        bare = [bare_rate(buffer, spec, batch, updates, device)]
        loops: dict[bool, list[dict]] = {True: [], False: []}
        for k in range(repeats):
            for prefetch in (default, not default) if k % 2 == 0 else (not default, default):
                loops[prefetch].append(loop_rate(root / f"loop-{k}-{prefetch}", spec, batch, updates, device, prefetch))
            bare.append(bare_rate(buffer, spec, batch, updates, device))
        buffer.close()
    around = [(bare[k] + bare[k + 1]) / 2 for k in range(repeats)]  # the bare rate around round k
    ratio = {p: float(np.median([run["rate"] / b for run, b in zip(loops[p], around)])) for p in loops}
    rate = {p: float(np.median([run["rate"] for run in loops[p]])) for p in loops}
    return {
        "inputs": inputs,
        "bare_updates_per_s": round(float(np.median(bare)), 3),
        "bare_spread": round((max(bare) - min(bare)) / float(np.median(bare)), 3),
        "loop_updates_per_s": round(rate[default], 3),
        "loop_ratio": round(ratio[default], 3),
        "loop_update_share": round(float(np.median([run["share"] for run in loops[default]])), 3),
        "loop_prefetch": default,
        "loop_prefetch_updates_per_s": round(rate[True], 3),
        "loop_prefetch_ratio": round(ratio[True], 3),
        "loop_no_prefetch_updates_per_s": round(rate[False], 3),
        "loop_no_prefetch_ratio": round(ratio[False], 3),
        "prefetch_hits_misses": loops[True][-1]["prefetch"],
        "checkpoint_s": round(float(np.median([run["ckpt"] for run in loops[default]])), 3),
        "repeats": repeats,
        "target_ratio": 0.9,
    }
