"""Learner metrics: CSV logs (updates, episodes) and PNG plots of success and intervention rate.

`updates.csv`: one row per logging interval: wall_s, updates, updates_per_s, transitions,
episodes, version, the algorithm's terms (losses, ess, staleness_mean, grad_norm, ...) and
the staleness histogram of the online rows sampled since the last row (`stale_<lo>_<hi>`
counts, lag in weight versions). `episodes.csv`: one row per committed online episode:
episode (index), wall_s, updates, robot_id, episode_id, ticks, success, intervention_ticks,
intervention_rate, episode_return.
"""

from __future__ import annotations

import csv
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from robotrl.inference.runner import EpisodeResult, TickEvent

STALENESS_EDGES = (0, 1, 2, 4, 8, 16, 32)
"""Lower edges of the staleness buckets (versions): [0,1), [1,2), [2,4), ..., [32, inf)."""


def staleness_histogram(staleness: np.ndarray, edges: Sequence[int] = STALENESS_EDGES) -> dict[str, int]:
    """Counts of `staleness` (k,) int (learner version - data version) per bucket.

    Keys `stale_<lo>_<hi>` for [lo, hi) and `stale_<last>_up` for the last bucket; negative
    values (data newer than the learner, after a resume) count in the first bucket.
    Example: [0, 0, 1, 3, 40] -> stale_0_1=2, stale_1_2=1, stale_2_4=1, stale_32_up=1, others 0.
    """
    staleness = np.asarray(staleness, dtype=np.int64).reshape(-1)
    idx = np.searchsorted(np.asarray(edges), np.maximum(staleness, edges[0]), side="right") - 1
    counts = np.bincount(idx, minlength=len(edges))
    keys = [f"stale_{lo}_{hi}" for lo, hi in zip(edges[:-1], edges[1:])] + [f"stale_{edges[-1]}_up"]
    return {k: int(c) for k, c in zip(keys, counts)}


class LoopClock:
    """The learner loop's own rate: `add(start_s, end_s)` per update (monotonic seconds
    around `algorithm.update`); the span runs from the end of the first update to the end of
    the last, so everything between updates (receiving, health, publishing, logging,
    checkpoints) counts. Example: updates ending at 1.0, 1.5, 2.0 s, each 0.4 s long ->
    2 updates/s, update share 0.8."""

    def __init__(self) -> None:
        self.updates = 0
        self._first_end_s = self._last_end_s = 0.0
        self._inside_s = 0.0  # inside updates 2, 3, ... (the span)

    def add(self, start_s: float, end_s: float) -> None:
        if self.updates == 0:
            self._first_end_s = end_s
        else:
            self._inside_s += end_s - start_s
        self._last_end_s = end_s
        self.updates += 1

    @property
    def updates_per_s(self) -> float | None:
        """Updates/s over the span; None before two updates."""
        span_s = self._last_end_s - self._first_end_s
        return (self.updates - 1) / span_s if self.updates >= 2 and span_s > 0 else None

    @property
    def update_share(self) -> float | None:
        """Share of the span spent inside the updates (sampling included); 1 - this is the
        loop's own overhead. None before two updates."""
        span_s = self._last_end_s - self._first_end_s
        return self._inside_s / span_s if self.updates >= 2 and span_s > 0 else None


def rolling_mean(values: Sequence[float], window: int) -> np.ndarray:
    """(n,) mean of the last `window` values up to and including each index (fewer at the start).

    Example: rolling_mean([1, 0, 1, 1], 2) -> [1, 0.5, 0.5, 1].
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    x = np.asarray(values, dtype=np.float64)
    c = np.concatenate([[0.0], np.cumsum(x)])
    i = np.arange(1, len(x) + 1)
    lo = np.maximum(i - window, 0)
    return (c[i] - c[lo]) / (i - lo)


class CsvLog:
    """Append-only CSV file whose header grows when a row brings new columns.

    Reopening an existing file appends to it (a resumed run continues the same log). A
    row with a column not in the header rewrites the file once with the wider header
    (old rows get empty cells). Each row is flushed; `fsync` is left to the checkpoint.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.columns: list[str] = []
        self.rows_written = 0
        self.last: dict | None = None
        """The last row written (or read back on reopen)."""
        if self.path.is_file() and self.path.stat().st_size:
            rows = read_csv(self.path)
            with self.path.open(newline="") as f:
                self.columns = next(csv.reader(f), [])
            self.rows_written = len(rows)
            self.last = rows[-1] if rows else None
        self._file = self.path.open("a", newline="")

    def write(self, row: dict) -> None:
        new = [k for k in row if k not in self.columns]
        if new:
            self._widen(self.columns + new)
        writer = csv.DictWriter(self._file, self.columns)
        writer.writerow({k: _cell(v) for k, v in row.items()})
        self._file.flush()
        self.rows_written += 1
        self.last = dict(row)

    def close(self) -> None:
        self._file.close()

    def _widen(self, columns: list[str]) -> None:
        self._file.close()
        rows = read_csv(self.path) if self.columns else []
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, columns)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, self.path)
        self.columns = columns
        self._file = self.path.open("a", newline="")


