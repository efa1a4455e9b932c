"""Driving a real arm to the policy's start pose before each episode (`ArmTask`), here on
the simulated arm behind `SafeRobot` on a stepped clock."""

from __future__ import annotations

import numpy as np
import pytest

from robotrl.inference.runner import ArmTask
from robotrl.inference.start_pose import NEAR_RAD, SETTLE_S, START_SPEED_RAD_S, move_to_start, path_to
from robotrl.sim.env import TaskEnv


def test_the_path_is_a_straight_line_at_rest_at_both_ends_and_never_faster_than_asked() -> None:
    q0, q1 = np.array([0.0, -1.2, 1.1, 1.3, 0.0, 0.0]), np.array([0.9, 0.3, -0.2, 1.3, 1.5, 0.5])
    rows = path_to(q0, q1, max_speed_rad_s=0.8, dt_s=1 / 30)
    # the widest move is 1.5 rad: pi * 1.5 / (2 * 0.8) = 2.945 s = 88.4 -> 89 ticks
    assert rows.shape == (89, 6)
    np.testing.assert_allclose(rows[-1], q1)
    steps = np.abs(np.diff(np.vstack([q0, rows]), axis=0))
    assert steps.max() <= 0.8 / 30 + 1e-12 and steps[0].max() < 0.01 and steps[-1].max() < 0.01
    # one line in joint space: every row is q0 + s (q1 - q0) with s rising from 0 to 1
    s = (rows - q0)[:, 4] / (q1 - q0)[4]
    np.testing.assert_allclose(rows, q0 + s[:, None] * (q1 - q0), atol=1e-12)
    assert np.all(np.diff(s) > 0)
    np.testing.assert_allclose(path_to(q1, q1, 0.8, 1 / 30), q1[None])


def test_each_episode_of_an_arm_task_begins_at_the_start_pose() -> None:
    env = TaskEnv("reach", cameras=())
    env.begin(0)
    start = np.array([0.4, -0.6, 0.8, 1.0, -0.5, 0.3])
    task = ArmTask(env.robot, "touch the red ball", env.clock, start)
    began_s = env.clock.now()
    assert task.begin(0) == "touch the red ball"
    took_s = env.clock.now() - began_s
    q = env.robot.read().q_rad
    assert np.max(np.abs(q - start)) < NEAR_RAD, q - start
    # shoulder_lift moves furthest, 0.6 rad: pi * 0.6 / (2 * 0.8) = 1.18 s on the way, then the settle
    assert took_s == pytest.approx(np.pi * 0.6 / (2 * START_SPEED_RAD_S) + SETTLE_S, abs=0.07)
    assert env.robot.stats.step_clamps == 0  # slow enough for SafeRobot's own limits
    assert move_to_start(env.robot, env.clock, start) == 0.0  # already there: the arm starts as it stands


def test_an_arm_task_needs_a_clock_to_move() -> None:
    env = TaskEnv("reach", cameras=())
    with pytest.raises(ValueError, match="needs the arm's clock"):
        ArmTask(env.robot, "x", None, np.zeros(6))


def test_the_reset_period_holds_the_arm_at_the_start_pose_after_asking_for_the_next_scene() -> None:
    env = TaskEnv("reach", cameras=())
    env.begin(0)
    start = np.array([0.4, -0.6, 0.8, 1.0, -0.5, 0.3])
    asked: list[tuple[float, int]] = []  # (clock, commands so far) when the scene was asked for
    task = ArmTask(
        env.robot, "x", env.clock, start, reset_s=1.0, on_reset=lambda: asked.append((env.clock.now(), commands()))
    )

    def commands() -> int:
        return env.robot.stats.commands

    began_s = env.clock.now()
    task.begin(0)
    took_s = env.clock.now() - began_s
    moved_s = np.pi * 0.6 / (2 * START_SPEED_RAD_S) + SETTLE_S
    assert len(asked) == 1 and asked[0][0] - began_s == pytest.approx(moved_s, abs=0.07)  # after the move
    assert took_s == pytest.approx(moved_s + 1.0, abs=0.07)  # then 1 s held: 30 commands at 30 Hz
    assert commands() - asked[0][1] == 30
    assert np.max(np.abs(env.robot.read().q_rad - start)) < NEAR_RAD  # still at the start pose
    # Without a start pose the arm holds where it stands; a reset needs a clock and >= 0 s.
    here = env.robot.read().q_rad
    ArmTask(env.robot, "x", env.clock, reset_s=0.5).begin(1)
    assert np.max(np.abs(env.robot.read().q_rad - here)) < NEAR_RAD
    with pytest.raises(ValueError, match="needs the arm's clock"):
        ArmTask(env.robot, "x", None, reset_s=1.0)
    with pytest.raises(ValueError, match="reset_s must be >= 0"):
        ArmTask(env.robot, "x", env.clock, reset_s=-1.0)


def test_an_arm_already_at_its_start_pose_is_commanded_before_the_next_scene_is_asked_for() -> None:
    """A twin counts a scene only when the arm was driven from its first tick: an arm that
    starts at its start pose (no move) is commanded to stay before `on_reset`, not one
    tick or more after it (a race under load: the twin's scene began undriven)."""
    env = TaskEnv("reach", cameras=())
    env.begin(0)
    start = env.robot.read().q_rad
    asked: list[int] = []
    task = ArmTask(
        env.robot, "x", env.clock, start, reset_s=0.3, on_reset=lambda: asked.append(env.robot.stats.commands)
    )
    before = env.robot.stats.commands
    task.begin(0)
    assert asked == [before + 1]  # one command (stay here), then the scene, then the hold
    assert env.robot.stats.commands - asked[0] == 9  # 0.3 s at 30 Hz
    assert np.max(np.abs(env.robot.read().q_rad - start)) < NEAR_RAD
