"""Learner metrics: staleness histogram, rolling mean, CSV logs, learning-curve plots."""

from __future__ import annotations

import csv

import numpy as np

from robotrl.learn.metrics import (
    CsvLog,
    plot_learning_curves,
    plot_update_curves,
    read_csv,
    rolling_mean,
    staleness_histogram,
)


def test_staleness_histogram_and_rolling_mean():
    # edges 0,1,2,4,8,16,32: 0,0 -> [0,1); 1 -> [1,2); 3 -> [2,4); 40 -> [32,inf); -2 -> first bucket
    h = staleness_histogram(np.array([0, 0, 1, 3, 40, -2]))
    assert h == {
        "stale_0_1": 3,
        "stale_1_2": 1,
        "stale_2_4": 1,
        "stale_4_8": 0,
        "stale_8_16": 0,
        "stale_16_32": 0,
        "stale_32_up": 1,
    }
    # windows: [1], [1,0], [0,1], [1,1]
    assert rolling_mean([1, 0, 1, 1], 2).tolist() == [1.0, 0.5, 0.5, 1.0]


def test_csv_log_grows_columns_and_appends_on_reopen(tmp_path):
    log = CsvLog(tmp_path / "updates.csv")
    log.write({"updates": 1, "loss": 0.5})
    log.write({"updates": 2, "loss": 0.25, "ess": 1.0, "ok": True})
    log.close()
    log = CsvLog(tmp_path / "updates.csv")
    assert log.rows_written == 2 and log.columns == ["updates", "loss", "ess", "ok"]
    log.write({"updates": 3, "loss": float("nan")})
    log.close()
    rows = read_csv(tmp_path / "updates.csv")
    assert [r["updates"] for r in rows] == ["1", "2", "3"]
    assert rows[0]["ess"] == "" and rows[1]["ess"] == "1" and rows[1]["ok"] == "1" and rows[2]["loss"] == "nan"


def test_plot_learning_curves_writes_png(tmp_path):
    for name, p in (("run", 0.9), ("base", 0.5)):
        with (tmp_path / f"{name}.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, ["episode", "wall_s", "success", "intervention_rate"])
            w.writeheader()
            for i in range(30):
                w.writerow(
                    {
                        "episode": i,
                        "wall_s": 10 * i,
                        "success": int(i % 10 < 10 * p),
                        "intervention_rate": max(0.0, 0.5 - i / 60),
                    }
                )
    png = plot_learning_curves(tmp_path / "run.csv", tmp_path / "curves.png", baseline_csv=tmp_path / "base.csv")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_plot_update_curves_draws_every_loss_term(tmp_path):
    log = CsvLog(tmp_path / "updates.csv")
    for i in range(1, 11):
        log.write(
            {
                "updates": 20 * i,
                "loss_critic": 1.0 / i,
                "loss_actor": -0.1 * i,
                "ess": 0.9,
                "grad_norm": 2.0,
                "staleness_mean": 0.5,
                "updates_per_s": 10.0,
            }
        )
    log.close()
    png = plot_update_curves(tmp_path / "updates.csv", tmp_path / "losses.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


# --- the learner loop: a fake algorithm, the real buffer, real sockets ----------------------


def test_loop_clock_counts_everything_between_the_first_and_last_update():
    import pytest

    from robotrl.learn.metrics import LoopClock

    clock = LoopClock()
    assert clock.updates_per_s is None and clock.update_share is None
    for start, end in ((0.6, 1.0), (1.1, 1.5), (1.6, 2.0)):  # updates of 0.4 s ending every 0.5 s
        clock.add(start, end)
    assert clock.updates_per_s == pytest.approx(2.0)  # 2 updates after the first in 2.0 - 1.0 s
    assert clock.update_share == pytest.approx(0.8)  # (0.4 + 0.4) s of 1.0 s