class EpisodeLog:
    """An episode-runner observer of an actor: one `CsvLog` row (episode, wall_s,
    robot_id, seed, ticks, success, intervention_ticks, intervention_rate, takeovers,
    episode_return, missed_ticks, pauses, version_min, version_max) and one printed line per
    episode. `missed_ticks`: ticks whose work overran the control period (the machine was
    too slow); `pauses`: ticks the arm held for lack of a chunk (the stack was too slow).

    Args:
        log: the CSV file, or None to print only.
        robot_id: this actor's name.
        episodes: episodes planned (for the printed "k/N").
        wall_start_s: `time.monotonic()` that wall_s counts from.
    """

    def __init__(self, log: CsvLog | None, robot_id: str, episodes: int, wall_start_s: float) -> None:
        self.log, self.robot_id, self.episodes, self.wall_start_s = log, robot_id, episodes, wall_start_s
        self.done = 0

    def on_episode_start(self, seed: int, instruction: str) -> None:
        pass

    def on_tick(self, event: TickEvent) -> None:
        pass

    def on_episode_end(self, result: EpisodeResult) -> None:
        r = result
        if self.log is not None:
            self.log.write(
                {
                    "episode": self.done,
                    "wall_s": round(time.monotonic() - self.wall_start_s, 3),
                    "robot_id": self.robot_id,
                    "seed": r.seed,
                    "ticks": r.ticks,
                    "success": int(r.success),
                    "intervention_ticks": r.intervention_ticks,
                    "intervention_rate": round(r.intervention_ticks / max(r.ticks, 1), 4),
                    "takeovers": r.takeovers,
                    "episode_return": round(r.episode_return, 4),
                    "missed_ticks": r.missed_ticks,
                    "pauses": r.pauses,
                    "version_min": min(r.versions, default=-1),
                    "version_max": max(r.versions, default=-1),
                }
            )
        self.done += 1
        print(
            f"  {self.robot_id} episode {self.done}/{self.episodes} seed {r.seed}: "
            f"{'success' if r.success else 'failure'}, {r.ticks} ticks, {r.intervention_ticks} intervened, "
            f"weights v{max(r.versions, default=-1)}",
            flush=True,
        )


def read_csv(path: Path | str) -> list[dict[str, str]]:
    """Rows of a CSV file as dicts of strings."""
    with Path(path).open(newline="") as f:
        return list(csv.DictReader(f))


def _cell(value) -> str | int | float:
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.6g}" if math.isfinite(value) else str(float(value))
    return value


def episode_curves(rows: list[dict[str, str]], window: int) -> dict[str, np.ndarray]:
    """From episodes.csv rows: episode (n,), wall_s (n,), rolling success rate and rolling
    intervention rate (fraction of ticks under intervention) over `window` episodes."""
    episode = np.array([float(r["episode"]) for r in rows])
    wall_s = np.array([float(r["wall_s"]) for r in rows])
    success = [float(r["success"]) for r in rows]
    intervention = [float(r["intervention_rate"]) for r in rows]
    return {
        "episode": episode,
        "wall_s": wall_s,
        "success_rate": rolling_mean(success, window),
        "intervention_rate": rolling_mean(intervention, window),
    }


def plot_learning_curves(
    episodes_csv: Path | str,
    out_png: Path | str,
    *,
    baseline_csv: Path | str | None = None,
    window: int = 20,
    title: str = "online learning",
) -> Path:
    """PNG with four panels: success rate and intervention rate (rolling over `window`
    episodes) against episodes and against wall time (minutes); a baseline run's
    episodes.csv (e.g. no learning) is drawn dashed next to it. Returns `out_png`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [("learning", read_csv(episodes_csv), "-")]
    if baseline_csv is not None:
        runs.append(("baseline", read_csv(baseline_csv), "--"))
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.5), sharey="row")
    for label, rows, style in runs:
        if not rows:
            continue
        c = episode_curves(rows, window)
        for row, key in enumerate(("success_rate", "intervention_rate")):
            axes[row, 0].plot(c["episode"], c[key], style, label=label)
            axes[row, 1].plot(c["wall_s"] / 60, c[key], style, label=label)
    for row, name in enumerate((f"success rate ({window}-episode mean)", "intervention rate (ticks)")):
        axes[row, 0].set_ylabel(name)
        for ax in axes[row]:
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
    axes[1, 0].set_xlabel("episode")
    axes[1, 1].set_xlabel("wall time (min)")
    axes[0, 0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png


def plot_update_curves(updates_csv: Path | str, out_png: Path | str, title: str = "learner") -> Path:
    """PNG of updates.csv against updates: every loss term (`loss*`), ESS/B, gradient
    norm, mean staleness (versions) and updates/s, one panel each. Returns `out_png`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_csv(updates_csv)
    keys = [k for k in rows[0] if k.startswith("loss")] if rows else []
    keys += [k for k in ("ess", "grad_norm", "staleness_mean", "updates_per_s") if rows and k in rows[0]]
    fig, axes = plt.subplots(len(keys), 1, figsize=(8, 1.8 * len(keys) + 0.6), sharex=True, squeeze=False)
    x = [float(r["updates"]) for r in rows]
    for ax, key in zip(axes[:, 0], keys):
        ax.plot(x, [float(r[key]) if r[key] != "" else float("nan") for r in rows])
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("updates")
    fig.suptitle(title)
    fig.tight_layout()
    out_png = Path(out_png)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png
