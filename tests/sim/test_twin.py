"""`robotrl twin`: its calibration (golden ranges, lerobot's own normalisation, round trips),
its follower bus under lerobot's driver, scene scoring and bad options, in this process
(the commands run against a twin process: tests/sim/test_twin_commands.py)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from robotrl.cli import main
from robotrl.core.errors import ConfigError
from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.models import ARMS
from robotrl.sim.twin.bus import SimServoBus
from robotrl.sim.twin.calibration import FOLLOWER_FOLDER, LEADER_FOLDER, install_calibration, twin_calibration

TICK_RAD = 2 * math.pi / 4095
"""One encoder tick in lerobot's maths (360 deg per 4095 ticks)."""
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}


# -- calibration -------------------------------------------------------------------------------
def test_twin_ranges_are_symmetric_around_the_urdf_zero_and_hold_the_urdf_limits() -> None:
    cal = twin_calibration("so101")
    # Arm joints: 2048 +- (ceil(max |limit| * 4095 / 2 pi) + 16): pan 1.91986 rad -> 1251.2 -> 1268;
    # lift 1.74533 -> 1137.5 -> 1154; elbow 1.69 -> 1101.4 -> 1118; wrist flex 1.65806 -> 1080.6
    # -> 1097; wrist roll max(2.74385, 2.84121) -> 1851.7 -> 1868. Gripper: 2048 + round(-0.174533
    # * 651.74) = 2048 - 114, 2048 + round(1.74533 * 651.74) = 2048 + 1138.
    assert cal.ranges == ((780, 3316), (894, 3202), (930, 3166), (951, 3145), (180, 3916), (1934, 3186))
    assert cal.by_id[1] == (780, 3316) and cal.by_id[6] == (1934, 3186)
    np.testing.assert_allclose(cal.raw_to_rad(np.array([2048] * 6))[:5], 0.0, atol=1e-12)
    # Gripper raw 2048 is 114 of 1252 ticks from closed: -0.174533 + 114 / 1252 * 1.919863 rad.
    assert cal.raw_to_rad(np.array([2048] * 6))[5] == pytest.approx(-0.174533 + 114 / 1252 * 1.919863, abs=1e-6)
    kin = Kinematics(ARMS["so101"])
    low, high = np.array(cal.ranges).T
    for q in (kin.lower_rad, kin.upper_rad):
        raw = cal.rad_to_raw(q)
        assert np.all(raw >= low) and np.all(raw <= high), raw
    np.testing.assert_array_equal(cal.rad_to_raw(kin.lower_rad)[5], 1934)  # lerobot 0 (closed)
    np.testing.assert_array_equal(cal.rad_to_raw(kin.upper_rad)[5], 3186)  # lerobot 100 (open)


def test_ticks_and_radians_round_trip_within_half_a_tick() -> None:
    cal = twin_calibration("so101")
    kin = Kinematics(ARMS["so101"])
    q = np.random.default_rng(0).uniform(kin.lower_rad, kin.upper_rad, size=(200, 6))
    np.testing.assert_allclose(cal.raw_to_rad(cal.rad_to_raw(q)), q, atol=TICK_RAD / 2 + 1e-9)
    raw = np.random.default_rng(1).integers(low=np.array(cal.ranges)[:, 0], high=np.array(cal.ranges)[:, 1] + 1)
    np.testing.assert_array_equal(cal.rad_to_raw(cal.raw_to_rad(raw)), raw)


