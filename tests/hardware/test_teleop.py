"""Teleop devices: Cartesian jogging through pinocchio IK on a simulated SO-101, the key
and gamepad maps and their events, terminal decoding on a pseudo-terminal, device
combination, dataset replay, and the leader arm (missing port, and lerobot's leader code
against simulated servos)."""

from __future__ import annotations

import os
import sys
import termios
from pathlib import Path

import numpy as np
import pytest

from robotrl.core.errors import ConfigError, DeviceNotConnected
from robotrl.core.robot import RobotState
from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.models import get_arm
from robotrl.hardware.sim_arm.robot import HOME_Q_RAD, SimRobot
from robotrl.hardware.teleop.base import TeleopDevice, TeleopEvents
from robotrl.hardware.teleop.cartesian import CartesianJogger, azimuth_change, cartesian_step
from robotrl.hardware.teleop.gamepad import (
    GamepadSnapshot,
    GamepadTeleop,
    PygameAxes,
    ScriptedAxes,
    apply_deadzone,
    gamepad_motion,
)
from robotrl.hardware.teleop.keyboard import (
    KEY_MAP,
    KeyboardTeleop,
    QueueKeys,
    TerminalKeys,
    decode_keys,
    key_help,
)
from robotrl.hardware.teleop.leader import CombinedTeleop, LeaderArmTeleop, merge_events
from robotrl.hardware.teleop.replay import ReplayTeleop

STEP_M = 0.005
MARGIN_RAD = 0.03
MISSING_PORT = "/dev/robotrl-test-no-such-leader"


@pytest.fixture(scope="module")
def kin() -> Kinematics:
    return Kinematics(get_arm("so101"))


@pytest.fixture
def sim():
    robot = SimRobot(arm="so101", cameras=())
    robot.connect()
    yield robot
    robot.disconnect()


def tick(robot: SimRobot, target: np.ndarray, n: int = 1) -> RobotState:
    """Send `target`, let the simulated arm move for `n` control periods, read it."""
    for _ in range(n):
        robot.command(target)
        robot.clock.advance(robot.spec.dt_s)
    return robot.read()


def axis_angle_deg(rot_a: np.ndarray, rot_b: np.ndarray) -> float:
    """Rotation angle between two orientations, degrees."""
    cos = (np.trace(rot_a.T @ rot_b) - 1.0) / 2.0
    return float(np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))))


def inside_limits(kin: Kinematics, q: np.ndarray) -> bool:
    return bool(np.all(q >= kin.lower_rad) and np.all(q <= kin.upper_rad))


# -- Cartesian maths -------------------------------------------------------------------
def test_azimuth_change_is_signed_about_the_axis() -> None:
    z = np.array([0.0, 0.0, 1.0])
    # (1, 0) -> (0, 1) seen from above the z axis: +90 deg; the reverse: -90 deg.
    o, x, y = np.zeros(3), np.array([1.0, 0, 0]), np.array([0, 1.0, 0])
    assert azimuth_change(z, o, x, y) == pytest.approx(np.pi / 2)
    assert azimuth_change(z, o, y, x) == pytest.approx(-np.pi / 2)
    assert azimuth_change(z, o, 0.005 * x, y) == 0.0  # within 1 cm of the axis: no azimuth


def test_cartesian_step_moves_the_fingertip_and_keeps_gripper(kin: Kinematics) -> None:
    q = HOME_Q_RAD.copy()
    q[-1] = 0.4
    new = cartesian_step(kin, q, np.array([0.0, 0.0, 0.01]))
    assert new is not None and new[-1] == 0.4 and new[4] == q[4]
    np.testing.assert_allclose(kin.ee_position(new) - kin.ee_position(q), [0, 0, 0.01], atol=1e-4)
    assert cartesian_step(kin, q, np.array([1.0, 0.0, 0.0])) is None  # 1 m away: out of reach


def test_jogger_reset_clips_into_the_limits_and_takes_custom_steps(kin: Kinematics) -> None:
    jogger = CartesianJogger(kin, step_m=0.01, roll_step_rad=0.1)
    q = HOME_Q_RAD.copy()
    q[0] = kin.upper_rad[0] + 0.5  # a reading past the pan limit
    jogger.reset(q)
    assert jogger.target_rad[0] == pytest.approx(kin.upper_rad[0] - MARGIN_RAD)
    device = KeyboardTeleop(kin, QueueKeys(), jogger)
    before = kin.ee_position(jogger.target_rad)
    after = kin.ee_position(device.apply(["r"]).target_rad)
    np.testing.assert_allclose(after - before, [0, 0, 0.01], atol=5e-4)  # one press = step_m = 1 cm


