"""`scripts/gpu-bench`'s summary: GPU and CPU side by side, "-" for what did not run."""

from __future__ import annotations

import json

from robotrl.bench.gpu_summary import write_summary


def _write(path, doc) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def test_summary_puts_devices_side_by_side(tmp_path):
    rows = lambda rates: [  # noqa: E731
        {"robots": n, "chunks_per_s": r, "round_trip_ms_p50": 1.0, "round_trip_ms_p99": 2.0} for n, r in rates
    ]
    _write(tmp_path / "serve-act-cuda" / "serve" / "results.json", {"rows": rows([(1, 100.0), (8, 600.0)])})
    _write(tmp_path / "serve-act-cpu" / "serve" / "results.json", {"rows": rows([(1, 10.0), (8, 12.0)])})
    learner = {"implementation": "robotrl", "inputs": "state+env", "updates_per_s": 50.0}
    loop = {"inputs": "state+env", "bare_updates_per_s": 52.0, "loop_updates_per_s": 49.4, "loop_ratio": 0.95}
    weights = {"publish_to_first_chunk_ms_p50": 4.5, "publish_to_first_chunk_ms_max": 9.0, "swap_ms_max": 0.2}
    _write(
        tmp_path / "learner-cuda" / "learner" / "results.json",
        {"rows": [learner], "loop": [loop], "weights": {**weights, "model_ms_p50": 0.8}},
    )
    _write(tmp_path / "learner-cpu" / "learner" / "results.json", {"rows": [{**learner, "updates_per_s": 2.0}]})
    _write(tmp_path / "train-cuda" / "train_summary.json", {"steps": 300, "wall_s": 10.0})
    _write(tmp_path / "train-cpu" / "train_summary.json", {"steps": 10, "wall_s": 10.0})
    compiled = {"variant": "reduce-overhead", "batch": 8, "eager_ms_p50": 2.0, "compiled_ms_p50": 0.5}
    _write(tmp_path / "compile.json", {"device": "cuda", "rows": [{**compiled, "speedup": 4.0, "compile_s": 30.0}]})
    text = write_summary(tmp_path).read_text()
    assert "| cuda | state+env | 52.00 | 49.40 | 0.950 |" in text  # the loop at 95% of the bare rate
    assert "| cuda | 4.50 | 9.00 | 0.20 | 0.80 |" in text
    assert "| reduce-overhead | 8 | 2.000 | 0.500 | 4.00 | 30.0 |  |" in text
    assert "| 8 | 600.0 | 6.0x | 1.00 | 2.00 | 12.0 | 1.2x | 1.00 | 2.00 |" in text  # 600 / 100, 12 / 10
    assert "| robotrl | state+env | 50.00 | 2.00 | 25.0x |" in text
    assert "| cuda | 30.00 | 300 | 30.0x |" in text and "| cuda-bf16 | - | - | - |" in text
    assert "### bench serve: fastslow" in text  # not run: an empty table, not an error
    assert json.loads((tmp_path / "summary.json").read_text())["train"]["cuda"]["steps_per_s"] == 30.0
