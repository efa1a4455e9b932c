"""Before each episode on a real arm: the move to where the policy's training episodes
started, then the reset period.

A policy learned from demonstrations that all start at one pose (the simulated arm's
home, or wherever a person put the arm before recording) has seen little else: started
where the last episode left the arm, e.g. over the bin, the pixel pick_place policy
fails every scene (docs/results.md section 17). A simulated arm is put there at each
reset (`TaskEnv(start_rad=)`); a real arm is driven there, slowly and through `SafeRobot`,
as lerobot's reset period has a person (or HIL-SERL's fixed reset pose has the robot) do.

The reset period then holds the arm still while a person sets the scene up, so the
episode's first observation already shows the scene it is scored on: a scene changed
one tick into the episode costs the pixel pick_place policy every episode through the
server (docs/results.md section 18).
"""

from __future__ import annotations

import logging
import math

import numpy as np

from robotrl.core.clock import Clock, Rate
from robotrl.hardware.safety import SafeRobot

log = logging.getLogger(__name__)

START_SPEED_RAD_S = 0.8
"""Peak speed of the joint that moves furthest on the way to the start pose, rad/s."""
SETTLE_S = 0.5
"""Holding the start pose this long lets the servos catch up with their last target, s."""
NEAR_RAD = 0.03
"""An arm within this of the start pose on every joint starts where it stands, rad."""


def path_to(q_from_rad: np.ndarray, q_to_rad: np.ndarray, max_speed_rad_s: float, dt_s: float) -> np.ndarray:
    """(N, J) joint targets, one per tick of `dt_s` seconds, along the straight joint-space
    line from (J,) `q_from_rad` to (J,) `q_to_rad`: a cosine speed profile (at rest at both
    ends) whose peak is `max_speed_rad_s` on the joint that moves furthest. The last row
    is `q_to_rad`; N >= 1."""
    q_from, q_to = np.asarray(q_from_rad, np.float64), np.asarray(q_to_rad, np.float64)
    distance = float(np.max(np.abs(q_to - q_from)))
    duration_s = math.pi * distance / (2.0 * max_speed_rad_s)  # peak of (1 - cos(pi t / T)) / 2 * d
    n = max(1, math.ceil(duration_s / dt_s))
    s = (1.0 - np.cos(np.pi * np.arange(1, n + 1) / n)) / 2.0
    return q_from + s[:, None] * (q_to - q_from)


def move_to_start(robot: SafeRobot, clock: Clock, start_rad: np.ndarray) -> float:
    """Drive `robot` to (J,) `start_rad` along `path_to` at its control rate, then hold it
    there `SETTLE_S`; seconds it took on `clock` (0 when the arm was already there)."""
    rate_hz = robot.spec.control_rate_hz
    q = robot.read().q_rad
    start = np.asarray(start_rad, np.float64)
    if np.max(np.abs(q - start)) <= NEAR_RAD:
        log.info("the arm is at the policy's start pose")
        return 0.0
    began_s = clock.now()
    _drive(robot, clock, path_to(q, start, START_SPEED_RAD_S, 1.0 / rate_hz))
    hold_still(robot, clock, start, SETTLE_S)
    took_s = clock.now() - began_s
    log.info("moved to the policy's start pose in %.1f s", took_s)
    return took_s


def hold_still(robot: SafeRobot, clock: Clock, target_rad: np.ndarray, seconds: float) -> None:
    """Command (J,) `target_rad` at the control rate for `seconds` (at least one tick when
    `seconds` > 0): the servos settle on it, and `SafeRobot`'s watchdog sees commands."""
    ticks = math.ceil(seconds * robot.spec.control_rate_hz)
    _drive(robot, clock, np.repeat(np.asarray(target_rad, np.float64)[None], ticks, axis=0))


def _drive(robot: SafeRobot, clock: Clock, rows: np.ndarray) -> None:
    """Command the (N, J) `rows` one per tick at the robot's control rate on `clock`."""
    rate = Rate(clock, robot.spec.control_rate_hz)
    for row in rows:
        robot.command(row)
        rate.sleep()
