"""`robotrl bench latency` and `robotrl bench sim2sim`: the stepped benchmarks of the
execution modes (their shared options, `BenchSetup`, delays, modes and seeds)."""

from __future__ import annotations

import argparse
from pathlib import Path

from robotrl.commands.flags import SCENARIO_HELP, add_device_arguments, add_noise_argument, noise_option, resolve_device


def task_arguments(parser: argparse.ArgumentParser, *, scenario: bool) -> None:
    """`--task`, `--episodes` and (with `scenario`) `--scenario`."""
    from robotrl.sim.tasks import TASKS

    parser.add_argument("--task", choices=tuple(TASKS), default="reach", help="simulated task (default: reach)")
    parser.add_argument("--episodes", type=int, default=50, help="episodes (seeds) per cell (default: 50)")
    if scenario:
        parser.add_argument("--scenario", default="nominal", help=SCENARIO_HELP)


def _stepped_arguments(parser: argparse.ArgumentParser, *, scenario: bool, modes: str, delays: str) -> None:
    """The options `bench latency` and `bench sim2sim` share."""
    parser.add_argument("--policy", type=Path, help="checkpoint folder (default: the task's scripted expert)")
    task_arguments(parser, scenario=scenario)
    parser.add_argument(
        "--execute-steps",
        type=int,
        help="s, rows per chunk in sync mode and the time model (default: 15, 0.5 s at 30 Hz)",
    )
    parser.add_argument("--delays", help=delays)
    parser.add_argument(
        "--modes", help=f"comma-separated modes of sync, naive, vlash, vlash+rtc, ensemble (default: {modes})"
    )
    parser.add_argument("--horizon", type=int, default=16, help="H of the scripted expert (default: 16)")
    add_device_arguments(parser)
    add_noise_argument(parser)
    parser.add_argument(
        "--threshold",
        type=float,
        default=1.0,
        help="async modes request at queued/H <= threshold (default: 1, re-plan as soon as the previous chunk is in)",
    )
    parser.add_argument(
        "--in-flight",
        type=int,
        default=1,
        help="naive and vlash modes: requests in flight at once, one more per tick while the threshold holds; "
        "in real time the server runs as many model workers (default: 1)",
    )
    parser.add_argument("--seed0", type=int, help="first seed (default: 100000, never a training seed)")
    parser.add_argument("--ray", action="store_true", help="run stepped episodes as Ray tasks")
    parser.add_argument("--ray-address", help="Ray cluster address (default: a local Ray instance)")


def latency_arguments(parser: argparse.ArgumentParser) -> None:
    _stepped_arguments(
        parser,
        scenario=True,
        modes="all",
        delays="injected delays in ticks, N or LOW-HIGH (uniform) (default: 0,1,2,4,8)",
    )
    parser.add_argument("--jitter", action="store_true", help="add the jittered delay d ~ U{2..6}")
    parser.add_argument(
        "--realtime-episodes",
        type=int,
        default=0,
        help="also run this many seeds per mode and delay in real time through a server whose calls take d ticks "
        "(default: 0)",
    )


def sim2sim_arguments(parser: argparse.ArgumentParser) -> None:
    _stepped_arguments(parser, scenario=False, modes="sync,vlash", delays="scenario A's delay in ticks (default: 2)")
    parser.add_argument(
        "--control-jitter",
        type=float,
        default=0.5,
        help="real-time control-rate jitter, fraction of a period (default: 0.5)",
    )
    parser.add_argument(
        "--realtime-episodes",
        type=int,
        default=1,
        help="real-time episodes per variant and mode (default: 1; 0 skips them)",
    )


def bench_latency(args: argparse.Namespace) -> dict:
    from robotrl.bench import latency
    from robotrl.bench.summary import MAIN_COLUMNS, row_cells
    from robotrl.report.table import format_table

    delays = _delays(args.delays or latency.DELAYS) + ([latency.JITTER] if args.jitter else [])
    results = latency.run(
        _setup(args),
        delays=delays,
        modes=_modes(args, latency.MODES),
        episodes=args.episodes,
        seed0=_seed0(args),
        out_dir=args.out / "latency",
        scenario=args.scenario,
        use_ray=args.ray,
        ray_address=args.ray_address,
        realtime_episodes=max(args.realtime_episodes, 0),
    )
    print(format_table(MAIN_COLUMNS, [row_cells(r) for r in results["rows"]]))
    estimates = latency.estimate_table(results["rows"])
    if estimates:
        print("the policy's estimate of env_state, rms per feature (its units):")
        print(format_table(latency.ESTIMATE_COLUMNS, estimates))
    if results["realtime"]:
        print("real time through the server:")
        print(format_table(latency.REALTIME_COLUMNS, [r["cells"] for r in results["realtime"]]))
    for t in results["targets"]:
        print(f"target ({t['target']}): {latency.met_text(t['met'])} ({t['value']})")
    print(f"{results['wall_s']:.0f} s; report: {args.out / 'latency' / 'report.md'}")
    return results


