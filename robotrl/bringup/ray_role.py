"""`RayRole`: the body of the Ray actor that runs one role of `robotrl up --ray` on the
node Ray placed it on. It starts the role's argv (the same `robotrl learner|serve|actor
--config FILE` as on one machine) as a subprocess there, one start at a time, and answers
for it: pid, wait, signals; and for the plan, the node's id and IP and its free ports.

It is a plain class (Ray wraps it with `ray.remote` in `robotrl.bringup.ray_cluster`), so
importing this module imports neither Ray nor torch: it is what every node's Ray worker
imports. Its methods are coroutines, so Ray runs it as an async actor: `wait` blocks no
other call, and every subprocess is started from the actor's one event-loop thread, which
lives as long as the actor (`PR_SET_PDEATHSIG` fires when that thread dies: a killed actor
takes its process with it).

The working directory is the driver's, at the same path on this node: the run folder, the
checkpoints and keys of the fleet file must be there too (one machine, or a shared
filesystem); `node()` says whether it is.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from robotrl.bringup.host import LocalHost
from robotrl.bringup.process import spawn_logged

POLL_S = 0.02
"""How often `wait` looks at its process, seconds."""


class RayRole:
    """One role's processes on this node (see the module docstring); `cwd`: the driver's
    working directory, where the role's processes run; `omp_num_threads`: the driver's
    OMP_NUM_THREADS (None: unset), which they get instead of the one Ray sets for its
    actors (1 for an actor with at most one CPU), so torch picks its threads as it does
    under `robotrl up` on one machine."""

    def __init__(self, name: str, cwd: str, omp_num_threads: str | None = None) -> None:
        self.name, self.cwd, self.omp_num_threads = name, cwd, omp_num_threads
        self.procs: dict[int, subprocess.Popen] = {}

    async def node(self) -> dict:
        """This node: Ray node id, the IP its peers reach it at, host name, and whether the
        working directory is here."""
        import ray

        return {
            "id": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(),
            "cwd_here": Path(self.cwd).is_dir(),
        }

    async def start(self, argv: list[str], log: str, start: int) -> int:
        """Start number `start` of `argv` (robotrl's CLI runs on this node's Python), its
        output appended to `log`; its pid."""
        if argv[1:3] == ["-m", "robotrl.cli"]:
            argv = [sys.executable, *argv[1:]]
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        if self.omp_num_threads is not None:
            env["OMP_NUM_THREADS"] = self.omp_num_threads
        proc = spawn_logged(argv, Path(log), start, cwd=self.cwd, env=env)
        self.procs[proc.pid] = proc
        return proc.pid

    async def wait(self, pid: int) -> int:
        """Once process `pid` exits: its exit code."""
        proc = self.procs[pid]
        while (code := proc.poll()) is None:
            await asyncio.sleep(POLL_S)
        del self.procs[pid]
        return code

    async def signal(self, pid: int, sig: int) -> None:
        """Send `sig` to process `pid` if it still runs."""
        proc = self.procs.get(pid)
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)

    async def clock(self) -> float:
        """This node's `time.monotonic()`."""
        return time.monotonic()

    async def free_port(self, taken: list[int], pair: bool) -> int:
        """A port free on this node's IP and not in `taken` (`pair`: its next one too)."""
        return LocalHost(await self._ip()).free_port(set(taken), pair)

    async def bindable(self, port: int) -> str | None:
        """None when `port` can be bound on this node's IP, else why not."""
        return LocalHost(await self._ip()).bindable(port)

    async def _ip(self) -> str:
        import ray

        return ray.util.get_node_ip_address()

    def __repr__(self) -> str:  # how Ray names the actor in its logs
        return f"RayRole({self.name}, pid {os.getpid()})"
