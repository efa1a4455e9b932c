"""The scripted experts solve their tasks in the nominal scenario without ever needing
the safety layer (they stay inside the limits, the step limit and the workspace)."""

from __future__ import annotations

import numpy as np
import pytest

from robotrl.sim.env import TaskEnv

SEEDS = range(50)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["reach", "pick_place", "track"])
def test_expert_success_rate_nominal(task, capsys):
    env = TaskEnv(task, "nominal", cameras=())
    try:
        successes, ticks = [], []
        for seed in SEEDS:
            obs = env.reset(seed)
            expert = env.make_expert(seed)
            while True:
                st = env.step(expert.act(obs.state.q_rad))
                obs = st.obs
                if st.done:
                    break
            successes.append(st.success)
            ticks.append(st.obs.tick)
        rate = float(np.mean(successes))
        failed = [seed for seed, ok in zip(SEEDS, successes) if not ok]
        with capsys.disabled():  # show the rates even when output is captured
            print(
                f"\n{task} expert (nominal): success {rate:.0%} over {len(SEEDS)} seeds, "
                f"mean {np.mean(ticks):.0f} ticks, failed seeds {failed}"
            )
        assert rate >= 0.95, f"{task} expert succeeded in {rate:.0%}; failed seeds {failed}"
        stats = env.robot.stats
        # every expert tick went through SafeRobot untouched
        assert stats.commands == sum(ticks)
        assert {
            k: getattr(stats, k)
            for k in ("limit_clamps", "step_clamps", "workspace_clamps", "nan_rejections", "watchdog_holds")
        } == {"limit_clamps": 0, "step_clamps": 0, "workspace_clamps": 0, "nan_rejections": 0, "watchdog_holds": 0}
    finally:
        env.close()


def test_pick_place_phases_end_on_what_the_state_shows():
    """The grasp ends when the measured jaws close on the cube and the release when they
    open, not after hidden timers: a policy that sees only the state can time them."""
    from robotrl.sim.tasks.pick_place import GRIPPING_RAD, RELEASED_RAD

    env = TaskEnv("pick_place", "nominal", cameras=())
    try:
        obs = env.reset(3)
        expert = env.make_expert()
        switches = {}
        while True:
            before = expert.phase
            target = expert.act(obs.state.q_rad)
            if expert.phase != before:
                switches[before] = obs.state.q_rad[-1]
            st = env.step(target)
            obs = st.obs
            if st.done:
                break
        assert st.success
        assert switches["close"] < GRIPPING_RAD < switches["close"] + 0.12  # one gripper step past contact
        # the episode ends (cube in the bin, jaws clear of it) while the jaws open: the
        # release phase is current, or it ended on the jaws reading open
        assert expert.phase == "release" or switches["release"] > RELEASED_RAD
        assert switches["lower"] < GRIPPING_RAD  # carried all the way with the jaws closed
        assert obs.state.q_rad[-1] > switches["lower"] + 0.3  # and let go by opening them
        cube, _ = env.task.cube_pose(env.sim, env.task.target_color)
        assert cube[2] < 0.04  # the cube was let go into the bin
    finally:
        env.close()


@pytest.mark.parametrize("seed", [0, 3, 7])
def test_pick_place_jaws_turn_to_the_cube_and_stay_there(seed):
    """The wrist roll turns the jaw axis onto the cube's yaw (modulo the cube's quarter
    turn symmetry) and then holds it: no tick-to-tick roll oscillation in the targets."""
    from robotrl.sim.experts import ROLL, wrap_quarter

    env = TaskEnv("pick_place", "nominal", cameras=())
    try:
        obs = env.reset(seed)
        expert = env.make_expert()
        rolls, yaw_errors = [], []
        while expert.phase not in ("lift", "carry"):
            target = expert.act(obs.state.q_rad)
            rolls.append(target[ROLL])
            if expert.phase in ("descend", "close"):
                yaw_errors.append(wrap_quarter(expert.mover.jaw_yaw(target) - expert._yaw))
            obs = env.step(target).obs
        assert np.abs(yaw_errors).max() < 0.02  # about 1 degree off the cube's face
        steps = np.diff(rolls)
        flips = np.sum((steps[1:] * steps[:-1] < 0) & (np.abs(steps[1:]) > 0.01))
        assert flips <= 1, f"roll target reversed {flips} times: {np.round(steps, 3)}"
    finally:
        env.close()


def test_settling_counts_updates_without_progress():
    from robotrl.sim.tasks.pick_place import SETTLE_TICKS, Settling

    s = Settling(0.001)
    for value in (0.05, 0.03, 0.0125):  # still closing in
        s.update(value)
    assert s.stuck == 0 and not s.settled
    for i in range(SETTLE_TICKS):  # creeping: less than 1 mm below the best so far
        assert not s.settled
        s.update(0.0125 - 0.0002 * (i + 1))
    assert s.settled
    s.update(0.0)  # 12 mm closer: moving again
    assert not s.settled


