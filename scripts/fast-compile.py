#!/usr/bin/env python
"""torch.compile (and, on CUDA, CUDA graphs) of the fast pathway of the fast/slow policy,
against eager: one `FastSlowModel.sample_chunk` call (condition + `flow_steps` Euler steps
of the action expert) at the `FastSlowConfig` defaults, for robot batches 1 and 8.

    .venv/bin/python scripts/fast-compile.py [--device cpu|cuda] [--repeats 200] [--out FILE]

Per variant and batch: eager and compiled ms per call (p50 over `--repeats` calls of each,
alternated, after warm-up), the speed-up, the seconds the first compiled call took
(compiling; cold with an empty TORCHINDUCTOR_CACHE_DIR), and the largest |compiled - eager|
of the normalised chunk (weights perturbed so that the expert's output is not zero).
Variants: `default` (inductor, one compile per batch size), `default-dynamic` (one
dynamic-shape compile for every batch size), on CUDA also `reduce-overhead` (inductor +
CUDA graphs); `eager` times eager alone (a dry run). Writes JSON to `--out`.
docs/benchmarks.md ("torch.compile of the fast pathway") says what it measured here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from robotrl.policies.fastslow.config import FastSlowConfig
from robotrl.policies.fastslow.model import FastSlowModel


def _inputs(
    model: FastSlowModel, batch: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(latent (B, T, W), age (B,), fresh (B, F), noise (B, H, A)) on `device`."""
    c = model.config
    g = torch.Generator().manual_seed(batch)
    images = [torch.randint(0, 255, (batch, 3, c.image_size_px, c.image_size_px), generator=g) for _ in c.cameras]
    tokens = torch.randint(0, 8, (batch, c.max_words), generator=g)
    with torch.no_grad():
        latent = model.encode_slow([i.to(torch.uint8).to(device) for i in images], tokens.to(device))
    fresh = torch.randn((batch, c.fresh_dim), generator=g)
    noise = torch.randn((batch, c.horizon, c.action_dim), generator=g)
    return latent, torch.zeros(batch, dtype=torch.long, device=device), fresh.to(device), noise.to(device)


def _call_ms(fn, inputs, device: torch.device) -> float:
    """Milliseconds of one `fn(*inputs)` (the GPU's queue drained)."""
    start = time.perf_counter()
    fn(*inputs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) * 1000.0


def _interleaved_ms(eager, compiled, inputs, repeats: int, device: torch.device) -> tuple[float, float]:
    """p50 ms of eager and compiled calls, alternated (so load from other jobs on a shared
    machine hits both alike), after 3 warm-up calls of each."""
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    with torch.no_grad():
        for i in range(repeats + 3):
            for name, fn in (("eager", eager), ("compiled", compiled)):
                ms = _call_ms(fn, inputs, device)
                if i >= 3:
                    times[name].append(ms)
    return statistics.median(times["eager"]), statistics.median(times["compiled"])


def _perturbed(model: FastSlowModel) -> FastSlowModel:
    """Every weight shifted by seeded noise: an untrained expert's zero-initialised output
    and modulation layers would make the chunk the noise itself (and any compiler exact)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_((torch.randn(p.shape, generator=g) * 0.05).to(p.device))
    return model


def _row(model: FastSlowModel, variant: str, compiled, batch: int, repeats: int, device) -> dict:
    """Eager against `compiled` (a `torch.compile` of `model.sample_chunk`; None: eager
    only) at `batch`."""
    inputs = _inputs(model, batch, device)
    row: dict = {"variant": variant, "batch": batch}
    if compiled is None:
        with torch.no_grad():
            row["eager_ms_p50"] = round(
                statistics.median(_call_ms(model.sample_chunk, inputs, device) for _ in range(repeats)), 3
            )
        return row
    with torch.no_grad():
        start = time.perf_counter()
        out = compiled(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        row["compile_s"] = round(time.perf_counter() - start, 1)
        row["max_abs_diff"] = float((out.float() - model.sample_chunk(*inputs).float()).abs().max())
    eager_ms, compiled_ms = _interleaved_ms(model.sample_chunk, compiled, inputs, repeats, device)
    row.update(eager_ms_p50=round(eager_ms, 3), compiled_ms_p50=round(compiled_ms, 3))
    row["speedup"] = round(eager_ms / compiled_ms, 3)
    return row


VARIANTS = {
    "default": ("default", False),
    "default-dynamic": ("default", True),
    "reduce-overhead": ("reduce-overhead", False),
}
"""Name -> (torch.compile mode, dynamic shapes). reduce-overhead: CUDA graphs (CUDA only)."""


def _variant_rows(model: FastSlowModel, variant: str, batches: list[int], repeats: int, device) -> list[dict]:
    """One row per batch size; a dynamic variant compiles once for all of them."""
    rows = []
    mode, dynamic = VARIANTS.get(variant, (None, False))
    compiled = None
    for batch in batches:
        if mode is not None and (compiled is None or not dynamic):
            torch._dynamo.reset()
            compiled = torch.compile(model.sample_chunk, mode=mode, dynamic=dynamic)
        try:
            rows.append(_row(model, variant, compiled, batch, repeats, device))
        except Exception as exc:  # a compiler failure is a result too
            rows.append({"variant": variant, "batch": batch, "error": f"{type(exc).__name__}: {exc}"[:300]})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    parser.add_argument("--repeats", type=int, default=200, help="timed calls per measurement (default: 200)")
    parser.add_argument("--batches", default="1,8", help="robot batch sizes (default: 1,8)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")
    parser.add_argument(
        "--variants",
        default="auto",
        help=f"comma-separated, of {', '.join(VARIANTS)} or eager (no compile, a dry run); auto: default and "
        "default-dynamic, and reduce-overhead on CUDA",
    )
    parser.add_argument("--out", type=Path, help="JSON file for the results")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = FastSlowModel(FastSlowConfig(image_size_px=224, cameras=("front", "wrist")), 8)
    model = _perturbed(model).to(device).eval()
    variants = args.variants.split(",") if args.variants != "auto" else ["default", "default-dynamic"]
    if args.variants == "auto" and device.type == "cuda":
        variants.append("reduce-overhead")
    batches = [int(b) for b in args.batches.split(",")]
    rows = [row for variant in variants for row in _variant_rows(model, variant, batches, args.repeats, device)]
    result = {"device": str(device), "torch": torch.__version__, "threads": args.threads, "rows": rows}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
