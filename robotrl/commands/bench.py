"""`robotrl bench NAME`: benchmarks. Each prints a table and writes results.json."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from robotrl.commands.bench_stepped import (
    bench_latency,
    bench_sim2sim,
    latency_arguments,
    sim2sim_arguments,
    task_arguments,
)
from robotrl.commands.flags import add_device_arguments, resolve_device

BENCHES = {
    "sim": "control-step rate of SafeRobot(SimRobot) vs raw mj_step, render fps at 224x224",
    "record": "recording frames/s vs camera fps (paced and unpaced), dropped frames, save time",
    "transport": "inference round trip on loopback (state + 2 images -> 50x6 chunk): robotrl ZMQ vs lerobot gRPC",
    "policy": "success rate (Wilson 95%) of a chunk policy checkpoint in stepped sim, synchronous chunk execution",
    "serve": "chunks/s one inference server delivers to 1, 4 and 8 robots (closed loop, loopback), round trips p50/p99",
    "latency": "sync / naive / vlash / vlash+rtc / ACT ensembling under injected inference delay (stepped sim): "
    "success, speedup, reaction time, staleness, boundary jumps; report.md + plots",
    "sim2sim": "scenario A -> A vs A -> B per perturbation (physics, sensing, latency, control jitter), stepped "
    "and real time through the deploy path; report.md + plots",
    "buffer": "online replay buffer vs lerobot's ReplayBuffer: transitions/s in (journal + commit), B=256 batches/s "
    "out, bytes per transition in RAM and on disk, recovery time, transitions lost after kill -9 "
    "(--episodes x 200 rows, 2 cameras 64x64)",
    "hostile": "a well-behaved robot's chunk latency p50/p99 alone and while hostile peers send 10,000 bad frames "
    "(garbage, truncations, bit flips, huge shapes, bad dtypes, wrong versions, bad multipart, a 50 MB frame, another "
    "robot's id); dead threads, wrong replies, RSS growth",
    "learner": "SAC updates/s (batch 256, utd 2; on the CPU 1 thread) vs lerobot's SACAlgorithm on equal networks "
    "on the same device, state-only and with 64x64 cameras; the learner loop's updates/s against its bare update "
    "rate (target >= 90%); publish -> first chunk of the new weight version through a real server on loopback",
    "vla": "lerobot pi0 / pi0.5 / SmolVLA with random weights (full size or tiny): whole call, slow (prefix) and fast "
    "(expert) pathways p50/p99, peak GPU memory, per robot count (default 1, 4, 8) chunks/s with and without the "
    "split and prefixes/s of the batched slow pathway",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="name", metavar="NAME", required=True)
    for name, (help_text, add) in _PARSERS.items():
        bench = sub.add_parser(name, help=help_text.replace("%", "%%"), description=help_text.replace("%", "%%"))
        bench.add_argument(
            "--out", type=Path, default=Path("outputs/bench"), help="folder for results (default: outputs/bench)"
        )
        add(bench)


def run(args: argparse.Namespace) -> int:
    results = _BENCH_RUNNERS[args.name](args)
    out = args.out / args.name
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {out / 'results.json'}")
    return 0


def _repeats(parser: argparse.ArgumentParser, what: str, default: int = 5) -> None:
    parser.add_argument("--repeats", type=int, default=default, help=f"{what} (default: {default})")


def _sim_arguments(parser: argparse.ArgumentParser) -> None:
    _repeats(parser, "repetitions, medians reported")
    parser.add_argument("--arm", default="so101", help="simulated arm model (default: so101)")


def _record_arguments(parser: argparse.ArgumentParser) -> None:
    _repeats(parser, "episodes per mode")


def _transport_arguments(parser: argparse.ArgumentParser) -> None:
    _repeats(parser, "rounds of 2000 requests per variant, pooled")


def _policy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--policy",
        type=Path,
        required=True,
        help="checkpoint folder (robotrl train output or lerobot pretrained_model)",
    )
    task_arguments(parser, scenario=True)
    add_device_arguments(parser)
    parser.add_argument("--execute-steps", type=int, help="rows executed per chunk (default: the checkpoint's)")
    parser.add_argument("--slow-every", type=int, default=1, help="chunks per slow-latent refresh (default: 1)")
    parser.add_argument(
        "--rtc-prefix", action="store_true", help="pass the previous chunk's unexecuted rows as the RTC prefix"
    )


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--policy",
        type=Path,
        required=True,
        help="checkpoint folder (robotrl train output or lerobot pretrained_model)",
    )
    _repeats(parser, "seconds per robot count")
    parser.add_argument("--robots", default="1,4,8", help="comma-separated robot counts (default: %(default)s)")
    add_device_arguments(parser)


def _buffer_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--episodes", type=int, default=50, help="episodes of 200 transitions (default: 50)")


def _hostile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--frames", type=int, default=10_000, help="hostile frames sent (default: 10000)")
    parser.add_argument(
        "--requests",
        type=int,
        default=1000,
        help="round trips of the robot per phase (p99 of 1000: the 10th worst; default: %(default)s)",
    )


def _bench_hostile(args: argparse.Namespace) -> dict:
    from robotrl.bench import hostile
    from robotrl.report.table import format_table

    results = hostile.run(frames=args.frames, requests=args.requests)
    keys = (
        "hostile_frames_sent",
        "alone_p50_ms",
        "alone_p99_ms",
        "loaded_p50_ms",
        "loaded_p99_ms",
        "p99_ratio",
        "wrong_replies",
        "dead_threads",
        "refused",
        "rss_growth_mb",
    )
    print(format_table(("metric", "value"), [(k, round(results[k], 3)) for k in keys if k in results]))
    print(f"errors by kind: {results['errors']}")
    for target, met in results["targets"].items():
        print(f"target ({target}): {'met' if met else 'MISSED'}")
    return results


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
    columns = (
        "transport",
        "images",
        "model_ms",
        "bytes_per_request",
        "client_encode_p50_ms",
        "network_server_p50_ms",
        "server_decode_p50_ms",
        "client_decode_p50_ms",
        "overhead_p50_ms",
        "overhead_p95_ms",
        "overhead_p99_ms",
        "round_trip_p50_ms",
        "round_trip_p99_ms",
    )
    print(format_table(columns, [tuple(row.get(c, "-") for c in columns) for row in results["rows"]]))
    print(f"lerobot baseline: {results['lerobot_baseline']}")
    for key, ratio in results.items():
        if key.startswith("lerobot_over_robotrl"):
            print(f"{key}: {ratio:.1f}x")
    worst = max(
        r["overhead_p99_ms"] for r in results["rows"] if r["transport"].startswith("robotrl") and r["images"] == "raw"
    )
    ok = worst <= results["target_p99_overhead_ms"]
    print(f"target (p99 transport overhead <= 1 ms raw): {'met' if ok else 'MISSED'} ({worst:.3f} ms)")
    return results


def _bench_policy(args: argparse.Namespace) -> dict:
    from robotrl.bench import policy as policy_bench
    from robotrl.core.errors import UserError
    from robotrl.inference.evaluation import evaluate
    from robotrl.policies.loading import load_policy
    from robotrl.report.table import format_table

    if args.episodes < 1 or args.slow_every < 1:
        raise UserError("--episodes and --slow-every must be at least 1")
    import torch

    device = resolve_device(args.device)
    if device == "cpu":
        torch.set_num_threads(1)  # small models: a second OpenMP thread only helps on an idle machine
    results = evaluate(
        load_policy(args.policy, device=device),
        args.task,
        args.episodes,
        scenario=args.scenario,
        execute_steps=args.execute_steps,
        slow_every=args.slow_every,
        rtc_prefix=args.rtc_prefix,
    )
    results["checkpoint"] = str(args.policy)
    print(format_table(("metric", "value"), policy_bench.summary_rows(results)))
    return results


def _bench_serve(args: argparse.Namespace) -> dict:
    from robotrl.bench import serve
    from robotrl.policies.loading import load_policy
    from robotrl.report.table import format_table

    counts = _counts(args.robots)
    device = resolve_device(args.device)
    rows = serve.run(load_policy(args.policy, device=device), seconds=float(args.repeats), robot_counts=counts)
    print(format_table(tuple(rows[0]), [tuple(round(v, 3) for v in r.values()) for r in rows]))
    if 8 in counts and counts[0] == 1:
        speedup = rows[counts.index(8)]["speedup_vs_1"]
        print(f"target (8 robots >= 4x the chunks/s of 1): {'met' if speedup >= 4.0 else 'MISSED'} ({speedup:.2f}x)")
    return {"checkpoint": str(args.policy), "device": device, "rows": rows}


def _counts(text: str) -> tuple[int, ...]:
    from robotrl.core.errors import UserError

    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise UserError(f"--robots {text!r}: give robot counts like 1,4,8")
    return counts


def _bench_buffer(args: argparse.Namespace) -> dict:
    from robotrl.bench import buffer
    from robotrl.report.table import format_table

    results = buffer.run(episodes=args.episodes)
    columns = (
        "buffer",
        "add_transitions_per_s",
        "sample_batches_per_s",
        "sample_chunk_batches_per_s",
        "ram_bytes_per_transition",
        "disk_bytes_per_transition",
        "recovery_s",
    )
    print(
        format_table(
            columns, [tuple("-" if row.get(c) is None else row[c] for c in columns) for row in results["rows"]]
        )
    )
    print(format_table(("kill -9 of a writer", "value"), [(k, v) for k, v in results.items() if k.startswith("kill9")]))
    return results


def _learner_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--updates", type=int, default=20, help="timed updates per row (default: %(default)s)")
    parser.add_argument("--cameras", type=int, default=1, help="64x64 cameras of the image rows (default: %(default)s)")
    parser.add_argument(
        "--publishes", type=int, default=10, help="weight versions timed from publish to chunk (default: %(default)s)"
    )
    _repeats(parser, "loop / bare rounds of the loop measurement, medians reported", default=3)
    add_device_arguments(parser)


def _bench_learner(args: argparse.Namespace) -> dict:
    from robotrl.bench import learner
    from robotrl.core.errors import UserError
    from robotrl.report.table import format_table

    if args.updates < 2 or min(args.cameras, args.publishes, args.repeats) < 1:
        raise UserError("--updates must be at least 2, --cameras, --publishes and --repeats at least 1")
    results = learner.run(updates=args.updates, cameras=args.cameras, device=resolve_device(args.device))
    columns = ("implementation", "inputs", "updates_per_s", "parameters")
    print(format_table(columns, [tuple(row[c] for c in columns) for row in results["rows"]]))
    print(results["equal_networks"])
    results.update(_learner_loop(args, results["device"]))
    return results


def _learner_loop(args: argparse.Namespace, device: str) -> dict:
    """The loop-vs-bare rows and the publish -> first chunk figures, printed."""
    import torch

    from robotrl.bench import learner_loop, weights_latency
    from robotrl.report.table import format_table

    dev, threads = torch.device(device), torch.get_num_threads()
    torch.set_num_threads(1 if dev.type == "cpu" else threads)  # as the rows above
    try:
        rows = [
            learner_loop.loop_vs_bare(
                learner_loop.bench_spec(px, args.cameras), inputs, 256, args.updates, dev, args.repeats
            )
            for px, inputs in ((None, "state+env"), (64, f"state+env+{args.cameras}x64px images"))
        ]
        weights = weights_latency.run(dev, rows[0]["bare_updates_per_s"], publishes=args.publishes)
    finally:
        torch.set_num_threads(threads)
    columns = ("inputs", "bare_updates_per_s", "loop_updates_per_s", "loop_ratio", "loop_update_share", "loop_prefetch")
    columns += ("loop_prefetch_ratio", "loop_no_prefetch_ratio", "checkpoint_s")
    print(format_table(columns, [tuple(row[c] for c in columns) for row in rows]))
    print(format_table(("publish -> first chunk", "value"), list(weights.items())))
    return {"loop": rows, "weights": weights}


def _vla_arguments(parser: argparse.ArgumentParser) -> None:
    from robotrl.policies.lerobot_adapter.presets import KINDS, SIZES

    parser.add_argument("--type", choices=KINDS, default="pi0", help="lerobot VLA (default: %(default)s)")
    parser.add_argument(
        "--size", choices=SIZES, default="tiny", help="full: the real model (a GPU); tiny: toy widths (default: tiny)"
    )
    _repeats(parser, "timed calls per measurement", default=30)
    parser.add_argument(
        "--warmup", type=int, default=3, help="untimed calls before each measurement (default: %(default)s)"
    )
    parser.add_argument(
        "--robots",
        default="1,4,8",
        help="comma-separated robot counts, one batched call each; must include 1 (default: %(default)s; "
        "--size full on a CPU: a whole call of pi0 takes tens of seconds per robot)",
    )
    parser.add_argument("--cameras", type=int, default=3, help="224 px cameras, 1-3 (default: %(default)s)")
    add_device_arguments(parser)


def _bench_vla(args: argparse.Namespace) -> dict:
    from robotrl.bench import vla
    from robotrl.core.errors import UserError
    from robotrl.report.table import format_table

    if args.repeats < 1 or args.warmup < 0 or not 1 <= args.cameras <= len(vla.CAMERA_NAMES):
        raise UserError(f"--repeats must be >= 1, --warmup >= 0 and --cameras in 1..{len(vla.CAMERA_NAMES)}")
    try:
        robots = tuple(int(n) for n in args.robots.split(","))
    except ValueError:
        robots = ()
    if 1 not in robots or min(robots) < 1:
        raise UserError(f"--robots must be positive counts including 1, like 1,4,8; got {args.robots!r}")
    import torch

    device = resolve_device(args.device)
    if device == "cpu":
        torch.set_num_threads(1)  # as bench policy: one core, comparable between machines
    results = vla.run(
        args.type,
        args.size,
        device,
        repeats=args.repeats,
        warmup=args.warmup,
        cameras=args.cameras,
        robot_counts=robots,
    )
    shown = ("parameters", "peak_gpu_memory_mb", "split", "fast_p99_over_whole_p50", "split8_over_whole1")
    keys = [k for k in results if k.endswith("_ms") or k in shown]
    print(format_table(("metric", "value"), [(k, _rounded(results[k])) for k in keys]))
    columns = tuple(results["rows"][0])
    print(format_table(columns, [tuple(_rounded(r[c]) for c in columns) for r in results["rows"]]))
    for target, met in results["targets"].items():
        unmet = "not measured (needs --robots with 1 and 8)" if results["split"] else "no split"
        print(f"target ({target}): {unmet if met is None else 'met' if met else 'MISSED'}")
    return results


def _rounded(value):
    return round(value, 2) if isinstance(value, float) else value


_PARSERS = {
    "sim": (BENCHES["sim"], _sim_arguments),
    "record": (BENCHES["record"], _record_arguments),
    "transport": (BENCHES["transport"], _transport_arguments),
    "policy": (BENCHES["policy"], _policy_arguments),
    "serve": (BENCHES["serve"], _serve_arguments),
    "latency": (BENCHES["latency"], latency_arguments),
    "sim2sim": (BENCHES["sim2sim"], sim2sim_arguments),
    "buffer": (BENCHES["buffer"], _buffer_arguments),
    "hostile": (BENCHES["hostile"], _hostile_arguments),
    "learner": (BENCHES["learner"], _learner_arguments),
    "vla": (BENCHES["vla"], _vla_arguments),
}

_BENCH_RUNNERS = {
    "sim": _bench_sim,
    "record": _bench_record,
    "transport": _bench_transport,
    "policy": _bench_policy,
    "serve": _bench_serve,
    "latency": bench_latency,
    "sim2sim": bench_sim2sim,
    "buffer": _bench_buffer,
    "hostile": _bench_hostile,
    "learner": _bench_learner,
    "vla": _bench_vla,
}
