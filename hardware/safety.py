"""`SafeRobot`: the only path to an arm's actuators.

Every command goes through, in order: NaN rejection, position limits (URDF limits shrunk
by a margin), a per-tick step clamp (velocity limit x control period, measured from the
last target sent), and an end-effector workspace box checked with pinocchio forward
kinematics. A watchdog holds the arm when commands stop; an e-stop latch holds it until
`reset_estop()`. Safety never raises out of a control loop with the arm moving: it holds
first, then raises.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

import numpy as np

from robotrl.core.clock import Clock, WallClock
from robotrl.core.errors import ConfigError, SafetyTrip
from robotrl.core.health import ArmHealth, HealthReporting
from robotrl.core.robot import Robot, RobotSpec, RobotState

if TYPE_CHECKING:
    from robotrl.hardware.kinematics import Kinematics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SafetyLimits:
    """Safety settings; every length in metres, angle in radians."""

    limit_margin_rad: float = 0.02
    """Distance kept from each URDF joint limit."""
    velocity_scale: float = 1.0
    """Multiplier on the spec's velocity limits for the per-tick step clamp (0, 1]."""
    workspace_min_m: tuple[float, float, float] = (-0.35, -0.45, 0.005)
    """Lower corner of the allowed end-effector box in the robot base frame."""
    workspace_max_m: tuple[float, float, float] = (0.50, 0.45, 0.45)
    """Upper corner of the allowed end-effector box."""
    watchdog_ms: float = 500.0
    """Hold when no command arrives for this long; 0 disables the watchdog."""
    warn_every_s: float = 1.0
    """At most one clamp warning per kind in this interval."""

    def __post_init__(self) -> None:
        if self.limit_margin_rad < 0:
            raise ConfigError("SafetyLimits.limit_margin_rad must be >= 0")
        if not 0 < self.velocity_scale <= 1:
            raise ConfigError("SafetyLimits.velocity_scale must be in (0, 1]")
        if np.any(np.asarray(self.workspace_min_m) >= np.asarray(self.workspace_max_m)):
            raise ConfigError("SafetyLimits.workspace_min_m must be below workspace_max_m")
        if self.watchdog_ms < 0:
            raise ConfigError("SafetyLimits.watchdog_ms must be >= 0")


@dataclass
class SafetyStats:
    """Counts of safety events since connect."""

    commands: int = 0
    nan_rejections: int = 0
    limit_clamps: int = 0
    step_clamps: int = 0
    workspace_clamps: int = 0
    watchdog_holds: int = 0
    estop_trips: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def clamp_to_limits(target: np.ndarray, lower: np.ndarray, upper: np.ndarray, margin: float) -> np.ndarray:
    """Clip (J,) `target` into [lower + margin, upper - margin] element-wise."""
    return np.minimum(np.maximum(target, lower + margin), upper - margin)


def clamp_step(previous: np.ndarray, target: np.ndarray, max_step: np.ndarray) -> np.ndarray:
    """Move from `previous` toward `target` by at most `max_step` per joint (all (J,))."""
    return previous + np.minimum(np.maximum(target - previous, -max_step), max_step)


def box_violation(point: np.ndarray, low: np.ndarray, high: np.ndarray) -> float:
    """Distance (m) from `point` (3,) to the box [low, high]; 0 inside."""
    outside = np.maximum(low - point, 0.0) + np.maximum(point - high, 0.0)
    return float(np.sqrt(outside @ outside))


def clamp_to_workspace(
    previous: np.ndarray, target: np.ndarray, ee_position, low: np.ndarray, high: np.ndarray, iters: int = 12
) -> np.ndarray:
    """The point on the segment previous -> target furthest along whose end effector is in
    the box (bisection, `ee_position(q) -> (3,)`). From outside the box, a target is
    accepted only if it gets no further out; otherwise `previous` is kept."""
    if box_violation(ee_position(target), low, high) == 0.0:
        return target
    start_violation = box_violation(ee_position(previous), low, high)
    if start_violation > 0.0:
        return target if box_violation(ee_position(target), low, high) < start_violation else previous
    lo, hi = 0.0, 1.0  # fraction of the step: lo is inside, hi outside
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if box_violation(ee_position(previous + mid * (target - previous)), low, high) == 0.0:
            lo = mid
        else:
            hi = mid
    return previous + lo * (target - previous)