# -- keyboard ----------------------------------------------------------------------------
def test_w_three_times_moves_the_end_effector_15_mm_in_x(sim: SimRobot, kin: Kinematics) -> None:
    keys = QueueKeys()
    device = KeyboardTeleop(kin, keys)
    assert isinstance(device, TeleopDevice)
    device.connect()
    state = sim.read()
    device.reset(state)
    pos0, rot0 = kin.forward(state.q_rad)
    for _ in range(3):
        keys.push("w")
        command = device.read(state)
        state = tick(sim, command.target_rad)
        assert command.events == TeleopEvents()
    pos, rot = kin.forward(command.target_rad)
    # 3 presses x 5 mm = +15 mm in x; y and z unchanged.
    np.testing.assert_allclose(pos - pos0, [0.015, 0.0, 0.0], atol=1e-3)
    assert axis_angle_deg(rot0, rot) < 2.0
    # The simulated arm follows the target once given time.
    state = tick(sim, command.target_rad, n=60)
    np.testing.assert_allclose(kin.ee_position(state.q_rad) - pos0, [0.015, 0.0, 0.0], atol=3e-3)
    device.disconnect()


@pytest.mark.parametrize(
    ("key", "direction"),
    [
        ("w", (1, 0, 0)),
        ("s", (-1, 0, 0)),
        ("a", (0, 1, 0)),
        ("d", (0, -1, 0)),
        ("r", (0, 0, 1)),
        ("f", (0, 0, -1)),
        ("up", (1, 0, 0)),
        ("down", (-1, 0, 0)),
        ("left", (0, 1, 0)),
        ("right", (0, -1, 0)),
        ("W", (1, 0, 0)),
    ],
)
def test_each_motion_key_steps_5_mm(kin: Kinematics, key: str, direction: tuple[int, int, int]) -> None:
    device = KeyboardTeleop(kin, QueueKeys())
    device.reset(RobotState(HOME_Q_RAD.copy(), 0.0))
    before = kin.ee_position(device.jogger.target_rad)
    keys = decode_keys(key)[0] if len(key) == 1 else [key]  # "W" goes through the decoder: "w"
    target = device.apply(keys).target_rad
    np.testing.assert_allclose(kin.ee_position(target) - before, np.array(direction) * STEP_M, atol=5e-4)


def test_roll_keys_turn_the_wrist_and_keep_the_fingertip(kin: Kinematics) -> None:
    device = KeyboardTeleop(kin, QueueKeys())
    device.reset(RobotState(HOME_Q_RAD.copy(), 0.0))
    before = kin.ee_position(HOME_Q_RAD)
    q_e = device.apply(["e", "e"]).target_rad  # 2 x +0.05 rad
    assert q_e[4] == pytest.approx(HOME_Q_RAD[4] + 0.1)
    q_q = device.apply(["q"]).target_rad  # one back: +0.05 rad
    assert q_q[4] == pytest.approx(HOME_Q_RAD[4] + 0.05)
    np.testing.assert_allclose(kin.ee_position(q_q), before, atol=5e-4)


def test_space_toggles_the_gripper_between_open_and_closed(kin: Kinematics) -> None:
    device = KeyboardTeleop(kin, QueueKeys())
    device.reset(RobotState(HOME_Q_RAD.copy(), 0.0))  # gripper at 0.0 rad: nearer closed (-0.15)
    assert device.apply(["space"]).target_rad[-1] == pytest.approx(0.9)
    # Closed is -0.15 rad, kept 0.03 rad inside so101's lower limit -0.174533: -0.144533.
    closed = device.apply(["space"]).target_rad
    assert closed[-1] == pytest.approx(max(-0.15, kin.lower_rad[-1] + MARGIN_RAD))
    np.testing.assert_allclose(closed[:-1], HOME_Q_RAD[:-1])


