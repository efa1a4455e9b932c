"""`robotrl bench vla`: latency of lerobot's VLAs as robotrl serves them, whole and split.

The model is built with random weights from a local config (`presets.build_vla`: `full` is
the real architecture and size, `tiny` the same code at toy widths), fed `cameras` images
of 224 px and a short instruction, and timed in-process (no sockets: `bench serve` measures
the transport) after warm-up calls:

- whole: lerobot's own call (prefix and expert, `predict_whole`) for one robot;
- slow: the vision-language prefix of one robot (`encode_slow`), split models only;
- fast: the expert on that cached prefix with a new state (`predict_chunks` with latents);
- chunks/s for 1, 4 and 8 robots: one batched call per round, with and without the split
  (with the split each robot's prefix is cached; the slow pathway's own cost, one
  `encode_slow` per robot at the server's `slow_rate_hz`, is the slow row);
- peak GPU memory (allocated by torch) on CUDA.

Targets (issue 21): fast p99 <= 1/3 of the whole call's p50; 8 robots with the split at
>= 4x the chunks/s of 1 robot without it. pi0.5 has no split (its state is in the prompt):
its rows say so.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from robotrl.core.policy import PolicyObservation

ROBOT_COUNTS = (1, 4, 8)
CAMERA_NAMES = ("front", "wrist", "side")
IMAGE_PX = 224
INSTRUCTIONS = ("pick up the red cube", "place the cube in the box")
WARMUP = 3


def observations(count: int, cameras: tuple[str, ...], state_dim: int = 6) -> list[PolicyObservation]:
    """`count` robots' observations: their own states, images and ticks."""
    rng = np.random.default_rng(0)
    return [
        PolicyObservation(
            state_rad=rng.normal(0.0, 0.3, state_dim),
            tick=100 + 7 * i,
            instruction=INSTRUCTIONS[i % len(INSTRUCTIONS)],
            images={cam: rng.integers(0, 255, (IMAGE_PX, IMAGE_PX, 3), dtype=np.uint8) for cam in cameras},
            delay_ticks=2,
        )
        for i in range(count)
    ]


def timed_ms(call, repeats: int) -> list[float]:
    """Milliseconds of `repeats` calls of `call` after `WARMUP` untimed ones (every call
    returns numpy on the CPU, so GPU work is finished when it returns)."""
    for _ in range(WARMUP):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000.0)
    return times


def _percentiles(name: str, times_ms: list[float]) -> dict:
    return {f"{name}_p50_ms": float(np.percentile(times_ms, 50)), f"{name}_p99_ms": float(np.percentile(times_ms, 99))}


def run(kind: str, size: str, device: str, *, repeats: int = 30, cameras: int = 3, progress=print) -> dict:
    """The latency table of lerobot `kind` at `size` on `device` (see the module docstring)."""
    from robotrl.policies.lerobot_adapter.presets import build_vla
    from robotrl.policies.lerobot_adapter.split import LerobotSplitVlaPolicy

    names = CAMERA_NAMES[:cameras]
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    progress(f"building {kind} ({size}) on {device} ...")
    with tempfile.TemporaryDirectory() as folder:
        policy = build_vla(kind, size, Path(folder), cameras=names, device=device)
    split = policy if isinstance(policy, LerobotSplitVlaPolicy) else None
    robots = observations(max(ROBOT_COUNTS), names)
    results: dict = {"kind": kind, "size": size, "device": device, "cameras": list(names), "image_px": IMAGE_PX}
    results |= {"parameters": sum(p.numel() for p in policy.policy.parameters()), "horizon": policy.horizon}
    results |= {"repeats": repeats, "split": split is not None, "flow_steps": _flow_steps(policy.config)}
    progress("timing the whole call ...")
    results |= _percentiles("whole", timed_ms(lambda: policy.predict_whole(robots[:1]), repeats))
    latents = None
    if split is not None:
        progress("timing the slow and fast pathways ...")
        results |= _percentiles("slow", timed_ms(lambda: split.encode_slow(robots[0]), repeats))
        latents = [split.encode_slow(o) for o in robots]
        results |= _percentiles("fast", timed_ms(lambda: split.predict_chunks(robots[:1], latents[:1], [0]), repeats))
    results["rows"] = [_throughput(policy, split, robots[:n], latents, repeats) for n in ROBOT_COUNTS]
    if cuda:
        results["peak_gpu_memory_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    results["targets"] = targets(results)
    return results


def _throughput(policy, split, robots: list[PolicyObservation], latents: list | None, repeats: int) -> dict:
    """Chunks/s of one batched call for `robots`: whole, and fast on cached prefixes."""
    n = len(robots)
    whole = float(np.median(timed_ms(lambda: policy.predict_whole(robots), repeats)))
    row = {"robots": n, "whole_batch_ms": whole, "whole_chunks_per_s": 1000.0 * n / whole}
    if split is not None and latents is not None:
        fast = float(np.median(timed_ms(lambda: split.predict_chunks(robots, latents[:n], [0] * n), repeats)))
        row |= {"split_batch_ms": fast, "split_chunks_per_s": 1000.0 * n / fast}
    return row


def _flow_steps(config) -> int:
    return int(getattr(config, "num_inference_steps", getattr(config, "num_steps", 0)))


def targets(results: dict) -> dict[str, bool | None]:
    """Issue 21's targets, None where the model has no split."""
    if not results["split"]:
        return {"fast p99 <= 1/3 whole p50": None, "8 robots split >= 4x 1 robot whole (chunks/s)": None}
    rows = {r["robots"]: r for r in results["rows"]}
    one, eight = rows.get(1), rows.get(8)
    ratio = None if one is None or eight is None else eight["split_chunks_per_s"] / one["whole_chunks_per_s"]
    results["split8_over_whole1"] = ratio
    results["fast_p99_over_whole_p50"] = results["fast_p99_ms"] / results["whole_p50_ms"]
    return {
        "fast p99 <= 1/3 whole p50": results["fast_p99_over_whole_p50"] <= 1 / 3,
        "8 robots split >= 4x 1 robot whole (chunks/s)": None if ratio is None else ratio >= 4.0,
    }
