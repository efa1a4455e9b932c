"""Contract tests over every simulated preset (dm_control `suite_test.py` style).

Presets: a `SimRobot` for each arm in `ARMS`, with the default cameras (shrunk to 64x64)
and state-only; a `TaskEnv` (state-only) for each task x scenario. Every one must: have a
spec readable before connect, return observations that match the spec, return from
`command` what it really sent and respect the limits, repeat a trajectory exactly for
the same seed, stay finite under random commands through `SafeRobot`, and never raise
from `hold()`.
"""

from __future__ import annotations

import numpy as np
import pytest

from robotrl.core.errors import DeviceNotConnected
from robotrl.core.robot import CameraSpec, Robot, RobotSpec
from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.models import ARMS
from robotrl.hardware.safety import SafeRobot, SafetyLimits, box_violation
from robotrl.hardware.sim_arm.robot import DEFAULT_CAMERAS, HOME_Q_RAD, SimRobot
from robotrl.sim.env import TaskEnv
from robotrl.sim.scenario import SCENARIOS
from robotrl.sim.tasks import TASKS

SMALL_CAMERAS = tuple(CameraSpec(cam.name, 64, 64) for cam in DEFAULT_CAMERAS)
"""The default cameras at 64x64 pixels, so that rendering stays in milliseconds."""

ROBOT_PRESETS = [
    pytest.param((arm, cams), id=f"{arm}-{label}")
    for arm in ARMS
    for label, cams in (("cameras", SMALL_CAMERAS), ("state", ()))
]
ENV_PRESETS = [pytest.param((task, scenario), id=f"{task}-{scenario}") for task in TASKS for scenario in SCENARIOS]

MARGIN_RAD = SafetyLimits().limit_margin_rad  # 0.02
DT_S = 1.0 / 30.0


def actuator_ids(sim: SimRobot) -> np.ndarray:
    """Indices into `sim.data.ctrl` of the arm's joints, in command order."""
    return np.array([sim.model.actuator(name).id for name in sim.spec.joint_names])


def fixed_targets(spec: RobotSpec, n: int) -> list[np.ndarray]:
    """n deterministic targets: small sines around home, inside the limits."""
    home = np.clip(HOME_Q_RAD, spec.lower_rad, spec.upper_rad)
    phase = np.arange(spec.num_joints)
    return [np.clip(home + 0.3 * np.sin(0.2 * k + phase), spec.lower_rad, spec.upper_rad) for k in range(n)]


@pytest.fixture(params=ROBOT_PRESETS)
def preset(request):
    """(arm, cameras) of one SimRobot preset."""
    return request.param


@pytest.fixture
def robot(preset):
    """A connected SimRobot of the preset; disconnected afterwards."""
    arm, cameras = preset
    sim = SimRobot(arm=arm, cameras=cameras)
    sim.connect()
    yield sim
    sim.disconnect()


@pytest.fixture(params=ENV_PRESETS)
def env(request):
    task, scenario = request.param
    environment = TaskEnv(task, scenario, cameras=())
    yield environment
    environment.close()


# -- SimRobot presets ----------------------------------------------------------------------