@pytest.mark.parametrize(
    ("key", "flag"),
    [("enter", "success"), ("backspace", "failure"), ("x", "failure"), ("z", "rerecord"), ("escape", "stop")],
)
def test_event_keys_raise_their_event_for_one_tick(kin: Kinematics, key: str, flag: str) -> None:
    keys = QueueKeys()
    device = KeyboardTeleop(kin, keys)
    state = RobotState(HOME_Q_RAD.copy(), 0.0)
    device.reset(state)
    keys.push(key)
    command = device.read(state)
    assert command.events == TeleopEvents(**{flag: True}) and command.events.ends_episode
    np.testing.assert_allclose(command.target_rad, HOME_Q_RAD)
    assert device.read(state).events == TeleopEvents()


def test_i_toggles_intervention_until_pressed_again(kin: Kinematics) -> None:
    keys = QueueKeys()
    device = KeyboardTeleop(kin, keys)
    state = RobotState(HOME_Q_RAD.copy(), 0.0)
    device.reset(state)
    keys.push("i")
    assert [device.read(state).events.intervene for _ in range(3)] == [True, True, True]
    keys.push("i")
    assert device.read(state).events == TeleopEvents()
    keys.push("i")
    device.read(state)
    device.reset(state)
    assert not device.read(state).events.intervene


def test_target_runs_on_its_own_not_on_the_noisy_measurement(kin: Kinematics) -> None:
    robot = SimRobot(arm="so101", cameras=(), q_noise_rad=0.01)
    robot.connect()
    keys = QueueKeys()
    device = KeyboardTeleop(kin, keys)
    device.reset(robot.read())
    first = device.read(robot.read()).target_rad
    for _ in range(5):
        assert np.array_equal(device.read(tick(robot, first)).target_rad, first)
    keys.push("r")
    moved = device.read(tick(robot, first)).target_rad
    np.testing.assert_allclose(kin.ee_position(moved) - kin.ee_position(first), [0, 0, STEP_M], atol=1e-4)
    robot.disconnect()


def test_unreachable_requests_leave_the_target_unchanged_and_inside_limits(kin: Kinematics) -> None:
    keys = QueueKeys()
    device = KeyboardTeleop(kin, keys)
    state = RobotState(HOME_Q_RAD.copy(), 0.0)
    device.reset(state)
    before = device.jogger.target_rad
    keys.push(*["w"] * 200)  # 1 m in one tick: out of reach
    np.testing.assert_allclose(device.read(state).target_rad, before)
    assert device.jogger.unreachable_count == 1
    reach = []
    for key in "w" * 25 + "r" * 10 + "a" * 10 + "f" * 10:  # 4 presses (2 cm) a tick into the edge
        keys.push(*[key] * 4)
        target = device.read(state).target_rad
        assert inside_limits(kin, target)
        assert np.all(target >= kin.lower_rad + MARGIN_RAD - 1e-12)
        assert np.all(target <= kin.upper_rad - MARGIN_RAD + 1e-12)
        reach.append(np.linalg.norm(kin.ee_position(target)))
    assert device.jogger.unreachable_count > 1
    assert max(reach) < 0.6  # the so101 reaches about half a metre


def test_key_map_covers_the_documented_keys() -> None:
    documented = {"w", "s", "a", "d", "r", "f", "q", "e", "space", "i", "enter", "backspace", "x", "z", "escape"}
    assert documented <= set(KEY_MAP)
    assert all(f"  {key}" in key_help() for key in documented)


# -- terminal decoding -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "keys", "tail"),
    [
        ("wasd", ["w", "a", "s", "d"], ""),
        ("W \r\n\x7f\x08\t", ["w", "space", "enter", "enter", "backspace", "backspace", "tab"], ""),
        ("\x1b[A\x1b[B\x1b[C\x1b[D", ["up", "down", "right", "left"], ""),
        ("\x1bOA\x1b[1;2D", ["up", "left"], ""),  # SS3 arrow; shift+left keeps "left"
        ("\x1b[15~w", ["w"], ""),  # F5 is ignored
        ("\x1b\x1bw", ["escape", "escape", "w"], ""),
        ("\x1bw", ["escape", "w"], ""),
        ("\x03\x01q", ["q"], ""),  # other control characters are ignored
        ("w\x1b", ["w"], "\x1b"),  # cut off: kept for the next read
        ("w\x1b[1;", ["w"], "\x1b[1;"),
    ],
)
def test_decode_keys(text: str, keys: list[str], tail: str) -> None:
    assert decode_keys(text, final=False) == (keys, tail)


def test_decode_keys_final_turns_a_cut_off_escape_into_escape() -> None:
    assert decode_keys("\x1b", final=True) == (["escape"], "")
    assert decode_keys("\x1b[", final=True) == (["escape", "["], "")  # "[" is an (unbound) key


