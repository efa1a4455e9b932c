"""`robotrl bench vla`: latency of lerobot's VLAs as robotrl serves them, whole and split.

The model is built with random weights from a local config (`presets.build_vla`: `full` is
the real architecture and size, `tiny` the same code at toy widths), fed `cameras` images
of 224 px (resized to the model's own size inside) and a short instruction, and timed
in-process (no sockets: `bench serve` measures the transport) after `warmup` untimed calls,
for each robot count (default 1, 4 and 8), one batched call per timed round:

- whole: lerobot's own call (prefix and expert, `predict_whole`) for all the robots;
- slow: their vision-language prefixes in one forward (`encode_slow_batch`), split models
  only; the server runs it at `slow_rate_hz` for the robots with newer frames, off the
  request path;
- fast: the expert on those cached prefixes with new states (`predict_chunks` with latents);
- per row the batch's ms (median) and chunks (or prefixes) per second; the one-robot row's
  samples give the per-call p50/p99 (`whole_p50_ms`, ...), so the robot counts must
  include 1;
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


def timed_ms(call, repeats: int, warmup: int = WARMUP, device: torch.device | None = None) -> list[float]:
    """Milliseconds of `repeats` calls of `call` after `warmup` untimed ones; on a CUDA
    `device` each call's GPU work is waited for (a prefix stays on the GPU)."""

    def once() -> None:
        call()
        if device is not None and device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        once()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        once()
        times.append((time.perf_counter() - start) * 1000.0)
    return times


def _percentiles(name: str, times_ms: list[float]) -> dict:
    return {f"{name}_p50_ms": float(np.percentile(times_ms, 50)), f"{name}_p99_ms": float(np.percentile(times_ms, 99))}


def run(
    kind: str,
    size: str,
    device: str,
    *,
    repeats: int = 30,
    warmup: int = WARMUP,
    cameras: int = 3,
    robot_counts: tuple[int, ...] = ROBOT_COUNTS,
    progress=print,
) -> dict:
    """The latency table of lerobot `kind` at `size` on `device` (see the module docstring)."""
    from robotrl.policies.lerobot_adapter.presets import build_vla
    from robotrl.policies.lerobot_adapter.split import LerobotSplitVlaPolicy

    if 1 not in robot_counts or min(robot_counts) < 1:
        raise ValueError(f"robot counts must be >= 1 and include 1 (the per-call latencies); got {robot_counts}")
    names = CAMERA_NAMES[:cameras]
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    progress(f"building {kind} ({size}) on {device} ...")
    with tempfile.TemporaryDirectory() as folder:
        policy = build_vla(kind, size, Path(folder), cameras=names, device=device)
    split = policy if isinstance(policy, LerobotSplitVlaPolicy) else None
    robots = observations(max(robot_counts), names)
    results: dict = {"kind": kind, "size": size, "device": device, "cameras": list(names), "image_px": IMAGE_PX}
    results |= {"parameters": sum(p.numel() for p in policy.policy.parameters()), "horizon": policy.horizon}
    results |= {"repeats": repeats, "warmup": warmup, "split": split is not None, "rows": []}
    results["flow_steps"] = _flow_steps(policy.config)
    for n in sorted(set(robot_counts)):
        progress(f"timing {n} robot(s) ...")
        row, times = _row(policy, split, robots[:n], repeats, warmup)
        results["rows"].append(row)
        if n == 1:
            for name, samples in times.items():
                results |= _percentiles(name, samples)
    if cuda:
        results["peak_gpu_memory_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    results["targets"] = targets(results)
    return results


def _row(policy, split, robots: list[PolicyObservation], repeats: int, warmup: int) -> tuple[dict, dict]:
    """One robot count's row (batch ms, median, and chunks or prefixes per second: whole,
    and with the split slow and fast) and its timed samples by pathway (ms)."""
    n, device = len(robots), policy.device
    times = {"whole": timed_ms(lambda: policy.predict_whole(robots), repeats, warmup, device)}
    if split is not None:
        times["slow"] = timed_ms(lambda: split.encode_slow_batch(robots), repeats, warmup, device)
        latents = split.encode_slow_batch(robots)
        times["fast"] = timed_ms(lambda: split.predict_chunks(robots, latents, [0] * n), repeats, warmup, device)
    row: dict = {"robots": n}
    for name, column, unit in (("whole", "whole", "chunks"), ("slow", "slow", "prefixes"), ("fast", "split", "chunks")):
        if name in times:
            batch_ms = float(np.median(times[name]))
            row |= {f"{column}_batch_ms": batch_ms, f"{column}_{unit}_per_s": 1000.0 * n / batch_ms}
    return row, times


def _flow_steps(config) -> int:
    return int(getattr(config, "num_inference_steps", getattr(config, "num_steps", 0)))


def targets(results: dict) -> dict[str, bool | None]:
    """Issue 21's targets, None where the model has no split (or the 8-robot row was not run)."""
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
