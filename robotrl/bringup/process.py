"""Where a role's process runs, as the supervisor sees it: a `Spawner` starts one process
of a role and hands back a `RoleProcess` to poll, signal and wait for. `LocalSpawner`
starts it on this machine (`subprocess.Popen`, which is a `RoleProcess`); under `robotrl
up --ray` a Ray actor on the node Ray placed the role on does (`robotrl.bringup.ray_cluster`).
Either way the restart, backoff and stop-in-order logic is the supervisor's, in one copy.

Every start appends a header line and the process's stdout and stderr to the role's log.
Children run in their own process group (a terminal's Ctrl-C reaches only whoever started
them) and, on Linux, get SIGTERM when the thread that started them dies
(`PR_SET_PDEATHSIG`), so none is left behind.
"""

from __future__ import annotations

import ctypes
import functools
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from robotrl.core.errors import UserError


class SpawnError(UserError):
    """A role's process could not be started where it runs (its Ray actor is gone or its
    node does not answer); the role is failed, not restarted."""


class RoleProcess(Protocol):
    """One started process of a role, wherever it runs (`subprocess.Popen` is one)."""

    @property
    def pid(self) -> int:
        """Its process id on the machine it runs on."""
        ...

    def poll(self) -> int | None:
        """Its exit code once it exited (negative: killed by that signal), else None; never blocks."""
        ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None:
        """SIGKILL."""
        ...

    def wait(self) -> int:
        """Block until it exits; its exit code."""
        ...


class Spawner(Protocol):
    """Starts the processes of one role, each start on the same machine."""

    @property
    def node(self) -> dict | None:
        """Where the role runs, for its status (a Ray node's id and IP); None: this machine."""
        ...

    def spawn(self, argv: list[str], log: Path, start: int) -> RoleProcess:
        """Start number `start` (0: the first) of `argv`, its output appended to `log`;
        `SpawnError` when it cannot be started there."""
        ...


class LocalSpawner:
    """A role's processes on this machine."""

    node: dict | None = None

    def spawn(self, argv: list[str], log: Path, start: int) -> RoleProcess:
        return spawn_logged(argv, log, start)


def spawn_logged(
    argv: list[str], log: Path, start: int, cwd: str | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """`argv` in its own process group, SIGTERMed when this thread dies (Linux), stdin
    closed, stdout and stderr appended to `log` after a header line naming the start;
    `cwd` and `env` as `subprocess.Popen` takes them (None: this process's)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"--- robotrl up: start {start} at {time.ctime()}: {' '.join(argv)}\n".encode())
        out.flush()
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            process_group=0,
            preexec_fn=die_with_parent(),
        )


@functools.cache
def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` asking Linux to SIGTERM the child when its parent thread dies, or
    None elsewhere. `prctl` is looked up here, before any fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM))

    return preexec
