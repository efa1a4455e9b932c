"""`robotrl bench NAME`: benchmarks. Each prints a table and writes results.json."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

BENCHES = {
    "sim": "control-step rate of SafeRobot(SimRobot) vs raw mj_step, render fps at 224x224",
    "record": "recording frames/s vs camera fps (paced and unpaced), dropped frames, save time",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=sorted(BENCHES), help="; ".join(f"{k}: {v}" for k, v in BENCHES.items()))
    parser.add_argument("--out", type=Path, default=Path("outputs/bench"), help="folder for results (default: outputs/bench)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="sim: repetitions, medians reported; record: episodes per mode (default: 5)")
    parser.add_argument("--arm", default="so101", help="simulated arm model (default: so101)")


def run(args: argparse.Namespace) -> int:
    results = _BENCH_RUNNERS[args.name](args)
    out = args.out / args.name
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {out / 'results.json'}")
    return 0


def _bench_sim(args: argparse.Namespace) -> dict:
    from robotrl.bench import sim_rates
    from robotrl.report.table import format_table

    results = sim_rates.run(arm=args.arm, repeats=args.repeats)
    print(format_table(("metric", "value"), list(results.items())))
    ok = results["control_step_cost_vs_raw_physics"] <= results["target_cost_ratio"]
    print(f"target (control step <= 2x its raw physics): {'met' if ok else 'MISSED'}")
    return results


def _bench_record(args: argparse.Namespace) -> dict:
    from robotrl.bench import record_rates
    from robotrl.report.table import format_table

    rows = record_rates.run(episodes=args.repeats)
    print(format_table(tuple(rows[0]), [tuple(r.values()) for r in rows]))
    paced = rows[0]
    ok = paced["dropped_frames"] == 0 and paced["frames_written_per_s"] >= 0.97 * paced["camera_fps"]
    print(f"target (paced: frames/s >= camera fps, 0 dropped): {'met' if ok else 'MISSED'}")
    return {"runs": rows}


_BENCH_RUNNERS = {"sim": _bench_sim, "record": _bench_record}
