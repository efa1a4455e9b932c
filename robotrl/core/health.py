"""Runtime health as data: what arms, cameras, GPUs, servers and learners say about
themselves, as small typed dicts (JSON-able), and the pure maths behind the numbers.

Units: seconds, hertz, degrees Celsius, volts, MiB, percent; each key names its unit.
Three forms of an arm's health, one per hop:

1. `ArmHealth`: what a driver (`HealthReporting.health()`) says now, ages on its own clock;
2. `ArmStamps`: the same in a file another process reads (the actor's beacon): every age
   turned into the `time.monotonic()` it refers to (`to_stamps`; CLOCK_MONOTONIC is one
   clock for every process of a Linux machine);
3. `ArmReport`: the reader's view (`arm_report`): ages again, at the reader's now, so an
   arm or camera that stops is seen going stale even when nothing is written any more,
   and a state (`health_state`: up, or down once older than `STALE_S`).

Robot side: no torch, no mujoco.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Protocol, TypedDict, runtime_checkable

import numpy as np

STALE_S = 2.0
"""A camera whose newest frame, or an arm whose last command, is older than this is down,
seconds (the same limit as a quiet role's, `bringup.supervisor.QUIET_S`)."""
FPS_WINDOW_S = 2.0
"""A camera's frame rate counts the frames captured in the last this many seconds."""
MIB = 2**20
LEARNER_HEALTH_FILE = "health.json"
"""A learner's `LearnerHealth` file, in its run folder."""


class MotorReading(TypedDict):
    """One motor's last health reading."""

    temperature_c: float
    """Present_Temperature, degrees Celsius."""
    voltage_v: float
    """Present_Voltage, volts."""


class CameraHealth(TypedDict):
    """One camera as its reader sees it."""

    fps: float
    """New frames per second over the last `FPS_WINDOW_S` (0.0 with fewer than two)."""
    frame_age_s: float | None
    """Seconds since the newest frame was captured; None before the first."""


class ArmHealth(TypedDict, total=False):
    """What a driver reports (`HealthReporting.health`); keys it cannot know are left out."""

    last_command_age_s: float | None
    """Seconds since the last command reached the arm; None before the first."""
    bus_errors: int
    """Motor-bus reads and writes that failed since connect."""
    motors: dict[str, MotorReading]
    """Motor name -> its last temperature and voltage reading."""
    cameras: dict[str, CameraHealth]


class CameraStamp(TypedDict):
    fps: float
    frame_monotonic_s: float | None
    """`time.monotonic()` when the newest frame was captured; None before the first."""


class ArmStamps(TypedDict):
    """An `ArmHealth` as a file carries it (`to_stamps`); None: not reported."""

    last_command_monotonic_s: float | None
    bus_errors: int | None
    motors: dict[str, MotorReading] | None
    cameras: dict[str, CameraStamp]


class CameraReport(TypedDict):
    fps: float
    frame_age_s: float | None
    state: str
    """`health_state` of its newest frame's age: up, down (older than `STALE_S`), waiting."""


class ArmReport(TypedDict):
    """An arm's health at the reader's now (`arm_report`); None: not reported."""

    command_age_s: float | None
    """Seconds since the last command reached the arm."""
    arm_state: str
    """`health_state` of the last command's age: up, down (older than `STALE_S`), waiting."""
    bus_errors: int | None
    temperature_c_max: float | None
    """The hottest motor, degrees Celsius."""
    voltage_v_min: float | None
    """The lowest motor voltage, volts."""
    motors: dict[str, MotorReading] | None
    cameras: dict[str, CameraReport]


class GpuHealth(TypedDict):
    """The device a server or learner computes on."""

    device: str
    """"cpu" or "cuda:N"."""
    memory_used_mb: float | None
    """MiB in use on the whole GPU (every process: total - free); None on the CPU."""
    memory_total_mb: float | None
    utilization_pct: float | None
    """Percent of the last sample period a kernel ran (nvidia-smi's); None when unknown."""


class LearnerHealth(TypedDict):
    """A learner's live health file (`learner/health.json`), rewritten about every second."""

    monotonic_s: float
    """`time.monotonic()` of the write."""
    updates: int
    updates_per_s: float
    """Updates per second since the previous write."""
    version: int
    """Weight version last published."""
    buffer_transitions: int
    """Committed online transitions in the buffer."""
    buffer_samplable: int
    """Transitions the algorithm can sample (online and demo)."""
    staleness_mean: float | None
    """Mean staleness (learner version - data version) of the online rows of the last
    update's batch, versions; None before the first update."""
    gpu: GpuHealth


@runtime_checkable
class HealthReporting(Protocol):
    """An arm (or its driver) that reports its health. `health()` never raises and is cheap
    enough for the control loop's thread at a few calls per second; a driver reads slow
    registers (motor temperatures) at its own, lower rate."""

    def health(self) -> ArmHealth: ...


# -- the maths ---------------------------------------------------------------------------
def rate_per_s(count_then: float, count_now: float, dt_s: float) -> float:
    """Events per second between two counts `dt_s` seconds apart; 0.0 when dt_s <= 0.
    Example: 30 ticks then, 60 now, 1.5 s apart -> 20.0."""
    return (count_now - count_then) / dt_s if dt_s > 0 else 0.0


def rate_hz(stamps_s: Sequence[float]) -> float:
    """Frequency of events at increasing times `stamps_s` (seconds): intervals per second
    from the first to the last, (n - 1) / (last - first); 0.0 for fewer than two.
    Example: [0.0, 0.1, 0.2, 0.3] -> 3 intervals in 0.3 s -> 10.0."""
    if len(stamps_s) < 2 or stamps_s[-1] <= stamps_s[0]:
        return 0.0
    return (len(stamps_s) - 1) / (stamps_s[-1] - stamps_s[0])


def percentiles(samples: Sequence[float] | np.ndarray, qs: Sequence[float] = (50, 99)) -> dict[str, float]:
    """{"p50": ..., "p99": ...} of `samples` (linear interpolation, numpy's default), in
    the samples' unit; {} without samples. Example: 1..100, (50, 99) -> p50 50.5, p99 99.01."""
    values = np.asarray(samples, dtype=np.float64)
    if values.size == 0:
        return {}
    return {f"p{q:g}": float(np.percentile(values, q)) for q in qs}


def health_state(age_s: float | None, stale_s: float = STALE_S) -> str:
    """A device's state from `age_s`, the seconds since its last sign of life (a command, a
    frame): "up" at most `stale_s`, "down" over it, "waiting" when there was none (None)."""
    if age_s is None:
        return "waiting"
    return "down" if age_s > stale_s else "up"


def intervention_rate(intervened_ticks: Sequence[float], ticks: Sequence[float]) -> float | None:
    """Share of ticks under intervention over episodes (sum intervened / sum ticks);
    None without ticks. Example: (0, 1, 2, 3) of 20 ticks each -> 6 / 80 = 0.075."""
    total = float(sum(ticks))
    return float(sum(intervened_ticks)) / total if total > 0 else None


def motor_extremes(motors: Mapping[str, MotorReading] | None) -> tuple[float | None, float | None]:
    """(hottest temperature, degrees C; lowest voltage, V) of `motors`; (None, None) without."""
    if not motors:
        return None, None
    return max(m["temperature_c"] for m in motors.values()), min(m["voltage_v"] for m in motors.values())


def gpu_report(
    device: str,
    free_bytes: int | None = None,
    total_bytes: int | None = None,
    utilization_pct: float | None = None,
) -> GpuHealth:
    """A `GpuHealth` from what was measured (bytes; None: not measured): used = total - free,
    in MiB rounded to 0.1. Example: 60 GiB free of 80 GiB -> 20480.0 of 81920.0 MiB."""
    used = None if free_bytes is None or total_bytes is None else round((total_bytes - free_bytes) / MIB, 1)
    return {
        "device": device,
        "memory_used_mb": used,
        "memory_total_mb": round(total_bytes / MIB, 1) if total_bytes is not None else None,
        "utilization_pct": None if utilization_pct is None else float(utilization_pct),
    }


def to_stamps(health: ArmHealth, now_s: float) -> ArmStamps:
    """`health` measured at `now_s` (monotonic seconds) with each age turned into the time it
    refers to (now_s - age)."""
    age = health.get("last_command_age_s")
    return {
        "last_command_monotonic_s": None if age is None else now_s - age,
        "bus_errors": health.get("bus_errors"),
        "motors": health.get("motors"),
        "cameras": {
            name: {
                "fps": cam["fps"],
                "frame_monotonic_s": None if cam["frame_age_s"] is None else now_s - cam["frame_age_s"],
            }
            for name, cam in health.get("cameras", {}).items()
        },
    }


def arm_report(stamps: Mapping, now_s: float, stale_s: float = STALE_S) -> ArmReport:
    """The arm of `stamps` (an `ArmStamps`, e.g. read back from a file: missing keys are
    not reported) at `now_s` (monotonic seconds): ages, states, the motor extremes."""
    command_age = _age(now_s, stamps.get("last_command_monotonic_s"))
    motors = stamps.get("motors")
    hottest, lowest = motor_extremes(motors)
    cameras: dict[str, CameraReport] = {}
    for name, cam in (stamps.get("cameras") or {}).items():
        frame_age = _age(now_s, cam.get("frame_monotonic_s"))
        cameras[name] = {
            "fps": round(float(cam.get("fps") or 0.0), 2),
            "frame_age_s": frame_age,
            "state": health_state(frame_age, stale_s),
        }
    return {
        "command_age_s": command_age,
        "arm_state": health_state(command_age, stale_s),
        "bus_errors": stamps.get("bus_errors"),
        "temperature_c_max": hottest,
        "voltage_v_min": lowest,
        "motors": motors,
        "cameras": cameras,
    }


def _age(now_s: float, then_s: object) -> float | None:
    """now_s - then_s (never below 0), rounded to the millisecond; None for no time."""
    if not isinstance(then_s, (int, float)):
        return None
    return round(max(now_s - float(then_s), 0.0), 3)


class FrameMeter:
    """One camera's frames as its reader sees them: `note(stamp_s)` after each read with
    the capture time of the newest frame (a time seen before is the same frame); `health`
    gives the frame rate over the last `window_s` and the newest frame's age. All times on
    one clock of the caller's choice (seconds)."""

    def __init__(self, window_s: float = FPS_WINDOW_S) -> None:
        self.window_s = window_s
        self._stamps: deque[float] = deque()

    def note(self, stamp_s: float | None) -> None:
        if stamp_s is None or (self._stamps and stamp_s <= self._stamps[-1]):
            return
        self._stamps.append(float(stamp_s))
        while self._stamps[0] < stamp_s - self.window_s:
            self._stamps.popleft()

    def health(self, now_s: float) -> CameraHealth:
        recent = [s for s in self._stamps if s >= now_s - self.window_s]
        newest = self._stamps[-1] if self._stamps else None
        return {
            "fps": round(rate_hz(recent), 2),
            "frame_age_s": None if newest is None else round(max(now_s - newest, 0.0), 3),
        }