def test_pick_place_expert_moves_on_when_a_soft_arm_settles_short():
    """In the shifted scenario (kp x0.7, mass x1.3) the arm sags short of the carry
    waypoint and the jaws stop on the cube above GRIPPING_RAD. The expert moves on once
    they settle, within a few ticks, instead of hovering for STALL_TICKS (hovers of random
    length in the intervener's corrections teach a policy to hover)."""
    from robotrl.sim.tasks.pick_place import GRIPPING_RAD, STALL_TICKS

    env = TaskEnv("pick_place", "shifted", cameras=())
    try:
        for seed in (0, 1):
            obs = env.reset(seed)
            expert = env.make_expert()
            waits, grip_at_lift = {}, None
            while True:
                before, wait = expert.phase, expert._wait
                target = expert.act(obs.state.q_rad)
                if expert.phase != before:
                    waits[before] = wait
                    if before == "close":
                        grip_at_lift = obs.state.q_rad[-1]
                st = env.step(target)
                obs = st.obs
                if st.done:
                    break
            assert st.success
            assert grip_at_lift > GRIPPING_RAD  # the shifted jaws never read "gripping"...
            assert max(waits.values()) < STALL_TICKS - 10, waits  # ...yet no phase waited for the stall
    finally:
        env.close()


@pytest.mark.parametrize("scenario", ["nominal", "shifted"])
def test_pick_place_expert_grasps_again_a_cube_it_lost(scenario):
    """A cube that leaves the jaws during the carry (here the jaws are forced open for 8
    ticks and it drops) is picked up again where it lies, as a person would, instead of
    being carried nowhere."""
    from robotrl.sim.tasks.pick_place import HOLDING_PHASES

    env = TaskEnv("pick_place", scenario, cameras=())
    try:
        obs = env.reset(3)
        expert = env.make_expert()
        phases = []
        while True:
            target = expert.act(obs.state.q_rad).copy()
            phases.append(expert.phase)
            if phases[-1] == "carry" and 3 <= phases.count("carry") <= 10:
                target[-1] = 0.9  # open: the cube drops
            st = env.step(target)
            obs = st.obs
            if st.done:
                break
        assert st.success
        dropped = phases.index("carry") + 3
        regrasp = phases.index("above_cube", dropped)
        assert regrasp - dropped < 15  # noticed within half a second of the drop
        assert not any(p in HOLDING_PHASES for p in phases[dropped + 8 : regrasp])
        assert "close" in phases[regrasp:] and phases[-1] in ("release", "retreat")
    finally:
        env.close()


def test_track_ball_moves_smoothly_and_success_is_judged_on_the_last_two_seconds():
    from robotrl.sim.tasks.track import TRACK_M, WINDOW_TICKS

    env = TaskEnv("track", "nominal", cameras=())
    try:
        obs = env.reset(7)
        task = env.task
        expert = env.make_expert()
        balls, states, within, successes = [], [], [], []
        while True:
            st = env.step(expert.act(obs.state.q_rad))
            obs = st.obs
            balls.append(task.ball_m(env.tick))
            states.append(env.env_state())
            within.append(st.info["distance_m"] < TRACK_M)
            successes.append(st.success)
            if st.done:
                break
        env.reset(7)
        other = TaskEnv("track", "nominal", cameras=())
        other.reset(7)
        np.testing.assert_array_equal(env.env_state(), other.env_state())  # the seed fixes the path
        other.reset(8)
        assert not np.allclose(env.env_state(), other.env_state())
        other.close()
    finally:
        env.close()
    balls, states = np.array(balls), np.array(states)
    assert len(balls) == task.max_ticks and successes[-1] and not any(successes[:-1])  # judged at the end only
    speed = np.linalg.norm(np.diff(balls, axis=0), axis=1) * 30
    assert 0.05 < speed.max() < 0.3  # it moves, at most about 0.2 m/s
    # env_state is (position, velocity); the velocity matches the path's finite difference
    np.testing.assert_allclose(states[:, :3], balls, atol=1e-6)
    np.testing.assert_allclose(states[1:-1, 3:], (balls[2:] - balls[:-2]) * 15, atol=0.01)
    assert np.mean(within[-WINDOW_TICKS:]) >= 0.8


def test_calibrate_expert_holds_every_planned_view_untouched_by_the_safety_layer():
    """The chessboard rehearsal: each seed plans `VIEWS` views (the board whole in the
    gripper camera, checked by rendering in tests/record/test_board_views.py); the expert
    holds them all within the episode, never clamped, each a pause that
    `robotrl calibrate-cameras` finds in the measured joints."""
    from robotrl.record.board_views import still_frames
    from robotrl.sim.tasks.calibrate import VIEWS

    env = TaskEnv("calibrate", "nominal", cameras=())
    try:
        for seed in range(3):
            obs = env.reset(seed)
            assert len(env.task.views_rad) == VIEWS
            expert, states = env.make_expert(), [obs.state.q_rad]
            while True:
                st = env.step(expert.act(obs.state.q_rad))
                obs = st.obs
                states.append(obs.state.q_rad)
                if st.done:
                    break
            assert st.success and st.info["views_held"] == VIEWS and obs.tick < env.task.max_ticks
            pauses = np.array(states)[still_frames(np.array(states))]
            for view in env.task.views_rad:  # the start pose may pause too
                assert np.abs(pauses[:, :-1] - view[:-1]).max(1).min() < 0.01
        stats = env.robot.stats
        assert (stats.limit_clamps, stats.step_clamps, stats.workspace_clamps) == (0, 0, 0)
    finally:
        env.close()
