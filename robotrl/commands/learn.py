"""`robotrl learn`: a whole online-learning run on this machine: a learner (`robotrl
learner`), an inference server taking its weights (`robotrl serve --weights-from`) and
`--actors` simulated arms (`robotrl actor`) streaming every tick to it, with the scripted
expert (or a person) ready to take over. Each child gets its config as a JSON file in the
run folder. Prints the success / intervention curve and draws `curves.png`; `--resume`
continues a run. When the learner or the server dies during the run, the arms stop and
the command exits with one line naming it."""

from __future__ import annotations

import _thread
import argparse
import signal
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

from robotrl.commands.actor import add_intervention_arguments, add_stepped_arguments, intervention_config
from robotrl.commands.arm_options import add_arm_arguments, arm_config, executor_config
from robotrl.commands.learner import add_learning_arguments, learner_job
from robotrl.core.errors import UserError
from robotrl.learn.actor import ACTOR_SEED_STRIDE, ActorJob


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_arm_arguments(parser)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("outputs/learn"),
        help="run folder: buffer/, learner/, actor logs, curves.png (default: outputs/learn)",
    )
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--actors", type=int, default=1, help="simulated arms in parallel (default: 1)")
    add_stepped_arguments(parser)
    parser.add_argument(
        "--baseline-csv", type=Path, help="actors.csv of a run without learning, drawn next to the curve"
    )
    add_intervention_arguments(parser)
    add_learning_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from robotrl.learn import launch

    out = _check(args)
    signal.signal(signal.SIGTERM, _interrupt)  # run the clean-up below: never orphan the learner or server
    start = time.monotonic()
    transitions = f"tcp://{launch.LOCAL}:{launch.free_port()}"
    weights = f"tcp://{launch.LOCAL}:{launch.free_port_pair()}"
    endpoint = f"tcp://{launch.LOCAL}:{launch.free_port()}"
    actor = ActorJob(
        arm_config(args),
        endpoint,
        transitions,
        executor_config(args),
        intervention_config(args),
        args.episodes,
        args.seed,
        args.max_seconds,
        args.stepped_delay,
        args.stepped_speed,
    )
    procs: list[subprocess.Popen] = []
    stopping, died = threading.Event(), []
    try:
        _start_learner_and_server(args, out, transitions, weights, endpoint, procs)
        logs = (("learner", out / "learner.log"), ("inference server", out / "server.log"))
        _watch([(name, proc, log) for (name, log), proc in zip(logs, procs)], stopping, died)
        _run_actors(actor, args.actors, out, start, procs)
    except KeyboardInterrupt:
        if not died:
            raise
    finally:
        stopping.set()
        for proc in reversed(procs):
            launch.stop(proc)
    if died:
        raise UserError(died[0])
    _report(out, args.actors, args.baseline_csv)
    return 0


def _watch(children: list[tuple[str, subprocess.Popen, Path]], stopping: threading.Event, died: list[str]) -> None:
    """Watch the learner and the server (name, process, log) from a daemon thread: when one
    exits with an error before `stopping` is set, put one line saying so (with its log's
    last line) in `died` and interrupt the main thread, so the arms do not go on without it."""

    def watch() -> None:
        while not stopping.wait(0.5):
            for name, proc, log in children:
                code = proc.poll()
                if code and not stopping.is_set():
                    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                    died.append(f"the {name} {how} during the run ({_last_line(log)}); see {log}")
                    _thread.interrupt_main(signal.SIGTERM)  # run()'s handler: SIGINT is ignored in background jobs
                    return

    threading.Thread(target=watch, name="learn-watch", daemon=True).start()


def _last_line(log: Path) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "its log is empty"


def _check(args: argparse.Namespace) -> Path:
    if args.policy is None or not args.policy.exists():
        raise UserError("robotrl learn needs --policy CKPT: the policy to start from")
    if args.robot != "sim":
        raise UserError(
            "robotrl learn runs simulated arms; on a real arm run `robotrl learner`, `robotrl serve "
            "--weights-from` and `robotrl actor --transitions` (see the README)"
        )
    if args.actors < 1:
        raise UserError("--actors must be >= 1")
    out = args.out
    if (out / "learner").exists() and not args.resume:
        raise UserError(f"{out} already holds a run; add --resume to continue it or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _start_learner_and_server(
    args: argparse.Namespace, out: Path, transitions: str, weights: str, endpoint: str, procs: list[subprocess.Popen]
) -> None:
    from robotrl.commands.flags import resolve_device
    from robotrl.core.config import save_config
    from robotrl.inference.server import ServeJob, ServerConfig
    from robotrl.learn import launch

    devices = {
        role: resolve_device(args.device, role=role, fleet=args.fleet) for role in ("learner", "inference_server")
    }
    out_dirs = {"out": out / "learner", "buffer": out / "buffer"}
    job = learner_job(args, **out_dirs, transitions=transitions, weights=weights, device=devices["learner"])
    with open(out / "learner.log", "a") as log:
        procs.append(
            subprocess.Popen(
                launch.learner_command(save_config(job, out / "learner.json")), stdout=log, stderr=subprocess.STDOUT
            )
        )
    served = out / "learner" / "served"
    (served / "config.json").unlink(missing_ok=True)  # resumed: wait for the learner's fresh one
    launch.wait_for(served / "config.json", procs[0], "learner", out / "learner.log")
    serve = ServeJob(served, ServerConfig(endpoint=endpoint, weights_from=weights), device=devices["inference_server"])
    procs.append(launch.start_server(serve, out / "server.json", log=out / "server.log"))
    launch.wait_for_server(endpoint, procs[1])
    print(f"learner ({args.algo}) -> {out / 'learner'}; server {endpoint} takes its weights", flush=True)


def _run_actors(actor: ActorJob, actors: int, out: Path, start: float, procs: list[subprocess.Popen]) -> None:
    """Actors 1.. as child processes, actor 0 here; waits for all of them."""
    from robotrl.core.config import save_config
    from robotrl.learn import launch
    from robotrl.learn.actor import run_actor

    jobs = [
        replace(
            actor,
            arm=replace(actor.arm, robot_id=f"actor{k}"),
            seed=actor.seed + ACTOR_SEED_STRIDE * k,
            log=out / f"actor{k}.csv",
        )
        for k in range(actors)
    ]
    children = [
        subprocess.Popen(launch.actor_command(save_config(job, out / f"actor{k}.json")))
        for k, job in enumerate(jobs)
        if k > 0
    ]
    procs += children
    run_actor(jobs[0], wall_start_s=start)
    for child in children:
        child.wait()


def _report(out: Path, actors: int, baseline_csv: Path | None) -> None:
    from robotrl.learn import launch
    from robotrl.learn.metrics import plot_learning_curves, read_csv
    from robotrl.report.table import format_table

    merged = launch.merge_actor_logs(out, actors)
    rows = read_csv(merged)
    print(format_table(("episodes", "success", "intervention rate", "wall min"), launch.curve_table(rows)))
    if rows:
        png = plot_learning_curves(merged, out / "curves.png", baseline_csv=baseline_csv)
        print(f"curves: {png}; learner logs: {out / 'learner'} (updates.csv, episodes.csv)")


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
