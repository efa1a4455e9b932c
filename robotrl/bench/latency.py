"""`robotrl bench latency`: execution modes under injected inference delay (stepped mode).

sync, naive async, VLASH, VLASH+RTC and ACT temporal ensembling run the same seeds at
every delay d (fixed ticks, or drawn per request, e.g. U{2..6}) on the simulated clock.
Per mode and delay: success (Wilson 95%), completion ticks and speedup vs sync against
the time model, behavioural reaction time (reach), staleness, boundary discontinuity
and jerk ratios, safety clamps; plus the issue's targets at d = 4.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import cast

from robotrl.bench.cells import BenchSetup, Cell, DelaySpec, chunk_horizon, load_checkpoint, make_env, run_cell
from robotrl.bench.plots import plot_latency
from robotrl.bench.report import Table, write_report
from robotrl.bench.runner import run_cells
from robotrl.bench.summary import MAIN_COLUMNS, find_row, row_cells, sanitize, summarize
from robotrl.core.errors import UserError
from robotrl.sim.scenario import get_scenario

MODES = ("sync", "naive", "vlash", "vlash+rtc", "ensemble")
DELAYS = "0,1,2,4,8"
JITTER = DelaySpec(2, 6)
"""The jittered delay distribution `--jitter` adds."""
TARGET_DELAY = "4"

DETAIL_COLUMNS = ("mode", "delay", "disc_req", "disc_exec", "jerk_req", "jerk_exec", "prefix_rad", "reaction_n")
"""Boundary ratios on requested and executed targets, prefix consistency (radians), and
the number of episodes with a defined reaction time."""


def run(
    setup: BenchSetup,
    *,
    delays: list[DelaySpec],
    modes: list[str],
    episodes: int,
    seed0: int,
    out_dir: Path,
    scenario: str = "nominal",
    use_ray: bool = False,
    ray_address: str | None = None,
    progress: bool = True,
) -> dict:
    """Run (or resume) every (mode, delay, seed) cell in `scenario` physics; write
    report.md, results.json, plots."""
    physics = get_scenario(scenario)
    modes = rtc_capable_modes(setup, modes)
    cells = [Cell(physics, mode, delay, seed0 + i) for delay in delays for mode in modes for i in range(episodes)]
    start = time.perf_counter()
    records = run_cells(
        run_cell,
        setup,
        cells,
        out_dir,
        use_ray=use_ray,
        ray_address=ray_address,
        desc=f"latency {setup.task}",
        progress=progress,
    )
    wall_s = time.perf_counter() - start
    dt_s = make_env(setup, physics).dt_s
    horizon = chunk_horizon(setup)
    s = min(setup.execute_horizon, horizon)
    rows = summarize(records, s, dt_s)
    targets = check_targets(rows, setup.task)
    plots = plot_latency(rows, out_dir, setup.task)
    results = {
        "bench": "latency",
        "setup": asdict(setup),
        "policy": setup.checkpoint or "scripted expert",
        "scenario": scenario,
        "episodes": episodes,
        "seeds": [seed0, seed0 + episodes - 1],
        "modes": modes,
        "delays": [d.label for d in delays],
        "dt_s": dt_s,
        "horizon": horizon,
        "execute_horizon": s,
        "wall_s": wall_s,
        "rows": rows,
        "targets": targets,
        "episode_records": len(records),
    }
    write_report(
        out_dir,
        f"Latency benchmark: {setup.task} ({scenario})",
        [
            Table("Per mode and delay", MAIN_COLUMNS, [row_cells(r) for r in rows]),
            Table("Smoothness detail", DETAIL_COLUMNS, [detail_cells(r) for r in rows]),
            Table(
                f"Targets at d = {TARGET_DELAY}",
                ("target", "value", "met"),
                [(t["target"], t["value"], met_text(t["met"])) for t in targets],
            ),
        ],
        results,
        plots=plots,
        notes=notes(setup, s, horizon, dt_s, episodes, wall_s),
    )
    return cast(dict, sanitize(results))  # a dict sanitizes to a dict


def detail_cells(row: dict) -> tuple:
    def num(key: str) -> str:
        value = row[key]
        return "-" if value is None or value != value else f"{value:.3g}"

    return (
        row["mode"],
        row["delay"],
        num("disc_ratio_requested"),
        num("disc_ratio_executed"),
        num("jerk_ratio_requested"),
        num("jerk_ratio_executed"),
        num("prefix_consistency_rad"),
        row["reaction_defined"],
    )


def check_targets(rows: list[dict], task: str, delay: str = TARGET_DELAY) -> list[dict]:
    """The issue's targets at `delay`; `met` is None where a needed row is missing."""
    sync, naive, vlash, rtc = (find_row(rows, m, delay) for m in ("sync", "naive", "vlash", "vlash+rtc"))

    def target(text: str, value: str, met: bool | None) -> dict:
        return {"target": text, "value": value, "met": met}

    out = []
    if vlash and sync:
        v, s = vlash["success_rate"], sync["success_rate"]
        out.append(target("vlash success >= sync - 3 points", f"{v:.0%} vs {s:.0%}", v >= s - 0.03))
    if vlash and naive:
        v, n = vlash["success_rate"], naive["success_rate"]
        out.append(target("vlash success >= naive + 15 points", f"{v:.0%} vs {n:.0%}", v >= n + 0.15))
    if task == "reach" and vlash and sync:
        v, s = vlash["reaction_ticks_median"], sync["reaction_ticks_median"]
        ok = None if v is None or s is None else v <= s / 5
        out.append(target("vlash reaction time <= sync / 5", f"{_ticks(v)} vs {_ticks(s)} ticks (median)", ok))
    if vlash and vlash["speedup"] is not None:
        ratio = vlash["speedup_of_limit"]
        out.append(
            target(
                "vlash speedup >= 95% of the time-model limit",
                f"{vlash['speedup']:.3f} / {vlash['speedup_limit']:.3f} = {ratio:.0%}",
                ratio >= 0.95,
            )
        )
    if rtc:
        value = rtc["disc_ratio_requested"]
        ok = None if value != value else value <= 1.5
        out.append(target("vlash+rtc boundary discontinuity ratio <= 1.5", f"{value:.2f}", ok))
    return out