def bench_sim2sim(args: argparse.Namespace) -> dict:
    from robotrl.bench import latency, sim2sim
    from robotrl.core.errors import UserError
    from robotrl.report.table import format_table

    delay_a = _delays(args.delays or "2")
    if len(delay_a) != 1 or args.realtime_episodes < 0 or not 0 <= args.control_jitter < 1:
        raise UserError("sim2sim needs one --delays value, --realtime-episodes >= 0, 0 <= --control-jitter < 1")
    results = sim2sim.run(
        _setup(args),
        modes=_modes(args, ("sync", "vlash")),
        delay_a=delay_a[0],
        latency_b=latency.JITTER,
        jitter=args.control_jitter,
        episodes=args.episodes,
        realtime_episodes=args.realtime_episodes,
        seed0=_seed0(args),
        out_dir=args.out / "sim2sim",
        use_ray=args.ray,
        ray_address=args.ray_address,
    )
    print(format_table(sim2sim.COLUMNS, [r["cells"] for r in results["rows"]]))
    print(f"{results['wall_s']:.0f} s; report: {args.out / 'sim2sim' / 'report.md'}")
    return results


def _setup(args: argparse.Namespace):
    """The latency / sim2sim `BenchSetup` from the arguments (and quiet clamp warnings:
    the report counts the clamps of every episode). On the CPU the model runs on one
    torch thread: episodes run one after another, and with another busy process on the
    machine two OpenMP threads made the stepped track benchmark 15-25x slower (measured)."""
    import logging

    import torch

    from robotrl.bench.cells import BenchSetup
    from robotrl.core.errors import UserError

    logging.getLogger("robotrl.hardware.safety").setLevel(logging.ERROR)

    if args.episodes < 1 or args.horizon < 1 or (args.execute_steps is not None and args.execute_steps < 1):
        raise UserError("--episodes, --horizon and --execute-steps must be at least 1")
    if not 0 <= args.threshold <= 1:
        raise UserError("--threshold must be in [0, 1]")
    if args.in_flight < 1:
        raise UserError("--in-flight must be at least 1")
    if args.policy is not None and not args.policy.exists():
        raise UserError(f"policy checkpoint {args.policy} does not exist")
    device = resolve_device(args.device) if args.policy is not None else "cpu"
    if device == "cpu":
        torch.set_num_threads(1)
    return BenchSetup(
        task=args.task,
        checkpoint=None if args.policy is None else str(args.policy.resolve()),
        horizon=args.horizon,
        execute_horizon=args.execute_steps or 15,
        threshold=args.threshold,
        max_in_flight=args.in_flight,
        device=device,
        noise_scale=noise_option(args.noise_scale),
    )


def _delays(text: str) -> list:
    from robotrl.core.errors import UserError
    from robotrl.inference.delayed import DelaySpec

    try:
        return [DelaySpec.parse(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise UserError(f"--delays {text!r}: give ticks like 0,1,2,4,8 or 2-6 ({exc})") from None


def _modes(args: argparse.Namespace, default: tuple[str, ...]) -> list[str]:
    from robotrl.core.errors import UserError
    from robotrl.inference.stepped import STEPPED_MODES

    modes = [m.strip() for m in args.modes.split(",") if m.strip()] if args.modes else list(default)
    unknown = [m for m in modes if m not in STEPPED_MODES]
    if unknown or not modes:
        raise UserError(
            f"--modes: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(STEPPED_MODES)}"
        )
    return modes


def _seed0(args: argparse.Namespace) -> int:
    from robotrl.inference.evaluation import EVAL_SEED0

    return EVAL_SEED0 if args.seed0 is None else args.seed0
