"""PNG plots of the latency and sim-to-sim benchmarks (matplotlib, Agg canvas, no pyplot
state). Each function takes summary rows (`robotrl.bench.summary.summarize`) and
returns the file names it wrote in `out_dir`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def _figure(width_in: float = 7.0, height_in: float = 4.0):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=110)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _save(fig, out_dir: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(Path(out_dir) / name)
    return name


def _value(row: dict | None, key: str) -> float:
    value = None if row is None else row.get(key)
    return float("nan") if value is None else float(value)


def _by_mode(rows: list[dict]) -> tuple[list[str], list[str], dict[tuple[str, str], dict]]:
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    delays = list(dict.fromkeys(r["delay"] for r in rows))
    return modes, delays, {(r["mode"], r["delay"]): r for r in rows}


def _lines(
    rows: list[dict],
    key: str,
    ylabel: str,
    title: str,
    errors: tuple[str, str] | None = None,
    skip: tuple[str, ...] = (),
):
    """(figure, axes) with one line per mode of `key` against the delay (categorical x),
    each mode in its own colour and nudged sideways so equal values stay visible."""
    modes, delays, table = _by_mode(rows)
    fig, ax = _figure()
    x = np.arange(len(delays))
    for i, mode in enumerate(modes):
        if mode in skip:
            continue
        xs = x + (i - (len(modes) - 1) / 2) * 0.05
        y = np.array([_value(table.get((mode, d)), key) for d in delays])
        style: dict[str, Any] = dict(marker="o", color=f"C{i}", label=mode)
        if errors is None:
            ax.plot(xs, y, **style)
        else:
            low = np.array([_value(table.get((mode, d)), errors[0]) for d in delays])
            high = np.array([_value(table.get((mode, d)), errors[1]) for d in delays])
            ax.errorbar(xs, y, yerr=np.vstack([y - low, high - y]), capsize=3, **style)
    ax.set_xticks(x, [f"d={d}" for d in delays])
    ax.set_xlabel("injected inference delay (control ticks)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # every mode may be skipped (e.g. the speedup plot of a sync-only run)
        ax.legend(fontsize=8)
    return fig, ax


def plot_latency(rows: list[dict], out_dir: Path, task: str) -> list[str]:
    """success_vs_delay.png, reaction_time.png (reach), boundary_jumps.png, speedup.png."""
    names = []
    fig, ax = _lines(
        rows,
        "success_rate",
        "success rate (Wilson 95%)",
        f"{task}: success vs delay",
        errors=("wilson95_low", "wilson95_high"),
    )
    ax.set_ylim(-0.02, 1.02)
    names.append(_save(fig, out_dir, "success_vs_delay.png"))
    if any(r["reaction_ticks_median"] is not None for r in rows):
        fig, _ = _lines(
            rows,
            "reaction_ticks_median",
            "median reaction time (ticks)",
            f"{task}: behavioural reaction time to the target jump",
        )
        names.append(_save(fig, out_dir, "reaction_time.png"))
    fig, ax = _lines(
        rows,
        "disc_ratio_requested",
        "boundary discontinuity ratio (requested)",
        f"{task}: chunk-boundary jumps (1 = seamless)",
        skip=("ensemble",),
    )
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    names.append(_save(fig, out_dir, "boundary_jumps.png"))
    fig, ax = _lines(
        rows,
        "speedup",
        "speedup T_sync / T_mode (matched success)",
        f"{task}: completion-time speedup vs sync",
        skip=("sync",),
    )
    _, delays, table = _by_mode(rows)
    limit = [max(_value(r, "speedup_limit") for (_, d), r in table.items() if d == delay) for delay in delays]
    ax.plot(np.arange(len(delays)), limit, color="black", ls="--", label="time-model limit")
    ax.legend(fontsize=8)
    names.append(_save(fig, out_dir, "speedup.png"))
    return names


def plot_sim2sim(rows: list[dict], out_dir: Path, task: str, nominal: str) -> list[str]:
    """sim2sim_success.png: success per perturbation and mode, A->A hatched."""
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    variants = list(dict.fromkeys(r["scenario"] for r in rows))
    variants = [nominal] + [v for v in variants if v != nominal]
    table = {(r["scenario"], r["mode"]): r for r in rows}
    fig, ax = _figure(max(7.0, 1.1 * len(variants)), 4.0)
    width = 0.8 / max(len(modes), 1)
    x = np.arange(len(variants))
    for i, mode in enumerate(modes):
        y = np.array([_value(table.get((v, mode)), "success_rate") for v in variants])
        low = np.array([_value(table.get((v, mode)), "wilson95_low") for v in variants])
        high = np.array([_value(table.get((v, mode)), "wilson95_high") for v in variants])
        bars = ax.bar(
            x + (i - (len(modes) - 1) / 2) * width, y, width, yerr=np.vstack([y - low, high - y]), capsize=2, label=mode
        )
        bars[0].set_hatch("//")
    ax.set_xticks(x, [f"A->A\n({v})" if v == nominal else f"A->B\n{v}" for v in variants], fontsize=7)
    ax.set_ylabel("success rate (Wilson 95%)")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"{task}: sim-to-sim, one perturbation at a time")
    ax.legend(fontsize=8)
    return [_save(fig, out_dir, "sim2sim_success.png")]
