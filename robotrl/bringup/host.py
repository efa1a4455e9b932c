"""Where a role runs, as its plan needs to know: `RoleHost` is the address the role binds
and its peers reach, the ports free there, and how that machine's `time.monotonic()`
differs from this one's. `LocalHost` is this machine (loopback for `robotrl up` on one
machine, the node's IP for a Ray node answering for itself); under `--ray` each role's
Ray actor answers for its node (`robotrl.bringup.ray_cluster.RayHandle`).

Monotonic clocks of two machines are unrelated (each counts from its own boot), so an
arm's beacon, stamped with its node's clock, is read on that clock (its ages) and through
`NodeClockProbe` (when it last answered, in this machine's clock).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from robotrl.learn.launch import LOCAL, free_port_outside

if TYPE_CHECKING:
    from robotrl.bringup.probes import Probe


class RoleHost(Protocol):
    """The machine a role runs on."""

    @property
    def host(self) -> str:
        """An IP address of it that the role binds and its peers connect to, e.g. "10.0.0.5"."""
        ...

    @property
    def clock_offset_s(self) -> float:
        """Its `time.monotonic()` minus this machine's, seconds (0 here)."""
        ...

    def free_port(self, taken: set[int], pair: bool) -> int:
        """A port free there now and not in `taken` (with `pair`: its next one free too)."""
        ...

    def bindable(self, port: int) -> str | None:
        """None when `port` can be bound there now, else why not (one line)."""
        ...


@dataclass(frozen=True)
class LocalHost:
    """This machine, at `host` (one of its addresses; loopback by default)."""

    host: str = LOCAL
    clock_offset_s: float = 0.0

    def free_port(self, taken: set[int], pair: bool) -> int:
        return free_port_outside(taken, pair=pair, host=self.host)

    def bindable(self, port: int) -> str | None:
        from robotrl.core.errors import WireError
        from robotrl.wire.transport import check_bindable

        try:
            check_bindable(f"tcp://{self.host}:{port}")
        except WireError as exc:
            return str(exc)
        return None


class NodeClockProbe:
    """The probe of a role whose reports are stamped with the monotonic clock of a machine
    `offset_s` ahead of this one (an arm's `BeaconProbe`, made with that machine's clock
    for its ages): the times it reports (last answer, first chunk) in this machine's
    clock, as the supervisor compares them."""

    def __init__(self, inner: Probe, offset_s: float) -> None:
        self.inner, self.offset_s = inner, offset_s

    def check(self) -> tuple[float | None, dict]:
        seen, report = self.inner.check()
        first = report.get("first_chunk_monotonic_s")
        if isinstance(first, (int, float)):
            report = {**report, "first_chunk_monotonic_s": first - self.offset_s}
        return (None if seen is None else seen - self.offset_s), report

    def close(self) -> None:
        self.inner.close()