def test_lerobot_reads_the_installed_files_as_the_twin_maps_them(tmp_path: Path) -> None:
    pytest.importorskip("scservo_sdk", reason="lerobot[feetech] (feetech-servo-sdk) is not installed")
    from lerobot.robots.so_follower import SOFollower, SOFollowerRobotConfig

    cal = twin_calibration("so101")
    follower_file, leader_file = install_calibration(tmp_path, "arm", "hand", cal)
    assert follower_file == tmp_path / FOLLOWER_FOLDER / "arm.json"
    assert leader_file == tmp_path / LEADER_FOLDER / "hand.json"
    config = SOFollowerRobotConfig(port=os.devnull, id="arm", calibration_dir=follower_file.parent, use_degrees=True)
    bus = SOFollower(config).bus
    raw = np.array([780, 2048, 3166, 2500, 180, 3000])
    lerobot = bus._normalize(dict(zip(range(1, 7), raw.tolist())))  # lerobot's own reading of the ticks
    np.testing.assert_allclose(cal.raw_to_lerobot(raw), [lerobot[i] for i in range(1, 7)], atol=1e-9)
    sent = bus._unnormalize(dict(zip(range(1, 7), cal.raw_to_lerobot(raw).tolist())))  # lerobot truncates
    assert np.all(np.abs(np.array([sent[i] for i in range(1, 7)]) - raw) <= 1)
    # Installing again is fine; a real arm's file of the same name is never overwritten.
    install_calibration(tmp_path, "arm", "hand", cal)
    real = json.loads(follower_file.read_text())
    real["gripper"]["range_min"] = 2000
    follower_file.write_text(json.dumps(real))
    with pytest.raises(ConfigError, match="arm.json exists and is not the twin's"):
        install_calibration(tmp_path, "arm", "hand", cal)
    assert json.loads(follower_file.read_text()) == real


@pytest.fixture
def twin_follower(tmp_path: Path):
    """(the twin's follower bus, not instant, servos at raw 2048; lerobot's SO-101 driver
    `LerobotArm` on it with the twin's calibration, not connected yet)."""
    pytest.importorskip("scservo_sdk", reason="lerobot[feetech] (feetech-servo-sdk) is not installed")
    from robotrl.hardware.lerobot_arm.robot import LerobotArm

    cal = twin_calibration("so101")
    install_calibration(tmp_path, "arm", "hand", cal)
    bus = SimServoBus(cal.by_id, instant=False)
    bus.set_present({i: 2048 for i in range(1, 7)})
    arm = LerobotArm("so101", port=bus.port, robot_id="arm", calibration_dir=tmp_path / FOLLOWER_FOLDER)
    yield bus, arm
    arm.disconnect()
    bus.close()


def test_goals_wait_in_their_registers_and_torque_on_holds(twin_follower) -> None:
    bus, arm = twin_follower
    cal = twin_calibration("so101")
    arm.connect()
    assert all(bus.torque_enabled(i) and not bus.commanded(i) for i in range(1, 7))
    assert [bus.goal(i) for i in range(1, 7)] == [2048] * 6  # torque on: hold where it stands
    target = np.array([0.5, -0.5, 1.0, -1.0, 2.0, 1.0])
    arm.command(target)
    # A sync write has no reply; the next read's reply comes after the bus has taken it.
    np.testing.assert_allclose(arm.read().q_rad[:5], 0.0, atol=1e-12)  # nothing moves until physics does
    assert all(bus.commanded(i) for i in range(1, 7))
    goal = np.array([bus.goal(i) for i in range(1, 7)])
    np.testing.assert_allclose(cal.raw_to_rad(goal), target, atol=TICK_RAD)  # lerobot truncates a tick
    arm.disconnect()  # torque off
    assert not any(bus.torque_enabled(i) or bus.commanded(i) for i in range(1, 7))