def test_terminal_keys_on_a_pseudo_terminal() -> None:
    master, slave = os.openpty()
    try:
        saved = termios.tcgetattr(slave)
        keys = TerminalKeys(fd=slave)
        with pytest.raises(DeviceNotConnected, match="connect"):
            keys.poll()
        keys.connect()
        lflag = termios.tcgetattr(slave)[3]
        assert not lflag & termios.ICANON and not lflag & termios.ECHO and lflag & termios.ISIG
        assert keys.poll() == []
        os.write(master, b"ww\x1b[A \r\x7fZ")
        assert keys.poll() == ["w", "w", "up", "space", "enter", "backspace", "z"]
        os.write(master, b"\x1b")
        assert keys.poll() == []  # could be the start of an arrow key
        assert keys.poll() == ["escape"]  # nothing followed: a lone ESC
        os.write(master, b"\x1b[")
        assert keys.poll() == []
        os.write(master, b"D")
        assert keys.poll() == ["left"]  # a sequence split across reads
        keys.disconnect()
        assert termios.tcgetattr(slave) == saved
        keys.disconnect()  # twice is fine
    finally:
        os.close(master)
        os.close(slave)


def test_terminal_keys_refuse_a_non_terminal() -> None:
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(DeviceNotConnected, match="terminal"):
            TerminalKeys(fd=read_end).connect()
    finally:
        os.close(read_end)
        os.close(write_end)


# -- gamepad ---------------------------------------------------------------------------
def test_deadzone_and_linear_speed() -> None:
    assert apply_deadzone(0.05) == 0.0 and apply_deadzone(-0.099) == 0.0
    assert apply_deadzone(1.0) == 1.0 and apply_deadzone(-1.0) == -1.0 and apply_deadzone(3.0) == 1.0
    assert apply_deadzone(0.55) == pytest.approx(0.5)  # (0.55 - 0.1) / 0.9


def test_gamepad_motion_mapping() -> None:
    snap = GamepadSnapshot({"left_x": 1.0, "left_y": -1.0, "right_y": 0.55, "right_trigger": 1.0, "left_trigger": 0.05})
    dxyz, roll = gamepad_motion(snap)
    # left stick up = +x (down here: -1), stick right = -y, right stick up = +z at half speed.
    np.testing.assert_allclose(dxyz, [-1.0, -1.0, 0.5])
    assert roll == 1.0
    _, roll = gamepad_motion(GamepadSnapshot({"right_trigger": 1.0}, {"left_bumper"}))
    assert roll == 0.0
    _, roll = gamepad_motion(GamepadSnapshot({}, {"left_bumper"}))
    assert roll == -1.0


def test_gamepad_stick_moves_step_per_tick_outside_the_deadzone(sim: SimRobot, kin: Kinematics) -> None:
    axes = ScriptedAxes(
        [
            GamepadSnapshot({"left_y": 0.05, "right_y": -0.05}),
            GamepadSnapshot({"left_y": 1.0}),
            GamepadSnapshot({"right_y": -1.0}),
            GamepadSnapshot({"left_x": -1.0}),
            GamepadSnapshot({"right_trigger": 1.0}),
        ]
    )
    device = GamepadTeleop(kin, axes)
    assert isinstance(device, TeleopDevice)
    device.connect()
    state = sim.read()
    device.reset(state)
    start = device.jogger.target_rad
    target = device.read(state).target_rad
    np.testing.assert_array_equal(target, start)  # inside the dead zone: no motion
    steps = [(STEP_M, 0, 0), (0, 0, -STEP_M), (0, STEP_M, 0)]  # full stick: 5 mm per tick
    for expected in steps:
        before = kin.ee_position(target)
        target = device.read(state).target_rad
        np.testing.assert_allclose(kin.ee_position(target) - before, expected, atol=5e-4)
    assert device.read(state).target_rad[4] == pytest.approx(target[4] + 0.05)  # full trigger
    device.disconnect()


