"""`Supervisor`: the processes of a bring-up. Each role starts once the roles it comes
after are up (or done: a robot's recorder, before its arm's role), is watched through its
probe, is restarted with exponential backoff when it dies, and is stopped in order at the
end. Where a role's process runs is its `Spawner`'s business (`robotrl.bringup.process`):
this machine by default, a Ray node under `--ray`.

Role states:

| state | meaning |
|---|---|
| waiting | not started yet: a role it comes after is not up (or done) |
| starting | its process runs but has not answered since it started |
| up | it answered within the last `QUIET_S` seconds |
| down | its process runs, it answered before, but has been quiet for over `QUIET_S` |
| restarting | its process died; it starts again after its backoff (and once its dependencies are up) |
| done | a robot's role whose episodes are all run or recorded (its process exited 0) |
| failed | it died `GIVE_UP_AFTER` times in a row, each within `STABLE_S` of its start; or a role it waits for failed |
| stopping / stopped | being stopped / stopped at the end |

Any exit of a twin, server or learner counts as a death (they run until stopped); an arm's role
or a recorder is done when it exits 0. Children run in their own process group (a terminal's Ctrl-C
reaches only the supervisor, which stops them in order) and, on Linux, get SIGTERM when
the supervisor (or the Ray actor that started them) dies (`PR_SET_PDEATHSIG`), so none is
left behind. A role whose process cannot be started where it runs (`SpawnError`: its Ray
actor is gone) is failed at once.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from robotrl.bringup.probes import Probe
from robotrl.bringup.process import LocalSpawner, RoleProcess, Spawner, SpawnError

log = logging.getLogger(__name__)

KINDS = ("twin", "learner", "server", "robot")
"""Role kinds; also their start order (each kind waits for those it names in `after`). A
twin is the simulated hardware of a driver-"twin" robot (`robotrl twin`)."""
STOP_ORDER = ("robot", "server", "learner", "twin")
"""The arms' roles first (each arm holds as its process ends), then servers, then learners,
then the twins (whose buses the arms held on)."""
STOP_TIMEOUT_S = {"robot": 10.0, "server": 15.0, "learner": 60.0, "twin": 10.0}
"""How long a role of each kind may take to stop after SIGTERM before SIGKILL, seconds (a
learner writes its final checkpoint)."""
QUIET_S = 2.0
"""A role that has not answered for this long is down, seconds."""
BACKOFF_BASE_S = 0.5
"""Wait before the first restart, seconds; doubled for every further death in a row."""
BACKOFF_CAP_S = 4.0
"""Longest wait before a restart, seconds."""
STABLE_S = 10.0
"""A process that ran this long before dying starts a fresh count of deaths in a row, seconds."""
GIVE_UP_AFTER = 5
"""Deaths in a row, each within `STABLE_S` of its start, after which a role is failed."""
STEP_S = 0.1
"""Seconds between two passes over the roles (process exits are seen within this)."""
DRAIN_QUIET_S = 5.0
"""Once every arm is done, the learner may take this long without taking in another
episode before it is stopped, seconds."""
DRAIN_MAX_S = 60.0
"""Longest wait for the learner to take in the actors' last episodes, seconds."""


def backoff_s(deaths: int, base_s: float = BACKOFF_BASE_S, cap_s: float = BACKOFF_CAP_S) -> float:
    """Seconds to wait before restarting after the `deaths`-th death in a row (1, 2, ...):
    base_s * 2 ** (deaths - 1), at most cap_s: 0.5, 1, 2, 4, 4, ... s by default."""
    return min(cap_s, base_s * 2.0 ** max(deaths - 1, 0))


class Launch(Protocol):
    """How one role is started."""

    def command(self, start: int) -> list[str] | None:
        """The argv of start number `start` (0: the first), with its config file written;
        None when there is nothing left to run (the role is done)."""
        ...