def test_lerobots_bus_reads_the_twins_temperature_and_voltage_rarely_and_a_failed_read_never_stops_the_arm(
    twin_follower, monkeypatch, caplog
) -> None:
    from robotrl.hardware.lerobot_arm import robot as lerobot_arm
    from robotrl.hardware.safety import SafeRobot

    bus, arm = twin_follower
    arm.connect()
    names = ARMS["so101"].joint_names
    lerobot_bus = arm._follower.bus
    # lerobot's own reading of the raw registers: 35 (deg C), 120 (tenths of a volt)
    assert lerobot_bus.sync_read("Present_Temperature") == dict.fromkeys(names, 35)
    assert lerobot_bus.sync_read("Present_Voltage") == dict.fromkeys(names, 120)
    health = arm.health()
    assert health == {
        "bus_errors": 0,
        "motors": dict.fromkeys(names, {"temperature_c": 35.0, "voltage_v": 12.0}),
        "cameras": {},
    }
    bus.set_health(2, temperature_c=52, voltage_dv=111)
    assert arm.health()["motors"]["shoulder_lift"]["temperature_c"] == 35.0  # read at most once a second
    monkeypatch.setattr(lerobot_arm, "MOTOR_READ_EVERY_S", 0.0)
    assert arm.health()["motors"]["shoulder_lift"] == {"temperature_c": 52.0, "voltage_v": 11.1}

    safe = SafeRobot(arm)
    assert safe.health()["last_command_age_s"] is None  # not commanded yet
    safe.command(safe.read().q_rad)
    assert 0.0 <= safe.health()["last_command_age_s"] < 1.0

    real_sync_read = lerobot_bus.sync_read

    def noisy(data_name, *args, **kwargs):  # one garbled reply, as a noisy cable gives
        if data_name == "Present_Temperature":
            raise ConnectionError("Failed to sync read 'Present_Temperature': [TxRxResult] There is no status packet!")
        return real_sync_read(data_name, *args, **kwargs)

    monkeypatch.setattr(lerobot_bus, "sync_read", noisy)
    health = safe.health()  # never raises: the failure is counted, the last reading kept
    assert health["bus_errors"] == 1 and health["motors"]["shoulder_lift"]["temperature_c"] == 52.0
    assert "could not read the motors' temperature and voltage" in caplog.text
    safe.command(safe.read().q_rad)  # the arm goes on
    monkeypatch.setattr(lerobot_bus, "sync_read", real_sync_read)
    bus.close()  # the bus dies: health still answers
    assert arm.health()["bus_errors"] == 2


def test_the_twin_scores_each_scene_a_command_drove_and_skips_those_the_instruction_does_not_fit(
    tmp_path: Path,
) -> None:
    """A client copies the expert's leader onto the follower through lerobot's driver and
    `SafeRobot`. Scene 1 started before the client connected (not driven throughout); scene
    2, driven from its first tick, is solved within the task's limit; scene 3, the torque
    switched off before it, is not. Seeds whose scene asks for another cube are skipped."""
    pytest.importorskip("scservo_sdk", reason="lerobot[feetech] (feetech-servo-sdk) is not installed")
    from robotrl.sim.env import TaskEnv
    from robotrl.sim.twin.twin import TwinConfig

    blue = "put the blue cube in the bin"
    env = TaskEnv("pick_place", cameras=())
    blue_seeds = [seed for seed in range(40) if env.begin(seed) == blue][:3]
    assert blue_seeds[0] > 0  # the red and green seeds before it are skipped
    with _driven_twin(TwinConfig(task="pick_place", cameras=(), instruction=blue), tmp_path) as (twin, arm):
        _follow_the_leader(twin, arm, lambda: twin._solved_tick is not None, 15.0)
        arm.disconnect()  # torque off: scene 3 runs undriven
        twin.request_reset()
        time.sleep(0.5)
    partial, solved, undriven = twin.outcomes
    assert [o.seed for o in twin.outcomes] == blue_seeds
    assert not partial.driven and partial.solved_tick is None, partial
    assert solved.driven and solved.success and 30 < solved.solved_tick <= solved.max_ticks == 300, solved
    assert not undriven.driven and undriven.solved_tick is None and undriven.ticks >= 10, undriven


def test_a_track_scene_followed_from_its_first_tick_is_solved_at_the_tasks_limit(tmp_path: Path) -> None:
    """track succeeds only at its last tick (tick 180, as in a simulated episode): the
    twin's scene ticks count from 1, so that success is within the limit."""
    pytest.importorskip("scservo_sdk", reason="lerobot[feetech] (feetech-servo-sdk) is not installed")
    from robotrl.sim.twin.twin import TwinConfig

    with _driven_twin(TwinConfig(task="track", cameras=()), tmp_path) as (twin, arm):
        _follow_the_leader(twin, arm, lambda: twin._solved_tick is not None, 10.0)
    solved = twin.outcomes[1]
    assert solved.driven and solved.solved_tick == solved.max_ticks == 180 and solved.success, solved


