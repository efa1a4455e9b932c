"""Chunk maths of asynchronous chunked inference (docs/algorithms.md section 1).

Pure functions on numpy arrays: state forwarding and the conditioning state (VLASH), splicing chunks into an action
queue keyed by absolute control tick, the request rule, the delay estimate, the RTC
guidance weights and the smoothness metrics of docs/benchmarks.md. Robot side: no torch, no
mujoco. Angles are radians, times are control ticks.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from robotrl.core.policy import ActionChunk
from robotrl.hardware.safety import clamp_step

BLEND_OLD = 0.3
"""Weight of the queued row where naive splicing blends overlapping rows (lerobot)."""
SPLICE_MODES = ("replace", "blend")
FORWARD_MODES = ("absolute", "delta")


def forward_state(
    state_rad: np.ndarray,
    in_flight_rad: np.ndarray,
    delay_ticks: int,
    mode: str = "absolute",
    max_step_rad: np.ndarray | float | None = None,
) -> np.ndarray:
    """The state the robot will have when a chunk requested now starts (VLASH).

    Args:
        state_rad: (J,) state at the request tick t (for the step clamp: the last target sent).
        in_flight_rad: (n, J) queued actions for ticks t, t+1, ...; only the first
            min(n, d) count. With n < d the robot holds the last one until the chunk starts.
        delay_ticks: d, ticks until the new chunk's row 0 executes.
        mode: "absolute" (joint-position targets: s_hat = a_(t+d-1)) or "delta"
            (s_hat = s_t + sum(a_t .. a_(t+d-1))).
        max_step_rad: (J,) or scalar per-tick step limit; walks from `state_rad` through the
            in-flight actions applying the safety layer's `clamp_step`. None: no clamp.

    Returns:
        (J,) forwarded state; a copy of `state_rad` when d == 0 or nothing is in flight.
    """
    if mode not in FORWARD_MODES:
        raise ValueError(f"forward_state mode must be one of {FORWARD_MODES}, got {mode!r}")
    if delay_ticks < 0:
        raise ValueError(f"delay_ticks must be >= 0, got {delay_ticks}")
    state = np.array(state_rad, dtype=np.float64)
    rows = np.asarray(in_flight_rad, dtype=np.float64).reshape(-1, state.shape[0])[:delay_ticks]
    if len(rows) == 0:
        return state
    if max_step_rad is None:
        return rows[-1].copy() if mode == "absolute" else state + rows.sum(axis=0)
    limit = np.broadcast_to(np.asarray(max_step_rad, dtype=np.float64), state.shape)
    for row in rows:
        state = clamp_step(state, row if mode == "absolute" else state + row, limit)
    return state


def conditioning_state(
    measured_rad: np.ndarray,
    last_target_rad: np.ndarray,
    in_flight_rad: np.ndarray,
    delay_ticks: int,
    max_step_rad: np.ndarray | float | None = None,
) -> np.ndarray:
    """The state a VLASH fast pathway conditions on, for a chunk requested at tick t whose
    row 0 executes at t + d. One definition, used by the executor (stepped and real time,
    local or through a server) and by training's offset augmentation
    (`robotrl.train.sampling.conditioning_state_rows`, with k in place of d):

    - d = 0: the measured joints q_t (then vlash conditions exactly as naive async does);
    - d > 0: the target commanded for tick t + d - 1, a_(t+d-1): the last row of the plan
      for ticks t .. t+d-1 (held when the plan is shorter), walked with the safety step
      clamp from the last target sent (`forward_state`, absolute).

    A position-servoed arm lags its targets, so for d > 0 this is where the arm was told to
    be, not where it is; training sees the same quantity (the recorded action of frame
    t + k - 1), so the policy is never fed a kind of state it was not trained on.

    Args:
        measured_rad: (J,) joints measured at tick t.
        last_target_rad: (J,) the last target sent (tick t - 1), where the walk starts.
        in_flight_rad: (n, J) targets planned for ticks t, t + 1, ...
        delay_ticks: d >= 0.

    Returns:
        (J,) a new array.
    """
    if delay_ticks == 0:
        return np.array(measured_rad, dtype=np.float64)
    return forward_state(last_target_rad, in_flight_rad, delay_ticks, max_step_rad=max_step_rad)


def carry_lag(
    forwarded_rad: np.ndarray, target_rad: np.ndarray, measured_rad: np.ndarray, deadband_rad: np.ndarray | float
) -> np.ndarray:
    """The forwarded state moved by the part of the arm's tracking error beyond a deadband.

    VLASH forwards the targets, as if the arm reached each one. A slow servo, a load or a
    finger resting on an object leaves the arm e = measured - target away from them;
    where |e| exceeds the deadband, the excess is added to the forwarded state, so the
    policy sees where the arm is stuck rather than where it was told to go. Ordinary
    tracking (|e| within the deadband) leaves the forwarded state as it is.

    Args:
        forwarded_rad: (J,) state forwarded to the chunk's first tick (`forward_state`).
        target_rad: (J,) the target for the request tick (its in-flight row after the
            step clamp; the last target sent when nothing is in flight).
        measured_rad: (J,) joints measured at the request tick.
        deadband_rad: (J,) or scalar, >= 0; np.inf leaves a joint's forward as it is.

    Returns:
        (J,) forwarded + e - clip(e, -deadband, deadband).
    """
    band = np.asarray(deadband_rad, dtype=np.float64)
    if np.any(band < 0):
        raise ValueError(f"deadband_rad must be >= 0, got {deadband_rad}")
    error = np.asarray(measured_rad, dtype=np.float64) - np.asarray(target_rad, dtype=np.float64)
    return np.asarray(forwarded_rad, dtype=np.float64) + error - np.clip(error, -band, band)


def arm_deadband(num_joints: int, deadband_rad: float | None) -> np.ndarray | None:
    """(J,) `carry_lag` deadband: `deadband_rad` for the arm joints, np.inf for the
    gripper (the last joint; a grip closed on an object always lags its target); None
    (no deadband: forward the targets alone) for None."""
    if deadband_rad is None:
        return None
    if num_joints < 1 or deadband_rad < 0:
        raise ValueError(f"need num_joints >= 1 and deadband_rad >= 0, got {num_joints}, {deadband_rad}")
    band = np.full(num_joints, float(deadband_rad))
    band[-1] = np.inf
    return band


def splice(queue: dict[int, np.ndarray], chunk: ActionChunk, now_tick: int, mode: str = "replace") -> int:
    """Put `chunk` into `queue` (absolute tick -> (J,) target) in place.

    Rows for ticks < `now_tick` are dropped (they are past). From the first kept row's
    tick on, the queue holds exactly the chunk's ticks (queued rows past the chunk's end
    are removed, as lerobot does). "replace" (VLASH): the chunk's rows overwrite.
    "blend" (naive async): where a row was queued, 0.3 * old + 0.7 * new.

    Returns:
        The number of dropped rows, max(0, now_tick - chunk.start_tick) capped at H.
    """
    if mode not in SPLICE_MODES:
        raise ValueError(f"splice mode must be one of {SPLICE_MODES}, got {mode!r}")
    actions = np.asarray(chunk.actions_rad, dtype=np.float64)
    dropped = min(max(0, now_tick - chunk.start_tick), len(actions))
    if dropped == len(actions):
        return dropped
    first_tick = chunk.start_tick + dropped
    old = {t: queue.pop(t) for t in [t for t in queue if t >= first_tick]}
    for i in range(dropped, len(actions)):
        tick = chunk.start_tick + i
        row = actions[i].copy()
        if mode == "blend" and tick in old:
            row = BLEND_OLD * old[tick] + (1.0 - BLEND_OLD) * row
        queue[tick] = row
    return dropped


def splice_mode(sync: bool, delay_ticks: int) -> str:
    """How a reply joins the queue (`splice`). `delay_ticks` is the request's forwarding
    (`PolicyObservation.delay_ticks`): 0 for naive async at any real delay, the estimated
    d for vlash. An async chunk forwarded over 0 ticks was planned from the measured state
    and keyed at its observation tick, as naive async (lerobot) does, and blends where rows
    were queued; one forwarded over d > 0 ticks was planned from the end of the queued
    rows (VLASH) and replaces them. So vlash at d = 0 is exactly naive async. A sync chunk
    starts on an empty queue."""
    return "blend" if delay_ticks == 0 and not sync else "replace"


def should_request(remaining_rows: int, horizon: int, threshold: float, in_flight: int, max_in_flight: int = 1) -> bool:
    """Ask for a new chunk when remaining / H <= threshold (lerobot's
    chunk_size_threshold) and fewer than `max_in_flight` requests are in flight.
    threshold 1: always re-plan."""
    if horizon <= 0:
        raise ValueError(f"horizon must be positive, got {horizon}")
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    return in_flight < max_in_flight and remaining_rows / horizon <= threshold


DEFAULT_THRESHOLD = 0.5
"""Request threshold for a policy that does not say how many rows it runs (lerobot's
`chunk_size_threshold` default)."""


def policy_threshold(horizon: int, execute_steps: int) -> float:
    """The request threshold that re-plans once the s rows a policy was trained to run
    before the next request (`PolicyMetadata.execute_steps`) are used: 1 - s / H;
    `DEFAULT_THRESHOLD` when it does not say (s = 0) or runs whole chunks (s >= H)."""
    if horizon <= 0:
        raise ValueError(f"horizon must be positive, got {horizon}")
    return 1.0 - execute_steps / horizon if 0 < execute_steps < horizon else DEFAULT_THRESHOLD


class DelayEstimator:
    """Inference delay d in ticks that vlash plans for: a windowed low percentile of the
    measured delays.

    A reply later than d drops its first rows (the arm ran the old plan meanwhile, as in
    naive async); one earlier than d waits for its tick, so the arm executes rows planned
    from an observation older than needed. A moving world punishes the wait more than the
    dropped rows: a pixel track policy under U{2..6} follows 45 of 50 seeds at the 5th
    percentile, 30 at the 95th (docs/results.md section 26). Never the window's extreme: one
    odd call (a warm-up, a cache hit) would then set d for the whole window.

    Args:
        window: keep the last `window` measurements.
        warmup: ignore the first `warmup` measurements (compilation, cache warm-up).
        percentile: the estimate is this percentile of the window (an observed value).
        initial_ticks: the estimate before any measurement counts.
    """

    def __init__(self, window: int = 20, warmup: int = 1, percentile: float = 5.0, initial_ticks: int = 0) -> None:
        if window <= 0 or warmup < 0 or initial_ticks < 0 or not 0 <= percentile <= 100:
            raise ValueError("DelayEstimator needs window > 0, warmup >= 0, initial_ticks >= 0, percentile in [0, 100]")
        self.percentile = percentile
        self.initial_ticks = initial_ticks
        self._skip = warmup
        self._window: deque[int] = deque(maxlen=window)

    def add(self, delay_ticks: int) -> None:
        """Record one measured delay (reply tick - request tick)."""
        if self._skip > 0:
            self._skip -= 1
            return
        self._window.append(int(delay_ticks))

    def estimate(self) -> int:
        if not self._window:
            return self.initial_ticks
        return int(np.percentile(np.asarray(self._window), self.percentile, method="higher"))


def rtc_weights(horizon: int, execute_horizon: int, delay_ticks: int) -> np.ndarray:
    """(H,) RTC guidance weights: 1 for the d frozen rows (i < d), an exponential decay
    c_i (e^c_i - 1) / (e - 1) with c_i = (H - s - i) / (H - s - d + 1) for d <= i < H - s,
    0 for the free tail i >= H - s."""
    h, s, d = horizon, execute_horizon, delay_ticks
    if h <= 0 or not 0 <= s <= h or d < 0:
        raise ValueError(f"rtc_weights needs H > 0, 0 <= s <= H, d >= 0; got H={h}, s={s}, d={d}")
    i = np.arange(h, dtype=np.float64)
    c = (h - s - i) / max(h - s - d + 1, 1)
    soft = c * np.expm1(c) / np.expm1(1.0)
    return np.where(i < d, 1.0, np.where(i < h - s, soft, 0.0))


def _mean_step(targets_rad: np.ndarray) -> np.ndarray:
    """(T,) mean over joints of |a_k - a_(k-1)|; entry 0 is NaN (no previous tick)."""
    steps = np.full(len(targets_rad), np.nan)
    steps[1:] = np.abs(np.diff(targets_rad, axis=0)).mean(axis=1)
    return steps


def _ratio(values: np.ndarray, near: np.ndarray, valid: np.ndarray) -> float:
    """mean(values[near & valid]) / mean(values[~near & valid]); NaN if undefined."""
    top, bottom = values[near & valid], values[~near & valid]
    if len(top) == 0 or len(bottom) == 0 or bottom.mean() <= 1e-9 * top.mean():  # 0 but for rounding
        return float("nan")
    return float(top.mean() / bottom.mean())


def boundary_discontinuity_ratio(targets_rad: np.ndarray, switch_ticks) -> float:
    """Mean |a_k - a_(k-1)| (averaged over joints) at the indices k where a new chunk took
    over, divided by the same at every other index k >= 1. About 1 is seamless.

    Args:
        targets_rad: (T, J) requested targets, one row per tick.
        switch_ticks: indices k into `targets_rad` where row k came from a new chunk.
    """
    targets = np.asarray(targets_rad, dtype=np.float64)
    near = np.zeros(len(targets), dtype=bool)
    near[[k for k in switch_ticks if 0 < k < len(targets)]] = True
    return _ratio(_mean_step(targets), near, np.arange(len(targets)) >= 1)


def boundary_jerk_ratio(targets_rad: np.ndarray, switch_ticks) -> float:
    """RMS jerk within one tick of a switch / RMS jerk elsewhere (per tick^3; the ratio
    does not depend on dt). Jerk at k: a_(k+1) - 3 a_k + 3 a_(k-1) - a_(k-2), so a jump
    between k-1 and k shows at k-1, k and k+1.

    Args:
        targets_rad: (T, J) requested targets.
        switch_ticks: indices k where row k came from a new chunk.
    """
    a = np.asarray(targets_rad, dtype=np.float64)
    t = len(a)
    squared = np.zeros(t)
    if t >= 4:
        jerk = a[3:] - 3 * a[2:-1] + 3 * a[1:-2] - a[:-3]  # row m is the jerk at k = m + 2
        squared[2:-1] = (jerk**2).mean(axis=1)
    valid = np.zeros(t, dtype=bool)
    valid[2 : max(t - 1, 2)] = True
    near = np.zeros(t, dtype=bool)
    for k in switch_ticks:
        near[max(k - 1, 0) : min(k + 2, t)] = True
    ratio = _ratio(squared, near, valid)
    return float(np.sqrt(ratio)) if np.isfinite(ratio) else ratio


def prefix_consistency(previous: ActionChunk, new: ActionChunk, rows: int) -> float:
    """Mean |new row i - previous row for the same tick| over the new chunk's rows
    0..rows-1 that the previous chunk covers (radians); NaN when none overlap."""
    prev = np.asarray(previous.actions_rad, dtype=np.float64)
    cur = np.asarray(new.actions_rad, dtype=np.float64)
    offset = new.start_tick - previous.start_tick  # previous row index of new row 0
    idx = [i for i in range(min(rows, len(cur))) if 0 <= i + offset < len(prev)]
    if not idx:
        return float("nan")
    return float(np.abs(cur[idx] - prev[[i + offset for i in idx]]).mean())