def test_spec_readable_before_connect(preset):
    arm, cameras = preset
    sim = SimRobot(arm=arm, cameras=cameras)
    spec = sim.spec
    assert not sim.is_connected and sim.data is None  # reading the spec connected nothing
    assert isinstance(sim, Robot)
    assert spec.name == arm
    assert spec.joint_names == ARMS[arm].joint_names and spec.num_joints == 6
    for limit in (spec.lower_rad, spec.upper_rad, spec.max_velocity_rad_s):
        assert limit.shape == (6,) and limit.dtype == np.float64
    assert np.all(spec.lower_rad < spec.upper_rad)
    kin = Kinematics(ARMS[arm])  # the MuJoCo limits are the URDF's
    np.testing.assert_allclose(spec.lower_rad, kin.lower_rad, rtol=0, atol=1e-9)
    np.testing.assert_allclose(spec.upper_rad, kin.upper_rad, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(spec.max_velocity_rad_s, [3, 3, 3, 3, 3, 5])
    assert spec.control_rate_hz == 30.0 and spec.dt_s == pytest.approx(1 / 30)
    assert spec.cameras == cameras
    assert spec.ee_frame == ARMS[arm].ee_frame
    with pytest.raises(DeviceNotConnected, match="connect"):
        sim.read()
    with pytest.raises(DeviceNotConnected):
        sim.command(spec.lower_rad)
    assert not sim.is_connected


def test_read_after_connect_matches_spec(robot):
    spec = robot.spec
    assert robot.is_connected
    robot.clock.advance(DT_S)
    state = robot.read()
    assert state.q_rad.shape == (spec.num_joints,) and state.q_rad.dtype == np.float64
    assert np.all(np.isfinite(state.q_rad))
    assert state.dq_rad_s is not None and state.dq_rad_s.shape == (spec.num_joints,)
    assert np.all(np.isfinite(state.dq_rad_s))
    assert np.all(state.q_rad >= spec.lower_rad - 0.05) and np.all(state.q_rad <= spec.upper_rad + 0.05)
    assert state.timestamp_s == robot.clock.now()
    assert set(state.images) == {cam.name for cam in spec.cameras}
    for cam in spec.cameras:
        frame = state.images[cam.name]
        assert frame.shape == (cam.height_px, cam.width_px, 3) and frame.dtype == np.uint8
        assert frame.std() > 1.0, f"{cam.name} rendered a blank frame"


def test_command_returns_what_was_sent_and_respects_limits(robot):
    spec, act = robot.spec, actuator_ids(robot)
    inside = fixed_targets(spec, 1)[0]
    np.testing.assert_array_equal(robot.command(inside), inside)  # inside: sent as is
    np.testing.assert_array_equal(robot.data.ctrl[act], inside)
    sent = robot.command(spec.upper_rad + 0.5)  # beyond the upper limit: clipped to it
    np.testing.assert_array_equal(sent, spec.upper_rad)
    np.testing.assert_array_equal(robot.data.ctrl[act], sent)
    sent = robot.command(spec.lower_rad - 0.5)
    np.testing.assert_array_equal(sent, spec.lower_rad)
    np.testing.assert_array_equal(robot.data.ctrl[act], sent)
    with pytest.raises(ValueError):
        robot.command(np.zeros(5))


def test_command_through_safe_robot_is_what_the_arm_got(robot):
    spec, act = robot.spec, actuator_ids(robot)
    safe = SafeRobot(robot)
    safe.connect()
    assert isinstance(safe, Robot) and safe.spec is spec
    for _ in range(40):  # walk toward a target 0.5 rad beyond every upper limit
        sent = safe.command(spec.upper_rad + 0.5)
        np.testing.assert_array_equal(robot.data.ctrl[act], sent)
        assert np.all(sent <= spec.upper_rad - MARGIN_RAD) and np.all(sent >= spec.lower_rad + MARGIN_RAD)
        robot.clock.advance(DT_S)
        safe.read()
    assert safe.stats.limit_clamps == 40


def record(sim: SimRobot, seed: int, targets: list[np.ndarray]) -> dict[str, np.ndarray]:
    sim.reset(seed=seed)
    out: dict[str, list] = {"q": [], "dq": [], "sent": []}
    for target in targets:
        out["sent"].append(sim.command(target))
        sim.clock.advance(DT_S)
        state = sim.read()
        out["q"].append(state.q_rad)
        out["dq"].append(state.dq_rad_s)
        for name, frame in state.images.items():
            out.setdefault(name, []).append(frame)
    return {key: np.stack(value) for key, value in out.items()}


def test_same_seed_same_trajectory(preset, robot):
    arm, cameras = preset
    targets = fixed_targets(robot.spec, 50)
    first = record(robot, 3, targets)
    robot.clock.advance(1.234)  # another episode later on the same clock
    second = record(robot, 3, targets)
    fresh_sim = SimRobot(arm=arm, cameras=cameras)
    fresh_sim.connect()
    try:
        fresh = record(fresh_sim, 3, targets)
    finally:
        fresh_sim.disconnect()
    assert set(first) == {"q", "dq", "sent"} | {cam.name for cam in cameras}
    assert np.abs(first["q"][-1] - first["q"][0]).max() > 0.05  # the arm really moved
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)
        np.testing.assert_array_equal(first[key], fresh[key], err_msg=key)