@dataclass(frozen=True)
class RoleSpec:
    """One role of a bring-up."""

    name: str
    """As in the fleet file: "serve", "learn", "robots.NAME"."""
    kind: str
    """learner, server or robot (`KINDS`)."""
    launch: Launch
    probe: Probe
    log: Path
    """Its stdout and stderr, appended over every start."""
    after: tuple[str, ...] = ()
    """Roles that must be up before it (re)starts."""
    info: dict = field(default_factory=dict)
    """Shown in its status as they are (endpoints, config file)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"role kind {self.kind!r} is not one of {KINDS}")


@dataclass
class _Role:
    spec: RoleSpec
    spawner: Spawner = field(default_factory=LocalSpawner)
    state: str = "waiting"
    proc: RoleProcess | None = None
    starts: int = 0
    deaths: int = 0
    """Deaths in a row, each within `STABLE_S` of its start."""
    started_s: float = 0.0
    up_s: float | None = None
    next_start_s: float = 0.0
    seen_s: float | None = None
    report: dict = field(default_factory=dict)
    exit_code: int | None = None
    last_exit: dict | None = None
    first_chunk_s: float | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Supervisor:
    """Runs `specs` (see the module docstring); `run()` until a stop is asked or every
    arm's role is done or failed. `spawners` start a named role's processes where it runs
    (a role not named there: on this machine)."""

    def __init__(
        self,
        specs: list[RoleSpec],
        *,
        spawners: Mapping[str, Spawner] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        names = [s.name for s in specs]
        for spec in specs:
            unknown = [a for a in spec.after if a not in names]
            if unknown:
                raise ValueError(f"role {spec.name} comes after unknown roles {unknown}")
        self.clock = clock
        where = spawners or {}
        self.roles = [_Role(spec, where.get(spec.name) or LocalSpawner()) for spec in specs]
        self.started_s = clock()
        self.phase = "running"

    def run(
        self,
        stop: threading.Event,
        on_status: Callable[[dict], None] = lambda status: None,
        *,
        hurry: threading.Event | None = None,
        every_s: float = 1.0,
    ) -> int:
        """Supervise until `stop` is set (0, or 1 if a role failed) or every arm's role is
        done or failed (0 when none failed) or a server or learner failed (1); then stop
        everything in order (`hurry` set: SIGKILL what is left at once). `on_status` gets
        `status()` every `every_s` seconds and at the end."""
        code: int | None = None
        next_status_s = self.clock()
        try:
            while not stop.is_set():
                self.step()
                code = self.outcome()
                if self.clock() >= next_status_s or code is not None:
                    on_status(self.status())
                    next_status_s = self.clock() + every_s
                if code is not None:
                    break
                stop.wait(STEP_S)
            if code is not None:
                self.drain(stop, on_status, every_s)
        finally:
            self.phase = "stopping"
            on_status(self.status())
            self.shutdown(hurry)
            on_status(self.status())
        return code if code is not None else int(any(r.state == "failed" for r in self.roles))

    def step(self) -> None:
        """One pass: take in exits, start what is due, hear from every role."""
        for role in self.roles:
            self._take_exit(role)
            self._start_if_due(role)
            self._observe(role)

    def drain(self, stop: threading.Event, on_status: Callable[[dict], None], every_s: float = 1.0) -> None:
        """Every arm is done: let the learners take in what the actors sent before they
        are stopped, until each has as many episodes (report "episodes") as the actors
        ended, or took none in for `DRAIN_QUIET_S`, or `DRAIN_MAX_S` passed, or `stop`."""
        learners = [r for r in self.roles if r.spec.kind == "learner" and r.alive]
        actors = [r for r in self.roles if r.spec.kind == "robot" and r.spec.info.get("role") == "actor"]
        if not learners or not actors:
            return
        self.phase = "draining"
        wanted = sum(int(r.report.get("episodes") or 0) for r in actors)
        start = changed = next_status_s = self.clock()
        last = None
        while not stop.is_set() and self.clock() - start < DRAIN_MAX_S and self.clock() - changed < DRAIN_QUIET_S:
            self.step()
            taken = min(int(r.report.get("episodes") or 0) for r in learners)
            if taken >= wanted:
                return
            if taken != last:
                last, changed = taken, self.clock()
            if self.clock() >= next_status_s:
                on_status(self.status())
                next_status_s = self.clock() + every_s
            stop.wait(STEP_S)

    def outcome(self) -> int | None:
        """1 when a server or learner failed; 0/1 when every arm's role is done or failed
        (1 if one failed); None while the bring-up goes on."""
        if any(r.state == "failed" and r.spec.kind != "robot" for r in self.roles):
            return 1
        arms = [r for r in self.roles if r.spec.kind == "robot"]
        if arms and all(r.state in ("done", "failed") for r in arms):
            return int(any(r.state == "failed" for r in arms))
        return None

    def shutdown(self, hurry: threading.Event | None = None) -> None:
        """Stop every role in `STOP_ORDER`: SIGTERM to each of a kind, wait up to its
        `STOP_TIMEOUT_S` (less when `hurry` is set), SIGKILL what is left."""
        for kind in STOP_ORDER:
            group = [r for r in self.roles if r.spec.kind == kind and r.alive]
            for role in group:
                assert role.proc is not None
                role.state = "stopping"
                role.proc.send_signal(signal.SIGTERM)
            deadline = self.clock() + STOP_TIMEOUT_S[kind]
            while any(r.alive for r in group) and self.clock() < deadline and not (hurry and hurry.is_set()):
                time.sleep(0.05)
            for role in group:
                assert role.proc is not None
                if role.alive:
                    log.warning("%s did not stop within %.0f s: killing it", role.spec.name, STOP_TIMEOUT_S[kind])
                    role.proc.kill()
                role.exit_code = role.proc.wait()
        for role in self.roles:
            if role.state not in ("done", "failed"):
                role.state = "stopped"
            role.proc = None
            role.spec.probe.close()
        self.phase = "stopped"

    def status(self) -> dict:
        """The bring-up as data: its phase, uptime and first chunk (seconds since the
        supervisor started), and per role its state, pid, restarts, uptime, quiet time,
        last exit, report and (a role on a Ray node) its node."""
        now = self.clock()
        firsts = [r.first_chunk_s for r in self.roles if r.first_chunk_s is not None]
        return {
            "phase": self.phase,
            "time_s": time.time(),
            "uptime_s": round(now - self.started_s, 3),
            "first_chunk_s": round(min(firsts), 3) if firsts else None,
            "roles": {r.spec.name: self._role_status(r, now) for r in self.roles},
        }

    def _role_status(self, role: _Role, now: float) -> dict:
        alive = role.alive
        return {
            "kind": role.spec.kind,
            "state": role.state,
            "pid": role.proc.pid if alive and role.proc is not None else None,
            "restarts": max(role.starts - 1, 0),
            "uptime_s": round(now - role.started_s, 3) if alive else 0.0,
            "quiet_s": None if role.seen_s is None or not alive else round(max(now - role.seen_s, 0.0), 3),
            "exit_code": role.exit_code,
            "last_exit": role.last_exit,
            "first_chunk_s": role.first_chunk_s,
            "log": str(role.spec.log),
            **({} if role.spawner.node is None else {"node": role.spawner.node}),
            **role.spec.info,
            "report": role.report,
        }

    def _deps_up(self, role: _Role) -> bool:
        """Every role `role` comes after is up, or done (only a robot's role can be)."""
        states = {r.spec.name: r.state for r in self.roles}
        return all(states[name] in ("up", "done") for name in role.spec.after)

    def _start_if_due(self, role: _Role) -> None:
        now = self.clock()
        if role.state not in ("waiting", "restarting"):
            return
        failed = next((r.spec.name for r in self.roles if r.spec.name in role.spec.after and r.state == "failed"), None)
        if failed is not None:  # e.g. the recorder of its arm: it would wait for ever
            role.state, role.last_exit = "failed", {"error": f"{failed} failed", "at_s": round(now - self.started_s, 3)}
            log.error("%s is not started: %s failed", role.spec.name, failed)
            return
        if now < role.next_start_s or not self._deps_up(role):
            return
        argv = role.spec.launch.command(role.starts)
        if argv is None:
            role.state = "done"
            return
        try:
            role.proc = role.spawner.spawn(argv, role.spec.log, role.starts)
        except SpawnError as exc:
            role.state, role.last_exit = "failed", {"error": str(exc), "at_s": round(now - self.started_s, 3)}
            log.error("%s cannot be started: %s", role.spec.name, exc)
            return
        role.starts += 1
        role.started_s, role.up_s, role.state, role.exit_code = now, None, "starting", None
        if role.last_exit is not None:
            role.last_exit["restarted_at_s"] = round(now - self.started_s, 3)
        log.debug("%s started (pid %d)", role.spec.name, role.proc.pid)

    def _take_exit(self, role: _Role) -> None:
        if role.proc is None:
            return
        code = role.proc.poll()
        if code is None:
            return
        now = self.clock()
        role.proc, role.exit_code = None, code
        ran_s = now - role.started_s
        if role.spec.kind == "robot" and code == 0:
            role.state = "done"
            return
        role.deaths = 1 if ran_s >= STABLE_S else role.deaths + 1
        role.last_exit = {"code": code, "at_s": round(now - self.started_s, 3), "ran_s": round(ran_s, 3)}
        if role.deaths >= GIVE_UP_AFTER:
            role.state = "failed"
            log.error(
                "%s died %d times in a row (exit %d): not restarted; see %s",
                role.spec.name,
                role.deaths,
                code,
                role.spec.log,
            )
            return
        role.state = "restarting"
        role.next_start_s = now + backoff_s(role.deaths)
        log.warning(
            "%s exited with %d after %.1f s; restarting in %.1f s", role.spec.name, code, ran_s, role.next_start_s - now
        )

    def _observe(self, role: _Role) -> None:
        seen, role.report = role.spec.probe.check()
        first = role.report.get("first_chunk_monotonic_s")
        if role.first_chunk_s is None and isinstance(first, (int, float)) and first >= self.started_s:
            role.first_chunk_s = round(first - self.started_s, 3)
        if not role.alive or role.state in ("stopping", "stopped"):
            return
        now = self.clock()
        fresh = seen is not None and seen >= role.started_s
        if fresh and now - seen <= QUIET_S:  # type: ignore[operator]  # fresh: seen is a float
            role.seen_s = seen
            if role.up_s is None:
                role.up_s = now
                if role.last_exit is not None:
                    role.last_exit["up_at_s"] = round(now - self.started_s, 3)
            role.state = "up"
        elif role.up_s is not None:
            role.seen_s = seen
            role.state = "down"
        else:
            role.state = "starting"