def test_gamepad_buttons(kin: Kinematics) -> None:
    state = RobotState(HOME_Q_RAD.copy(), 0.0)
    axes = ScriptedAxes()
    device = GamepadTeleop(kin, axes)
    device.reset(state)
    axes.push(GamepadSnapshot(), GamepadSnapshot(buttons={"a"}), GamepadSnapshot(buttons={"a"}), GamepadSnapshot())
    # Home gripper 0.0 rad counts as closed; a press opens it (0.9 rad), holding does not toggle.
    assert [device.read(state).target_rad[-1] for _ in range(4)] == pytest.approx([0.0, 0.9, 0.9, 0.9])
    axes.push(GamepadSnapshot(buttons={"b"}), GamepadSnapshot(buttons={"b"}), GamepadSnapshot())
    assert [device.read(state).events.intervene for _ in range(3)] == [True, True, False]
    for button, flag in [("y", "success"), ("x", "failure"), ("back", "rerecord"), ("start", "stop")]:
        axes.push(GamepadSnapshot(buttons={button}), GamepadSnapshot(buttons={button}), GamepadSnapshot())
        events = [device.read(state).events for _ in range(3)]
        assert events == [TeleopEvents(**{flag: True}), TeleopEvents(), TeleopEvents()], button
    # A button still held from the last episode does not fire in the new one.
    axes.push(GamepadSnapshot(buttons={"y"}), GamepadSnapshot(), GamepadSnapshot(buttons={"y"}))
    device.reset(state)
    assert [device.read(state).events.success for _ in range(3)] == [False, False, True]


def test_pygame_missing_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pygame", None)  # import pygame -> ImportError
    axes = PygameAxes()
    with pytest.raises(DeviceNotConnected, match="pip install pygame"):
        axes.connect()
    with pytest.raises(DeviceNotConnected, match="connect"):
        axes.poll()
    axes.disconnect()


# -- combination -------------------------------------------------------------------------
def test_combined_takes_targets_from_one_device_and_events_from_the_other(kin: Kinematics) -> None:
    state = RobotState(HOME_Q_RAD.copy(), 0.0)
    axes = ScriptedAxes([GamepadSnapshot({"left_y": 1.0}, {"b"})])
    keys = QueueKeys()
    mover, buttons = GamepadTeleop(kin, axes), KeyboardTeleop(kin, keys)
    combined = CombinedTeleop(mover, buttons)
    assert isinstance(combined, TeleopDevice)
    combined.connect()
    combined.reset(state)
    keys.push("r", "r", "enter")  # the keyboard's motion is ignored, its event kept
    command = combined.read(state)
    np.testing.assert_array_equal(command.target_rad, mover.jogger.target_rad)
    np.testing.assert_allclose(
        kin.ee_position(command.target_rad) - kin.ee_position(HOME_Q_RAD), [STEP_M, 0, 0], atol=5e-4
    )
    assert command.events == TeleopEvents(success=True, intervene=True)  # b held on the pad
    combined.disconnect()


def test_merge_events_is_a_flagwise_or() -> None:
    assert merge_events(TeleopEvents(stop=True), TeleopEvents(intervene=True)) == TeleopEvents(
        stop=True, intervene=True
    )
    assert merge_events(TeleopEvents(), TeleopEvents()) == TeleopEvents()


# -- replay ----------------------------------------------------------------------------
REPLAY_LENGTHS = (10, 7)


@pytest.fixture(scope="module")
def replay_dataset(tmp_path_factory: pytest.TempPathFactory):
    """A two-episode LeRobotDataset (10 and 7 frames of float32 actions) and its rows."""
    tmp = tmp_path_factory.mktemp("replay")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_HOME", str(tmp / "hf_home"))
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        names = list(get_arm("so101").joint_names)
        feature = {"dtype": "float32", "shape": (6,), "names": names}
        root = tmp / "replay_test"
        dataset = LeRobotDataset.create(
            repo_id="local/replay_test",
            fps=30,
            root=root,
            use_videos=False,
            features={"action": feature, "observation.state": feature},
        )
        rng = np.random.default_rng(0)
        episodes = []
        for length in REPLAY_LENGTHS:
            rows = (HOME_Q_RAD + rng.normal(0.0, 0.1, (length, 6))).astype(np.float32)
            for row in rows:
                dataset.add_frame({"action": row, "observation.state": row, "task": "t"})
            dataset.save_episode()
            episodes.append(rows)
        dataset.finalize()
        yield root, episodes