def notes(setup: BenchSetup, s: int, horizon: int, dt_s: float, episodes: int, wall_s: float) -> list[str]:
    out = [
        f"Policy: {setup.checkpoint or 'the task scripted expert as a chunk policy (privileged state, no camera)'}; "
        f"H = {horizon}, s = {s} ({s * dt_s:.2f} s), async threshold {setup.threshold}"
        f"{'' if setup.lag_deadband_rad is None else f', lag deadband {setup.lag_deadband_rad} rad'}; "
        f"{episodes} seeds per cell, the same for every mode; {wall_s:.0f} s wall time for this invocation "
        "(cells an earlier run cached are read back, not re-run).",
        "Stepped mode: simulated clock, delay injected as d ticks (d ~ U{a..b} drawn per request when jittered); "
        "the async delay estimate starts at the largest d.",
        "ticks: episode length including pauses (an episode ends at success or the task's limit). speedup: "
        "T_sync / T_mode over seeds both solved. limit: time model (s*dt + delta) / (s*dt + max(0, delta - d*dt)) "
        "with delta = mean d * dt.",
        f"reaction: median over episodes of the first tick at or after the reach target jump at which the "
        f"commanded end effector (pinocchio FK of the executed targets) moves toward the new target at >= "
        f"{setup.reaction_speed_m_s} m/s, minus the jump tick; undefined when already moving that way before it.",
        "stale: tick executed - observation tick per executed action (ensemble: weighted mean of the "
        "contributing observations). disc/jerk ratio: medians over episodes on the requested targets (before "
        "the safety clamp); undefined for ensemble (every tick is a new chunk) and when every tick switches.",
    ]
    if setup.checkpoint is None:
        out.append(
            "The scripted expert ignores the RTC prefix (RTC guidance acts inside a flow policy's "
            "sampler), so vlash+rtc equals vlash here."
        )
    if setup.task == "reach":
        out.append(
            "reach cannot end before its target jumps (tick 20-50, the same for every mode), so its "
            "measured speedup stays below the per-chunk time model; pick_place measures throughput."
        )
    return out


def _ticks(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def met_text(value: bool | None) -> str:
    return "n/a" if value is None else ("met" if value else "MISSED")


def rtc_capable_modes(setup: BenchSetup, modes: list[str]) -> list[str]:
    """`modes` without the RTC ones when the policy follows no RTC prefix (ACT,
    Diffusion), saying so in one line."""
    if not setup.checkpoint or load_checkpoint(setup.checkpoint, setup.device).metadata.follows_rtc_prefix:
        return modes
    kept = [m for m in modes if not m.endswith("+rtc")]
    if len(kept) < len(modes):
        print(f"{setup.checkpoint} follows no RTC prefix: leaving out {', '.join(sorted(set(modes) - set(kept)))}")
    if not kept:
        raise UserError(f"{setup.checkpoint} follows no RTC prefix: choose --modes without +rtc")
    return kept
