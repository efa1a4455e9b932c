"""`robotrl deploy --learn`: one online-learning run on this machine.

Starts a learner process (`robotrl learn`), an inference server subscribed to its
weights (`robotrl serve --weights-from`) and N-1 extra simulated actor processes
(`robotrl deploy --server ... --transitions ...`); the calling process is actor 0. Every
actor streams its transitions to the learner and logs one CSV row per episode; at the end
the learner gets SIGTERM (final checkpoint), the server is stopped, and the actors' logs
are merged into `actors.csv` with a success / intervention curve (`curves.png`).

Layout of the run folder: `buffer/` (episode log), `learner/` (checkpoint, spec.json,
updates.csv, episodes.csv), `actor<k>.csv`, `actors.csv`, `curves.png`.
"""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

from robotrl.errors import UserError

LOCAL = "127.0.0.1"


def free_port() -> int:
    """A TCP port on loopback that is free now."""
    with socket.socket() as s:
        s.bind((LOCAL, 0))
        return s.getsockname()[1]


def free_port_pair(tries: int = 50) -> int:
    """A port P such that P and P + 1 are free now (weights PUB and latest-weights)."""
    for _ in range(tries):
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind((LOCAL, port + 1))
            except OSError:
                continue
        return port
    raise UserError("found no two adjacent free TCP ports on loopback")


def _cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "robotrl.cli", *argv]


def serve_command(policy: Path, endpoint: str, weights: str | None = None) -> list[str]:
    """`robotrl serve` of `policy` on `endpoint`, taking new weights from `weights` if given."""
    return _cli("serve", "--policy", str(policy), "--bind", endpoint,
                *(("--weights-from", weights) if weights else ()))


def learner_command(args, out: Path, transitions: str, weights: str) -> list[str]:
    cmd = _cli("learn", "--algo", args.algo, "--preset", args.preset, "--buffer", str(out / "buffer"),
               "--out", str(out / "learner"), "--policy", str(args.policy), "--transitions", transitions,
               "--weights", weights)
    for dataset in args.demo_dataset:
        cmd += ["--demo-dataset", str(dataset)]
    for setting in args.learn_set:
        cmd += ["--set", setting]
    cmd += shlex.split(args.learner_args)
    if args.resume:
        cmd.append("--resume")
    return cmd


def actor_command(args, k: int, server: str, transitions: str, out: Path, episodes: int) -> list[str]:
    cmd = _cli("deploy", "--robot", "sim", "--task", args.task, "--scenario", args.scenario, "--mode", args.mode,
               "--server", server, "--transitions", transitions, "--intervene", args.intervene,
               "--episodes", str(episodes), "--seed", str(args.seed + 100_000 * k), "--robot-id", f"actor{k}",
               "--actor-log", str(out / f"actor{k}.csv"), "--max-seconds", str(args.max_seconds),
               "--taper-episodes", str(args.taper_episodes), "--budget-ticks", str(args.budget_ticks),
               "--takeover-m", str(args.takeover_m), "--takeover-gripper-rad", str(args.takeover_gripper_rad))
    if args.stepped_delay is not None:
        cmd += ["--stepped-delay", str(args.stepped_delay)]
    if args.lag_deadband is not None:
        cmd += ["--lag-deadband", str(args.lag_deadband)]
    return cmd


def wait_for(path: Path, proc: subprocess.Popen, what: str, log: Path, timeout_s: float = 300.0) -> None:
    """Wait until `path` exists; a dead `proc` ends the wait with a clear error naming `log`."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None:
            raise UserError(f"the {what} exited (code {proc.returncode}) before writing {path}; see {log}")
        if time.monotonic() > deadline:
            raise UserError(f"the {what} did not write {path} within {timeout_s:.0f} s")
        time.sleep(0.2)


def stop(proc: subprocess.Popen | None, timeout_s: float = 60.0) -> None:
    """SIGTERM, then SIGKILL after `timeout_s`."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def merge_actor_logs(out: Path, actors: int) -> Path:
    """actor<k>.csv -> actors.csv: every episode of every actor ordered by wall time, with
    a run-wide `episode` index. Returns the merged file."""
    from robotrl.learn.metrics import CsvLog, read_csv

    rows = [row for k in range(actors) if (out / f"actor{k}.csv").exists() for row in read_csv(out / f"actor{k}.csv")]
    rows.sort(key=lambda r: float(r["wall_s"]))
    merged = out / "actors.csv"
    merged.unlink(missing_ok=True)
    log = CsvLog(merged)
    for i, row in enumerate(rows):
        log.write({**row, "episode": i})
    log.close()
    return merged


def curve_table(rows: list[dict], block: int = 10) -> list[tuple]:
    """(episodes, success rate, intervention rate, wall minutes) per block of episodes."""
    table = []
    for i in range(0, len(rows), block):
        part = rows[i:i + block]
        table.append((f"{i + 1}-{i + len(part)}", f"{sum(float(r['success']) for r in part) / len(part):.2f}",
                      f"{sum(float(r['intervention_rate']) for r in part) / len(part):.3f}",
                      f"{float(part[-1]['wall_s']) / 60:.1f}"))
    return table