@pytest.mark.parametrize("episode", [0, 1])
def test_replay_returns_the_recorded_rows_then_success(replay_dataset, episode: int) -> None:
    root, episodes = replay_dataset
    device = ReplayTeleop(root, episode)
    assert isinstance(device, TeleopDevice)
    device.connect()
    state = RobotState(HOME_Q_RAD.copy(), 0.0)
    device.reset(state)
    expected = episodes[episode].astype(np.float64)
    commands = [device.read(state) for _ in range(len(expected) + 2)]
    got = np.stack([c.target_rad for c in commands])
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got[: len(expected)], expected)  # float32 -> float64 exactly
    np.testing.assert_array_equal(got[len(expected) :], expected[[-1, -1]])  # holds the last row
    # success comes with the last row (a recorder keeps that tick's frame: same length).
    assert [c.events.success for c in commands] == [False] * (len(expected) - 1) + [True] * 3
    device.reset(state)
    np.testing.assert_array_equal(device.read(state).target_rad, expected[0])
    device.disconnect()


def test_replay_errors(replay_dataset, tmp_path: Path) -> None:
    root, _ = replay_dataset
    with pytest.raises(ConfigError, match="no LeRobotDataset"):
        ReplayTeleop(tmp_path / "nowhere", 0).connect()
    with pytest.raises(ConfigError, match=r"episode 2 is out of range.*0\.\.1"):
        ReplayTeleop(root, 2).connect()
    with pytest.raises(ConfigError, match="out of range"):
        ReplayTeleop(root, -1).connect()
    with pytest.raises(ConfigError, match="no feature 'action.joints'.*observation.state"):
        ReplayTeleop(root, 0, action_key="action.joints").connect()
    with pytest.raises(DeviceNotConnected):
        ReplayTeleop(root, 0).read(RobotState(HOME_Q_RAD.copy(), 0.0))
    device = ReplayTeleop(root, 0)
    device.connect()
    with pytest.raises(ConfigError, match="6 values.*5 joints"):
        device.reset(RobotState(np.zeros(5), 0.0))


# -- leader arm ------------------------------------------------------------------------
def test_leader_missing_port_raises_without_importing_lerobot(monkeypatch: pytest.MonkeyPatch) -> None:
    had_teleoperators = "lerobot.teleoperators" in sys.modules
    monkeypatch.setitem(sys.modules, "lerobot.teleoperators.so_leader", None)  # importing it would fail
    leader = LeaderArmTeleop("so101", port=MISSING_PORT, robot_id="leader")
    assert isinstance(leader, TeleopDevice)
    with pytest.raises(DeviceNotConnected, match=f"{MISSING_PORT}.*robotrl devices"):
        leader.connect()
    with pytest.raises(DeviceNotConnected, match="connect"):
        leader.read(RobotState(HOME_Q_RAD.copy(), 0.0))
    leader.disconnect()
    assert had_teleoperators or "lerobot.teleoperators" not in sys.modules


def test_leader_reads_lerobot_degrees_as_radians_on_simulated_servos(tmp_path: Path) -> None:
    pytest.importorskip("scservo_sdk", reason="lerobot[feetech] (feetech-servo-sdk) is not installed")
    from test_lerobot_arm import FAKE_RANGES

    from robotrl.sim.twin.bus import SimServoBus as FakeServoBus
    from robotrl.sim.twin.bus import write_calibration

    bus = FakeServoBus(FAKE_RANGES)
    try:
        with pytest.raises(ConfigError, match="lerobot-calibrate --teleop.type=so101_leader"):
            LeaderArmTeleop("so101", port=bus.port, robot_id="nobody", calibration_dir=tmp_path).connect()
        write_calibration(tmp_path, "leader", FAKE_RANGES)
        leader = LeaderArmTeleop("so101", port=bus.port, robot_id="leader", calibration_dir=tmp_path)
        keys = QueueKeys()
        device = CombinedTeleop(leader, KeyboardTeleop(Kinematics(get_arm("so101")), keys))
        device.connect()
        state = RobotState(HOME_Q_RAD.copy(), 0.0)
        device.reset(state)
        keys.push("escape")
        command = device.read(state)
        # Servos at the middle of their raw ranges: arm joints 0 deg; wrist roll 2047 of 0..4095
        # (mid 2047.5) -> -0.5 * 360 / 4095 deg; gripper 2500 in 2000..3000 -> 50 -> the middle of
        # so101's gripper limits (-0.174533 + 1.74533) / 2 = 0.7853985 rad.
        np.testing.assert_allclose(
            command.target_rad, [0, 0, 0, 0, np.radians(-0.5 * 360 / 4095), 0.7853985], atol=1e-6
        )
        assert command.events == TeleopEvents(stop=True)
        device.disconnect()
    finally:
        bus.close()
