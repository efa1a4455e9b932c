"""`robotrl bench NAME`: benchmarks. Each prints a table and writes results.json."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

BENCHES = {
    "sim": "control-step rate of SafeRobot(SimRobot) vs raw mj_step, render fps at 224x224",
    "record": "recording frames/s vs camera fps (paced and unpaced), dropped frames, save time",
    "transport": "inference round trip on loopback (state + 2 images -> 50x6 chunk): robotrl ZMQ vs lerobot gRPC",
    "policy": "success rate (Wilson 95%) of a chunk policy checkpoint in stepped sim, synchronous chunk execution",
    "serve": "chunks/s one inference server delivers to 1, 4 and 8 robots (closed loop, loopback)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=sorted(BENCHES),
                        help="; ".join(f"{k}: {v}" for k, v in BENCHES.items()).replace("%", "%%"))
    parser.add_argument("--out", type=Path, default=Path("outputs/bench"), help="folder for results (default: outputs/bench)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="sim: repetitions, medians reported; record: episodes per mode; "
                             "transport: rounds of 2000 requests per variant, pooled; "
                             "serve: seconds per robot count (default: 5)")
    parser.add_argument("--arm", default="so101", help="simulated arm model (default: so101)")
    parser.add_argument("--policy", type=Path,
                        help="policy, serve: checkpoint folder (robotrl train output or lerobot pretrained_model)")
    parser.add_argument("--task", choices=("reach", "pick_place"), default="reach", help="policy: simulated task (default: reach)")
    parser.add_argument("--episodes", type=int, default=50, help="policy: episodes, one seed each (default: 50)")
    parser.add_argument("--scenario", default="nominal", help="policy: nominal or shifted physics (default: nominal)")
    parser.add_argument("--execute-steps", type=int, help="policy: rows executed per chunk (default: the checkpoint's)")
    parser.add_argument("--slow-every", type=int, default=1, help="policy: chunks per slow-latent refresh (default: 1)")


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


def _bench_transport(args: argparse.Namespace) -> dict:
    from robotrl.bench import transport
    from robotrl.report.table import format_table

    results = transport.run(repeats=args.repeats, progress=lambda what: print(f"measuring {what} ...", flush=True))
    columns = ("transport", "images", "model_ms", "bytes_per_request", "client_encode_p50_ms",
               "network_server_p50_ms", "server_decode_p50_ms", "client_decode_p50_ms", "overhead_p50_ms",
               "overhead_p95_ms", "overhead_p99_ms", "round_trip_p50_ms", "round_trip_p99_ms")
    print(format_table(columns, [tuple(row.get(c, "-") for c in columns) for row in results["rows"]]))
    print(f"lerobot baseline: {results['lerobot_baseline']}")
    for key, ratio in results.items():
        if key.startswith("lerobot_over_robotrl"):
            print(f"{key}: {ratio:.1f}x")
    worst = max(r["overhead_p99_ms"] for r in results["rows"] if r["transport"].startswith("robotrl")
                and r["images"] == "raw")
    ok = worst <= results["target_p99_overhead_ms"]
    print(f"target (p99 transport overhead <= 1 ms raw): {'met' if ok else 'MISSED'} ({worst:.3f} ms)")
    return results


def _bench_policy(args: argparse.Namespace) -> dict:
    from robotrl.bench import policy as policy_bench
    from robotrl.errors import UserError
    from robotrl.policies.loading import load_policy
    from robotrl.report.table import format_table

    if args.policy is None:
        raise UserError("bench policy needs --policy CHECKPOINT")
    if args.episodes < 1 or args.slow_every < 1:
        raise UserError("--episodes and --slow-every must be at least 1")
    results = policy_bench.evaluate(load_policy(args.policy), args.task, args.episodes, scenario=args.scenario,
                                    execute_steps=args.execute_steps, slow_every=args.slow_every)
    results["checkpoint"] = str(args.policy)
    print(format_table(("metric", "value"), policy_bench.summary_rows(results)))
    return results


def _bench_serve(args: argparse.Namespace) -> dict:
    from robotrl.bench import serve
    from robotrl.errors import UserError
    from robotrl.policies.loading import load_policy
    from robotrl.report.table import format_table

    if args.policy is None:
        raise UserError("bench serve needs --policy CHECKPOINT")
    rows = serve.run(load_policy(args.policy), seconds=float(args.repeats))
    print(format_table(tuple(rows[0]), [tuple(r.values()) for r in rows]))
    ok = rows[-1]["speedup_vs_1"] >= 4.0
    print(f"target (8 robots >= 4x the chunks/s of 1): {'met' if ok else 'MISSED'} ({rows[-1]['speedup_vs_1']:.2f}x)")
    return {"checkpoint": str(args.policy), "rows": rows}


_BENCH_RUNNERS = {"sim": _bench_sim, "record": _bench_record, "transport": _bench_transport,
                  "policy": _bench_policy, "serve": _bench_serve}