def test_a_camera_latency_shows_the_scene_of_the_reading_that_many_ticks_back():
    """Two arms driven alike, one with frames 2 ticks late: its frame at reading k is the
    other's at reading k - 2 (the first reading's before that), 2 ticks old; its joints are
    read now. A second reading at the same instant shows the same frame."""
    arms = [SimRobot(cameras=SMALL_CAMERAS, camera_latency_ticks=lag) for lag in (0, 2)]
    for arm in arms:
        arm.connect()
    try:
        states = []
        for target in fixed_targets(arms[0].spec, 6):
            states.append([arm.read() for arm in arms])
            for arm in arms:
                arm.command(target)
                arm.clock.advance(DT_S)
        again = arms[1].read()
        now = arms[1].read()
    finally:
        for arm in arms:
            arm.disconnect()
    for k, (fresh, late) in enumerate(states):
        shown = states[max(k - 2, 0)][0]
        np.testing.assert_array_equal(late.q_rad, fresh.q_rad)
        for cam in SMALL_CAMERAS:
            np.testing.assert_array_equal(late.images[cam.name], shown.images[cam.name])
            assert late.image_ages_s[cam.name] == pytest.approx(min(k, 2) * DT_S)
            assert fresh.image_ages_s[cam.name] == 0.0
    assert not np.array_equal(states[5][0].images["wrist"], states[3][0].images["wrist"])  # the arm moved
    np.testing.assert_array_equal(again.images["wrist"], now.images["wrist"])
    assert again.image_ages_s == now.image_ages_s


def test_no_nan_after_random_commands_through_safe_robot(robot):
    spec = robot.spec
    safe = SafeRobot(robot)
    safe.connect()
    rng = np.random.default_rng(0)
    previous = safe.read().q_rad
    low, high = safe._low, safe._high
    for _ in range(200):
        sent = safe.command(rng.uniform(spec.lower_rad, spec.upper_rad))
        assert np.all(np.abs(sent - previous) <= safe._max_step + 1e-12)
        assert np.all(sent >= spec.lower_rad + MARGIN_RAD - 1e-12)
        assert np.all(sent <= spec.upper_rad - MARGIN_RAD + 1e-12)
        # the workspace violation never grows (so101 starts inside the box: stays at 0)
        ee_sent, ee_prev = safe.kinematics.ee_position(sent), safe.kinematics.ee_position(previous)
        assert box_violation(ee_sent, low, high) <= box_violation(ee_prev, low, high)
        robot.clock.advance(DT_S)
        state = safe.read()
        assert np.all(np.isfinite(state.q_rad)) and np.all(np.isfinite(state.dq_rad_s))
        assert set(state.images) == {cam.name for cam in spec.cameras}
        previous = sent
    assert np.all(np.isfinite(robot.data.qpos)) and np.all(np.isfinite(robot.data.qvel))
    assert safe.stats.commands == 200 and safe.stats.nan_rejections == 0


def test_hold_never_raises(preset, caplog):
    arm, cameras = preset
    sim = SimRobot(arm=arm, cameras=cameras)
    safe = SafeRobot(sim, SafetyLimits())
    sim.hold()  # before connect
    safe.hold()  # cannot read the arm: logs, does not raise
    assert "could not read the robot" in caplog.text
    safe.connect()
    sim.hold()
    safe.hold()
    np.testing.assert_array_equal(sim.data.ctrl[actuator_ids(sim)], sim.q_true_rad)
    assert safe.holding
    safe.disconnect()
    assert not sim.is_connected
    sim.hold()  # after disconnect
    safe.hold()
    safe.disconnect()  # twice


def test_hold_keeps_the_position_at_clock_time(so101_sim):
    so101_sim.command(HOME_Q_RAD + [0.1, 0, 0, 0, 0, 0])
    so101_sim.clock.advance(0.6)  # 0.6 s is plenty to turn the pan by 0.1 rad
    so101_sim.hold()  # "stop moving: keep the current position" (at t = 0.6 s)
    so101_sim.clock.advance(0.5)
    assert so101_sim.read().q_rad[0] == pytest.approx(0.1, abs=0.01)


# -- TaskEnv presets -----------------------------------------------------------------------


def test_env_spec_matches_the_bare_arm(env):
    spec = env.robot.spec
    assert spec is env.sim.spec
    bare = SimRobot(arm="so101", cameras=()).spec  # never connected
    assert spec.name == bare.name == "so101"
    assert spec.joint_names == bare.joint_names
    np.testing.assert_array_equal(spec.lower_rad, bare.lower_rad)
    np.testing.assert_array_equal(spec.upper_rad, bare.upper_rad)
    np.testing.assert_array_equal(spec.max_velocity_rad_s, bare.max_velocity_rad_s)
    assert spec.control_rate_hz == bare.control_rate_hz and spec.cameras == ()
    assert isinstance(env.robot, Robot) and env.robot.is_connected
    assert env.dt_s == pytest.approx(1 / 30)