@dataclass
class _Throttle:
    every_s: float
    last_s: dict[str, float] = field(default_factory=dict)

    def ready(self, key: str, now_s: float) -> bool:
        if now_s - self.last_s.get(key, -np.inf) >= self.every_s:
            self.last_s[key] = now_s
            return True
        return False


class SafeRobot:
    """Wraps any `Robot`; implements the same protocol with safety applied.

    Args:
        robot: the arm to protect.
        limits: safety settings.
        clock: time source for the watchdog (use the same clock as the control loop).
        kinematics: model for the workspace check; built from `robot.spec.name` if None.
    """

    def __init__(
        self,
        robot: Robot,
        limits: SafetyLimits = SafetyLimits(),
        *,
        clock: Clock | None = None,
        kinematics: Kinematics | None = None,
    ) -> None:
        self.robot = robot
        self.limits = limits
        self.clock = clock if clock is not None else getattr(robot, "clock", WallClock())
        if kinematics is None:  # pinocchio loads here, not on import: the pure clamps stay light
            from robotrl.hardware.kinematics import Kinematics
            from robotrl.hardware.models import get_arm

            kinematics = Kinematics(get_arm(robot.spec.name))
        self.kinematics = kinematics
        spec = robot.spec
        self._max_step = spec.max_velocity_rad_s * limits.velocity_scale * spec.dt_s
        self._low = np.asarray(limits.workspace_min_m, dtype=np.float64)
        self._high = np.asarray(limits.workspace_max_m, dtype=np.float64)
        self.stats = SafetyStats()
        self._throttle = _Throttle(limits.warn_every_s)
        self._lock = threading.RLock()
        self._last_target: np.ndarray | None = None
        self._last_command_s = 0.0
        self._commanded_s: float | None = None  # clock time of the last command sent (health)
        self._holding = False
        self._estop_reason: str | None = None
        self._watchdog_thread: threading.Thread | None = None
        self._stop = threading.Event()

    # -- Robot protocol ------------------------------------------------------------------
    @property
    def spec(self) -> RobotSpec:
        return self.robot.spec

    @property
    def is_connected(self) -> bool:
        return self.robot.is_connected

    def connect(self, *, watchdog_thread: bool = False) -> None:
        """Connect the robot; `watchdog_thread` also checks the watchdog in the background
        (for wall-clock loops on real arms, where a stuck loop never calls read())."""
        self.robot.connect()
        self.stats = SafetyStats()
        self._commanded_s = None
        self.resync()
        if watchdog_thread and self.limits.watchdog_ms > 0:
            self._stop.clear()
            self._watchdog_thread = threading.Thread(target=self._watchdog_loop, daemon=True, name="robotrl-watchdog")
            self._watchdog_thread.start()

    def disconnect(self) -> None:
        self._stop.set()
        if self._watchdog_thread is not None:
            self._watchdog_thread.join(timeout=1.0)
            self._watchdog_thread = None
        self.hold()
        self.robot.disconnect()

    def read(self) -> RobotState:
        with self._lock:
            self.check_watchdog()
            return self.robot.read()

    def command(self, target_rad: np.ndarray) -> np.ndarray:
        """Send (J,) targets after every safety stage; returns what the robot really got.
        Raises `SafetyTrip` (after holding) while the e-stop latch is set."""
        with self._lock:
            if self._estop_reason is not None:
                self.hold()  # no-op while already holding
                raise SafetyTrip(f"e-stop is latched ({self._estop_reason}); call reset_estop() first")
            if self._last_target is None:
                self.resync()
            previous = self._last_target
            if previous is None:  # resync() always sets it
                raise RuntimeError("resync() left no last target")
            target = np.array(target_rad, dtype=np.float64)
            spec = self.spec
            if target.shape != (spec.num_joints,):
                self.hold()
                raise ValueError(f"command needs shape ({spec.num_joints},), got {target.shape}")
            now_s = self.clock.now()
            if not np.isfinite(target).all():
                self._count("nan_rejections", now_s, "non-finite command replaced by the last target")
                target = np.where(np.isfinite(target), target, previous)
            limited = clamp_to_limits(target, spec.lower_rad, spec.upper_rad, self.limits.limit_margin_rad)
            if (limited != target).any():
                self._count("limit_clamps", now_s, "command clamped to joint limits")
            stepped = clamp_step(previous, limited, self._max_step)
            if (stepped != limited).any():
                self._count("step_clamps", now_s, "command step clamped to the velocity limit")
            safe = clamp_to_workspace(previous, stepped, self.kinematics.ee_position, self._low, self._high)
            if safe is not stepped:
                self._count("workspace_clamps", now_s, "command clamped to the workspace box")
            sent = self.robot.command(safe)
            self.stats.commands += 1
            self._last_target = np.asarray(sent, dtype=np.float64)
            self._last_command_s = self._commanded_s = now_s
            self._holding = False
            return sent

    def hold(self) -> None:
        """Hold position and make the measured position the step-clamp reference. Never
        raises. While already holding it does nothing, so the first hold target stays
        (re-holding at the measured position every tick would let a sagging arm creep)."""
        with self._lock:
            if self._holding:
                return
            self.robot.hold()
            self._holding = True
            try:
                self._last_target = self.robot.read().q_rad.copy()
            except Exception:  # keep the previous reference if the robot cannot be read
                log.exception("SafeRobot.hold could not read the robot")

    def health(self) -> ArmHealth:
        """The wrapped robot's health when it reports any (`HealthReporting`), and the
        seconds since the last command reached it (on this robot's clock). Never raises: a
        failed health read is logged and leaves the driver's part out."""
        with self._lock:
            report: ArmHealth = {}
            if isinstance(self.robot, HealthReporting):
                try:
                    report = self.robot.health().copy()
                except Exception:  # health must never stop the arm
                    log.exception("SafeRobot.health: the robot's health could not be read")
            then = self._commanded_s
            report["last_command_age_s"] = None if then is None else max(self.clock.now() - then, 0.0)
            return report

    # -- safety controls -----------------------------------------------------------------
    def resync(self) -> None:
        """Take the measured position as the reference for the step clamp."""
        with self._lock:
            self._last_target = self.robot.read().q_rad.copy()
            self._last_command_s = self.clock.now()

    def estop(self, reason: str = "e-stop pressed") -> None:
        """Hold now and latch: every command raises `SafetyTrip` until `reset_estop()`."""
        with self._lock:
            self.hold()
            if self._estop_reason is None:
                self.stats.estop_trips += 1
                log.error("e-stop: %s", reason)
            self._estop_reason = reason

    def reset_estop(self) -> None:
        with self._lock:
            self._estop_reason = None
            self.resync()

    @property
    def estopped(self) -> bool:
        return self._estop_reason is not None

    @property
    def holding(self) -> bool:
        """True after a hold (watchdog, e-stop, explicit) until the next command."""
        return self._holding

    def check_watchdog(self) -> bool:
        """Hold if no command arrived within `watchdog_ms`; True if it held now."""
        with self._lock:
            if self.limits.watchdog_ms <= 0 or self._holding or not self.robot.is_connected:
                return False
            if (self.clock.now() - self._last_command_s) * 1000.0 <= self.limits.watchdog_ms:
                return False
            self.hold()
            self.stats.watchdog_holds += 1
            log.warning("watchdog: no command for %.0f ms, holding", self.limits.watchdog_ms)
            return True

    def _watchdog_loop(self) -> None:
        period_s = self.limits.watchdog_ms / 4000.0
        while not self._stop.wait(period_s):
            self.check_watchdog()

    def _count(self, kind: str, now_s: float, message: str) -> None:
        setattr(self.stats, kind, getattr(self.stats, kind) + 1)
        if self._throttle.ready(kind, now_s):
            log.warning("%s (%d so far)", message, getattr(self.stats, kind))
