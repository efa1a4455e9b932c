"""The GPU-against-CPU summary of a `scripts/gpu-bench` run (issue 20's benchmarks).

The script leaves, under its output folder, one folder per (benchmark, device):
`serve-<policy>-<device>/serve/results.json` (`bench serve`), `learner-<device>/learner/
results.json` (`bench learner`), `train-<device>/train_summary.json` (`robotrl train`
with a time budget) and `compile.json` (`scripts/fast-compile.py`). `write_summary(folder)`
puts them side by side with the issue's targets in `summary.md` and `summary.json`; a
benchmark that did not run is "-".
"""

from __future__ import annotations

import json
from pathlib import Path

from robotrl.bench.report import markdown_table

SERVE_TARGETS = {
    "fastslow": "GPU: p99 round trip <= 5 ms for 1 robot; 16 robots >= 10x the chunks/s of 1",
    "act": "GPU: 8 robots >= 5x the chunks/s of 1",
}


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.1f}x"


def serve_table(folder: Path, policy: str, devices: tuple[str, ...]) -> tuple[str, dict]:
    """Chunks/s per robot count and device, round trips, and the speed-ups."""
    runs = {d: _read(folder / f"serve-{policy}-{d}" / "serve" / "results.json") for d in devices}
    rows_by = {d: {r["robots"]: r for r in (run or {}).get("rows", [])} for d, run in runs.items()}
    counts = sorted({n for rows in rows_by.values() for n in rows})
    headers = ["robots"]
    for d in devices:
        headers += [f"{d} chunks/s", f"{d} x 1 robot", f"{d} p50 ms", f"{d} p99 ms"]
    table = []
    for n in counts:
        cells: list[object] = [n]
        for d in devices:
            row, one = rows_by[d].get(n), rows_by[d].get(1)
            rate = row["chunks_per_s"] if row else None
            cells += [
                _fmt(rate),
                _ratio(rate, one["chunks_per_s"] if one else None),
                _fmt(row.get("round_trip_ms_p50") if row else None, 2),
                _fmt(row.get("round_trip_ms_p99") if row else None, 2),
            ]
        table.append(cells)
    text = f"### bench serve: {policy}\n\nTarget ({SERVE_TARGETS.get(policy, '')})\n\n" + markdown_table(headers, table)
    return text, {d: list(rows_by[d].values()) for d in devices}


def learner_table(folder: Path, devices: tuple[str, ...]) -> tuple[str, dict]:
    runs = {d: _read(folder / f"learner-{d}" / "learner" / "results.json") for d in devices}
    rates = {
        d: {(r["implementation"], r["inputs"]): r["updates_per_s"] for r in (run or {}).get("rows", [])}
        for d, run in runs.items()
    }
    keys = sorted({k for rows in rates.values() for k in rows})
    headers = ["implementation", "inputs", *(f"{d} updates/s" for d in devices)]
    if len(devices) > 1:
        headers.append(f"{devices[0]} / {devices[1]}")
    table = []
    for key in keys:
        values = [rates[d].get(key) for d in devices]
        cells: list[object] = [*key, *(_fmt(v, 2) for v in values)]
        if len(devices) > 1:
            cells.append(_ratio(values[0], values[1]))
        table.append(cells)
    text = (
        "### bench learner: SAC updates/s (batch 256, utd 2)\n\nTarget (GPU: robotrl >= 2x lerobot with images, "
        ">= 30x the 2-core CPU's 1.1 updates/s)\n\n" + markdown_table(headers, table)
    )
    return text, {d: runs[d] for d in devices}


def learner_loop_table(learner: dict) -> str:
    """The learner loop against its bare update rate, and publish -> first chunk, per device
    (`learner`: device -> `bench learner` results, or None)."""
    rows = [
        [d, r["inputs"], _fmt(r["bare_updates_per_s"], 2), _fmt(r["loop_updates_per_s"], 2), _fmt(r["loop_ratio"], 3)]
        for d, run in learner.items()
        for r in (run or {}).get("loop", [])
    ]
    weights = [
        [d, *(_fmt(w.get(k), 2) for k in ("publish_to_first_chunk_ms_p50", "publish_to_first_chunk_ms_max"))]
        + [_fmt(w.get("swap_ms_max"), 2), _fmt(w.get("model_ms_p50"), 2)]
        for d, run in learner.items()
        if (w := (run or {}).get("weights"))
    ]
    return (
        "### bench learner: the loop against the bare update rate\n\nTarget (loop >= 0.9 x bare)\n\n"
        + markdown_table(["device", "inputs", "bare updates/s", "loop updates/s", "loop / bare"], rows)
        + "\n\n### bench learner: publish -> first chunk of the new version (ms)\n\n"
        + markdown_table(["device", "p50", "max", "serving thread's swap, max", "chunk model p50"], weights)
    )


def compile_table(folder: Path) -> tuple[str, dict | None]:
    """torch.compile of the fast pathway against eager (`compile.json`)."""
    found = _read(folder / "compile.json")
    rows = [
        [r["variant"], r["batch"], _fmt(r.get("eager_ms_p50"), 3), _fmt(r.get("compiled_ms_p50"), 3)]
        + [_fmt(r.get("speedup"), 2), _fmt(r.get("compile_s")), r.get("error", "")]
        for r in (found or {}).get("rows", [])
    ]
    headers = ["variant", "robots", "eager ms", "compiled ms", "speed-up", "compile s", "error"]
    title = f"### fast pathway: torch.compile against eager ({(found or {}).get('device', '-')})"
    return f"{title}\n\nKept if it wins (docs/benchmarks.md)\n\n" + markdown_table(headers, rows), found


def train_table(folder: Path, runs: tuple[str, ...]) -> tuple[str, dict]:
    found = {r: _read(folder / f"train-{r}" / "train_summary.json") for r in runs}
    rates = {r: (s["steps"] / s["wall_s"] if s and s.get("wall_s") else None) for r, s in found.items()}
    cpu = rates.get("cpu")
    table = [[r, _fmt(rates[r], 2), (found[r] or {}).get("steps", "-"), _ratio(rates[r], cpu)] for r in runs]
    text = "### train: fast/slow policy steps/s\n\nTarget (GPU >= 20x the CPU)\n\n" + markdown_table(
        ["run", "steps/s", "steps", "x cpu"], table
    )
    return text, {r: {"steps_per_s": rates[r], **(found[r] or {})} for r in runs}


def write_summary(folder: Path | str, devices: tuple[str, ...] = ("cuda", "cpu")) -> Path:
    """summary.md and summary.json in `folder`; returns summary.md."""
    folder = Path(folder)
    parts, data = [f"# robotrl GPU benchmarks ({', '.join(devices)})"], {}
    env = folder / "env.txt"
    if env.is_file():
        parts.append("```\n" + env.read_text().strip() + "\n```")
    for policy in ("fastslow", "act"):
        text, data[f"serve_{policy}"] = serve_table(folder, policy, devices)
        parts.append(text)
    text, data["learner"] = learner_table(folder, devices)
    parts += [text, learner_loop_table(data["learner"])]
    train_runs = tuple(r for d in devices for r in ((d, f"{d}-bf16") if d == "cuda" else (d,)))
    text, data["train"] = train_table(folder, train_runs)
    parts.append(text)
    text, data["compile"] = compile_table(folder)
    parts.append(text)
    (folder / "summary.json").write_text(json.dumps(data, indent=1))
    out = folder / "summary.md"
    out.write_text("\n\n".join(parts) + "\n")
    return out