def test_env_observation_matches_spec(env):
    obs = env.reset(0)
    assert obs.tick == 0 and isinstance(obs.instruction, str) and obs.instruction
    spec = env.robot.spec
    for state in (obs.state, env.step(obs.state.q_rad).obs.state):
        assert state.q_rad.shape == (spec.num_joints,) and state.q_rad.dtype == np.float64
        assert np.all(np.isfinite(state.q_rad)) and state.images == {}
    assert obs.env_state.shape == (env.task.env_state_dim,) and obs.env_state.dtype == np.float32
    assert np.all(np.isfinite(obs.env_state))


def test_env_step_returns_what_the_arm_got(env):
    spec, act = env.robot.spec, actuator_ids(env.sim)
    env.reset(0)
    beyond = spec.upper_rad + 1.0
    for _ in range(30):
        st = env.step(beyond)
        np.testing.assert_array_equal(env.sim.data.ctrl[act], st.sent_rad)
        assert np.all(st.sent_rad <= spec.upper_rad - MARGIN_RAD)
        assert np.all(st.sent_rad >= spec.lower_rad + MARGIN_RAD)
    assert env.robot.stats.limit_clamps == 30  # every request was beyond the limits


def rollout(env: TaskEnv, seed: int, ticks: int = 50) -> dict[str, np.ndarray]:
    obs = env.reset(seed)
    expert = env.make_expert(seed)
    out: dict[str, list] = {
        "q": [obs.state.q_rad],
        "dq": [obs.state.dq_rad_s],
        "env_state": [obs.env_state],
        "sent": [],
        "reward": [],
        "success": [],
    }
    for _ in range(ticks):
        st = env.step(expert.act(obs.state.q_rad))
        obs = st.obs
        out["q"].append(obs.state.q_rad)
        out["dq"].append(obs.state.dq_rad_s)
        out["env_state"].append(obs.env_state)
        out["sent"].append(st.sent_rad)
        out["reward"].append(st.reward)
        out["success"].append(st.success)
    return {key: np.asarray(value) for key, value in out.items()}


def test_env_same_seed_same_trajectory(env, request):
    first = rollout(env, 11)
    second = rollout(env, 11)  # same env, clock further on
    task, scenario = request.node.callspec.params["env"]
    fresh_env = TaskEnv(task, scenario, cameras=())
    try:
        fresh = rollout(fresh_env, 11)
    finally:
        fresh_env.close()
    arm = np.abs(first["q"][-1] - first["q"][0]).max()
    scene = np.abs(first["env_state"][-1] - first["env_state"][0]).max()
    assert arm > 0.05 or scene > 0.01  # the expert moved the arm, or the task its objects (calibrate_lens)
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)
        np.testing.assert_array_equal(first[key], fresh[key], err_msg=key)
    other = env.reset(12)  # another seed: another task layout
    assert not np.array_equal(other.env_state, first["env_state"][0])


def test_env_no_nan_after_random_commands(env):
    spec = env.robot.spec
    env.reset(5)
    rng = np.random.default_rng(1)
    for _ in range(200):
        st = env.step(rng.uniform(spec.lower_rad, spec.upper_rad))
        assert np.all(np.isfinite(st.obs.state.q_rad)) and np.all(np.isfinite(st.obs.env_state))
        assert np.isfinite(st.reward)
        assert np.all(st.sent_rad <= spec.upper_rad - MARGIN_RAD + 1e-12)
        assert np.all(st.sent_rad >= spec.lower_rad + MARGIN_RAD - 1e-12)
    assert np.all(np.isfinite(env.sim.data.qpos)) and np.all(np.isfinite(env.sim.data.qvel))
    assert env.robot.stats.commands == 200


def test_env_hold_never_raises(env):
    env.reset(0)
    env.robot.hold()
    env.sim.hold()
    assert env.robot.holding
    env.step(env.sim.q_true_rad)
    assert not env.robot.holding
    env.close()
    env.robot.hold()  # after disconnect
    env.sim.hold()
