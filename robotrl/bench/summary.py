"""Aggregate episode records into one row per (scenario, mode, delay), and the tables.

Pure functions of the records `robotrl.bench.cells.episode_record` writes. Medians over
episodes for the per-episode ratios (docs/benchmarks.md: quote medians); success with its 95%
Wilson interval; speedup against the sync row of the same scenario and delay.
"""

from __future__ import annotations

import numpy as np

from robotrl.bench.metrics import histogram_stats, matched_speedup, merge_histograms, nan_median, speedup_limit
from robotrl.sim.rollout import wilson_interval

MAIN_COLUMNS = (
    "mode",
    "delay",
    "success",
    "wilson95",
    "ticks",
    "pauses",
    "speedup",
    "limit",
    "reaction",
    "stale_mean",
    "stale_p95",
    "stale_max",
    "disc_ratio",
    "jerk_ratio",
    "clamps",
)
"""Columns of the printed table; `row_cells` formats a summary row into them."""


def summarize(records: list[dict], execute_horizon: int, dt_s: float) -> list[dict]:
    """One summary per (scenario, mode, delay), in the order of first appearance.

    Args:
        records: episode records.
        execute_horizon: s, rows per chunk in the time model.
        dt_s: control period, seconds.
    """
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["scenario"], r["mode"], r["delay"]), []).append(r)
    rows = [_summarize_group(g) for g in groups.values()]
    for row in rows:
        sync = groups.get((row["scenario"], "sync", row["delay"]))
        method = groups[(row["scenario"], row["mode"], row["delay"])]
        row["speedup"] = None if sync is None else matched_speedup(_success_ticks(sync), _success_ticks(method))
        delay_s = row["delay_mean_ticks"] * dt_s
        row["speedup_limit"] = (
            1.0
            if row["mode"] == "sync"
            else speedup_limit(execute_horizon, dt_s, delay_s, int(np.ceil(row["delay_mean_ticks"])))
        )
        row["speedup_of_limit"] = None if row["speedup"] is None else row["speedup"] / row["speedup_limit"]
    return rows


def _success_ticks(records: list[dict]) -> dict[int, int]:
    return {r["seed"]: r["ticks"] for r in records if r["success"]}


def _summarize_group(records: list[dict]) -> dict:
    first = records[0]
    n = len(records)
    wins = sum(r["success"] for r in records)
    low, high = wilson_interval(wins, n)
    reactions = [r["reaction_ticks"] for r in records if r["reaction_ticks"] is not None]
    staleness = histogram_stats(merge_histograms(r["staleness"] for r in records))
    return {
        "scenario": first["scenario"],
        "mode": first["mode"],
        "delay": first["delay"],
        "delay_mean_ticks": first["delay_mean_ticks"],
        "episodes": n,
        "successes": wins,
        "success_rate": wins / n,
        "wilson95_low": low,
        "wilson95_high": high,
        "mean_ticks": float(np.mean([r["ticks"] for r in records])),
        "mean_pauses": float(np.mean([r["pauses"] for r in records])),
        "reaction_ticks_median": nan_median(reactions) if reactions else None,
        "reaction_defined": len(reactions),
        "staleness_mean": staleness["mean"],
        "staleness_p95": staleness["p95"],
        "staleness_max": staleness["max"],
        "disc_ratio_requested": nan_median(r["disc_ratio_requested"] for r in records),
        "disc_ratio_executed": nan_median(r["disc_ratio_executed"] for r in records),
        "jerk_ratio_requested": nan_median(r["jerk_ratio_requested"] for r in records),
        "jerk_ratio_executed": nan_median(r["jerk_ratio_executed"] for r in records),
        "prefix_consistency_rad": nan_median(r["prefix_consistency_rad"] for r in records),
        "step_clamps": int(sum(r["step_clamps"] for r in records)),
        "estimate_requests": sum(r.get("estimate_requests", 0) for r in records),
        "estimate_rms": estimate_rms(records),
    }


def estimate_rms(records: list[dict]) -> list[float] | None:
    """Per env_state feature, the root mean square over every request of `records` of
    the policy's estimate minus the simulator's (None when no episode has one)."""
    pooled = [(r["estimate_requests"], r["estimate_mean_square"]) for r in records if r.get("estimate_mean_square")]
    if not pooled:
        return None
    n = sum(count for count, _ in pooled)
    return np.sqrt(sum(count * np.asarray(ms) for count, ms in pooled) / n).tolist()


def row_cells(row: dict) -> tuple:
    """`row` formatted into `MAIN_COLUMNS` ("-" where a value is undefined)."""
    return (
        row["mode"],
        row["delay"],
        f"{row['successes']}/{row['episodes']}",
        wilson_text(row),
        _num(row["mean_ticks"], 1),
        _num(row["mean_pauses"], 1),
        _num(row["speedup"], 3),
        _num(row["speedup_limit"], 3),
        _num(row["reaction_ticks_median"], 1),
        _num(row["staleness_mean"], 1),
        _num(row["staleness_p95"], 0),
        _num(row["staleness_max"], 0),
        _num(row["disc_ratio_requested"], 2),
        _num(row["jerk_ratio_requested"], 2),
        row["step_clamps"],
    )


def wilson_text(row: dict) -> str:
    """ "[low%, high%]" (the float rounding of a 0 lower bound shown as 0%)."""
    return f"[{max(row['wilson95_low'], 0.0):.0%}, {min(row['wilson95_high'], 1.0):.0%}]"


def _num(value, digits: int) -> str:
    if value is None or not np.isfinite(value):
        return "-"
    return f"{value:.{digits}f}"


def find_row(rows: list[dict], mode: str, delay: str, scenario: str | None = None) -> dict | None:
    """The summary row for (mode, delay[, scenario]), or None."""
    for row in rows:
        if row["mode"] == mode and row["delay"] == delay and scenario in (None, row["scenario"]):
            return row
    return None


def sanitize(value):
    """`value` with every non-finite float replaced by None (strict JSON)."""
    if isinstance(value, dict):
        return {k: sanitize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sanitize(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value
