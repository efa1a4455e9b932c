"""Starting and stopping the processes of a run on this machine (`robotrl deploy`'s local
server, `robotrl learn`'s learner, server and actors).

`robotrl learn` starts a learner process (`robotrl learner --config`), an inference
server subscribed to its weights (`robotrl serve --weights-from`) and N-1 extra simulated
actor processes (`robotrl actor --config`); the calling process is actor 0. Each child
gets its frozen config as a JSON file in the run folder, never a rebuilt command line. Every
actor streams its transitions to the learner and logs one CSV row per episode; at the end
the learner gets SIGTERM (final checkpoint), the server is stopped, and the actors' logs
are merged into `actors.csv` with a success / intervention curve (`curves.png`).

Layout of the run folder: `buffer/` (episode log), `learner/` (checkpoint, spec.json,
updates.csv, episodes.csv), `actor<k>.csv`, `actors.csv`, `curves.png`.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from robotrl.core.errors import UserError

if TYPE_CHECKING:
    from robotrl.inference.delayed import DelaySpec
    from robotrl.inference.server import ServeJob

LOCAL = "127.0.0.1"
SERVER_START_S = 120.0
"""How long a local server may take to load its policy and warm up."""


def free_port(host: str = LOCAL) -> int:
    """A TCP port on `host` (an address of this machine; loopback by default) that is free now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_port_pair(tries: int = 50, taken: frozenset[int] | set[int] = frozenset(), host: str = LOCAL) -> int:
    """A port P such that P and P + 1 are free now on `host` (weights PUB and
    latest-weights) and neither is in `taken` (ports already handed out)."""
    for _ in range(tries):
        port = free_port(host)
        if port in taken or port + 1 in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port + 1))
            except OSError:
                continue
        return port
    raise UserError(f"found no two adjacent free TCP ports on {host}")


def free_port_outside(taken: frozenset[int] | set[int], *, pair: bool = False, host: str = LOCAL) -> int:
    """A free port on `host` not in `taken` (with `pair`: its next one free too)."""
    if pair:
        return free_port_pair(taken=taken, host=host)
    for _ in range(50):
        port = free_port(host)
        if port not in taken:
            return port
    raise UserError(f"found no free TCP port on {host}")


def _cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "robotrl.cli", *argv]


def serve_command(config_file: Path) -> list[str]:
    """`robotrl serve` of the `ServeJob` saved in `config_file`."""
    return _cli("serve", "--config", str(config_file))


def learner_command(config_file: Path) -> list[str]:
    """`robotrl learner` of the `LearnerJob` saved in `config_file`."""
    return _cli("learner", "--config", str(config_file))


def actor_command(config_file: Path) -> list[str]:
    """`robotrl actor` of the `ActorJob` saved in `config_file`."""
    return _cli("actor", "--config", str(config_file))


def twin_command(*args: str) -> list[str]:
    """`robotrl twin ARGS`."""
    return _cli("twin", *args)


def record_command(*args: str) -> list[str]:
    """`robotrl record ARGS` (the recorder has no `--config`: its options are its flags)."""
    return _cli("record", *args)


def start_server(job: ServeJob, config_file: Path, log: Path | None = None) -> subprocess.Popen:
    """`robotrl serve` of `job`, handed over in `config_file`; its output goes to `log`
    (None: its status lines are dropped, its warnings and errors shown)."""
    from robotrl.core.config import save_config

    command = serve_command(save_config(job, config_file))
    if log is None:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL)
    with open(log, "a") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


def start_local_server(
    policy: Path, config_dir: Path, model_workers: int = 1, delay: DelaySpec | None = None, noise_scale: float = 1.0
) -> tuple[subprocess.Popen, str]:
    """`robotrl serve` of `policy` with `model_workers` on a free loopback port (its config
    file in `config_dir`), its replies held to `delay` ticks when given, sampling with
    `noise_scale`: (process, endpoint)."""
    from robotrl.inference.server import ServeJob, ServerConfig

    if not policy.exists():
        raise UserError(f"policy checkpoint {policy} does not exist")
    endpoint = f"tcp://{LOCAL}:{free_port()}"
    server = ServerConfig(endpoint=endpoint, model_workers=model_workers)
    job = ServeJob(policy, server, delay=delay, noise_scale=noise_scale)
    return start_server(job, config_dir / "server.json"), endpoint


def wait_for_server(endpoint: str, proc: subprocess.Popen, timeout_s: float = SERVER_START_S) -> None:
    """Wait until the local server at `endpoint` answers a hello; its death ends the wait."""
    from robotrl.core.errors import TransportTimeout
    from robotrl.wire.client import ClientSocket

    deadline = time.monotonic() + timeout_s
    with ClientSocket(endpoint, robot_id="launcher") as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise UserError(
                    f"the local inference server exited (code {proc.returncode}); "
                    "run `robotrl serve --policy ...` on its own to see why"
                )
            try:
                client.connect(timeout_s=1.0)
                return
            except TransportTimeout:
                continue
    raise UserError(f"the local inference server did not answer within {timeout_s:.0f} s")


def curve_keys(folder: Path | None):
    """This robot's CURVE keys in `folder` (client.key_secret, the server's server.key), or None."""
    if folder is None:
        return None
    from robotrl.wire.keys import ClientKeys

    return ClientKeys(secret_file=folder / "client.key_secret", server_public_file=folder / "server.key")


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
        part = rows[i : i + block]
        table.append(
            (
                f"{i + 1}-{i + len(part)}",
                f"{sum(float(r['success']) for r in part) / len(part):.2f}",
                f"{sum(float(r['intervention_rate']) for r in part) / len(part):.3f}",
                f"{float(part[-1]['wall_s']) / 60:.1f}",
            )
        )
    return table