def test_a_goal_acts_within_a_servo_tick_and_a_reading_is_fresh(tmp_path: Path) -> None:
    """A client that reads, commands and waits a tick (deploy's loop), through lerobot's
    driver, on a ramp of 0.01 rad a tick: each reading a tick after a command is within a
    third of a step of it (the simulated arm's is within 0.001 rad). When the twin applied
    goals and refreshed readings once per control tick, readings trailed by a whole step."""
    pytest.importorskip("scservo_sdk", reason="lerobot[feetech] (feetech-servo-sdk) is not installed")
    from robotrl.sim.twin.twin import TwinConfig

    step_rad = 0.01
    trails = []
    with _running_twin(TwinConfig(task="reach", cameras=()), tmp_path) as (_, arm):
        start = arm.read().q_rad
        for k in range(1, 31):
            target = start + np.array([k * step_rad, k * step_rad, 0, 0, 0, 0])
            arm.command(target)
            time.sleep(1 / 30)
            trails.append(target[:2] - arm.read().q_rad[:2])
    trail = np.median(np.abs(trails[10:]), axis=0)  # past the start-up transient
    assert np.all(trail < step_rad / 3), trail


@contextlib.contextmanager
def _running_twin(config, tmp_path: Path):
    """(twin, arm): a running twin of `config` and `SafeRobot` over lerobot's driver,
    connected to its follower. Leaving stops the twin, which logs the last scene's outcome."""
    from robotrl.hardware.lerobot_arm.robot import LerobotArm
    from robotrl.hardware.safety import SafeRobot
    from robotrl.sim.twin.twin import Twin

    twin = Twin(config, tmp_path)
    stop = threading.Event()
    loop = threading.Thread(target=twin.run, args=(stop,))
    arm = SafeRobot(
        LerobotArm("so101", port=twin.follower.port, robot_id="follower", calibration_dir=tmp_path / FOLLOWER_FOLDER)
    )
    try:
        loop.start()
        arm.connect()
        yield twin, arm
    finally:
        arm.disconnect()
        stop.set()
        loop.join(timeout=10)
        twin.close()


@contextlib.contextmanager
def _driven_twin(config, tmp_path: Path):
    """`_running_twin` whose arm copies the twin's leader from the first tick of scene 2 on."""
    with _running_twin(config, tmp_path) as (twin, arm):
        _follow_the_leader(twin, arm, lambda: True, 0.0)
        twin.request_reset()
        _follow_the_leader(twin, arm, lambda: twin.scenes == 2, 2.0)
        yield twin, arm


def _follow_the_leader(twin, arm, condition, timeout_s: float) -> None:
    """Copy the twin's leader (its expert) onto the follower through `arm` every 1/30 s,
    at least once, until `condition()` or `timeout_s`."""
    ids = list(twin.calibration.by_id)
    deadline = time.monotonic() + timeout_s
    while True:
        leader_raw = np.array([twin.leader.present(i) for i in ids])
        arm.command(twin.calibration.raw_to_rad(leader_raw))
        time.sleep(1 / 30)
        if condition() or time.monotonic() >= deadline:
            return


# -- the command -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "flags, problem",
    [
        (["--camera-size", "64"], "--camera-size must be WIDTHxHEIGHT"),
        (["--camera-names", "front,top"], "name each of front, wrist at most once"),
        (["--task", "juggle"], "unknown task 'juggle'"),
        (["--fps", "60"], "fps <= rate_hz"),
        (["--task", "reach", "--instruction", "wave"], "every reach scene asks 'touch the red ball', not 'wave'"),
        (["--instruction", "juggle the cubes"], "no pick_place scene of seeds 0-999 asks 'juggle the cubes'"),
    ],
)
def test_bad_options_get_one_line_and_exit_2(flags, problem, capsys) -> None:
    assert main(["twin", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert problem in err and len(err.splitlines()) == 1, err
