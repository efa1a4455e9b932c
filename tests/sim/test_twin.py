"""`robotrl twin`: its calibration (golden ranges, lerobot's own normalisation, round trips),
its follower bus under lerobot's driver, bad options, a clean SIGTERM, and `robotrl record
--robot so101 --teleop leader` (with DART offsets) against it: MuJoCo physics behind lerobot's
real drivers."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from robotrl.cli import main
from robotrl.core.errors import ConfigError
from robotrl.hardware.camera_geometry import load_rig
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


def start_twin(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen, dict]:
    """`robotrl twin --json` in a subprocess and its JSON line (stderr goes to twin.err)."""
    err = (tmp_path / "twin.err").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "robotrl.cli", "twin", "--json", *flags],
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        env=ENV,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        pytest.fail(f"the twin printed nothing: {(tmp_path / 'twin.err').read_text()[-3000:]}")
    return proc, json.loads(line)


def stop_twin(proc: subprocess.Popen) -> float:
    """SIGTERM the twin; seconds until it exited."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return time.monotonic() - t0


def test_sigterm_exits_0_quickly_and_leaves_the_users_folder(tmp_path: Path) -> None:
    folder = tmp_path / "calibration"
    (folder / "robots" / "so_follower").mkdir(parents=True)
    mine = folder / "robots" / "so_follower" / "my_real_arm.json"
    mine.write_text("{}")
    proc, info = start_twin(tmp_path, "--calibration-dir", str(folder), "--robot-id", "twin_arm")
    keys = {"follower_port", "leader_port", "robot_id", "leader_id", "calibration_dir", "cameras", "camera_calibration"}
    assert set(info) == keys
    assert info["calibration_dir"] == str(folder) and info["robot_id"] == "twin_arm"
    assert Path(info["follower_port"]).exists() and Path(info["leader_port"]).exists()
    assert set(json.loads(info["cameras"])) == {"front", "wrist"}
    assert set(load_rig(info["camera_calibration"]).cameras) == {"front", "wrist"}
    assert stop_twin(proc) < 5 and proc.returncode == 0, (tmp_path / "twin.err").read_text()[-3000:]
    assert mine.read_text() == "{}"  # the user's files stay, and the twin's own calibration too
    assert (folder / "robots" / "so_follower" / "twin_arm.json").is_file()
    assert (folder / "teleoperators" / "so_leader" / "leader.json").is_file()
    # Without --calibration-dir the twin makes (and at exit removes) a folder of its own.
    proc, info = start_twin(tmp_path, "--camera-names", "")
    assert info["cameras"] == info["camera_calibration"] == "" and Path(info["calibration_dir"]).is_dir()
    assert stop_twin(proc) < 5 and proc.returncode == 0
    assert not Path(info["calibration_dir"]).exists()


def run_on_twin(info: dict, *argv: str) -> subprocess.CompletedProcess:
    """A command (`python -m ...`) against a running twin, with its calibration folder."""
    return subprocess.run(
        [sys.executable, "-m", *argv],
        env={**ENV, "HF_LEROBOT_CALIBRATION": info["calibration_dir"]},
        capture_output=True,
        text=True,
        timeout=300,
    )


def record_from_twin(tmp_path: Path, info: dict, root: Path, *flags: str) -> subprocess.CompletedProcess:
    """`robotrl record --robot so101 --teleop leader --cameras ...` against a running twin."""
    args = ["--robot", "so101", "--port", info["follower_port"], "--robot-id", info["robot_id"]]
    args += ["--teleop", "leader", "--leader-port", info["leader_port"], "--leader-id", info["leader_id"]]
    args += ["--cameras", info["cameras"], *flags, "--root", str(root)]
    return run_on_twin(info, "robotrl.cli", "record", *args)


def test_record_from_the_twins_leader_drives_mujoco_through_lerobots_drivers(tmp_path: Path) -> None:
    """The expert moves the leader, `robotrl record --perturb` commands the follower with it
    plus DART offsets, MuJoCo moves the arm, and the dataset (lerobot's own loader) shows the
    follower tracking the offset command a couple of ticks behind, the leader's clean command
    in `teleop.action`, the offsets in degrees as asked in radians, and camera frames that
    change."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    proc, info = start_twin(tmp_path, "--task", "reach")
    root = tmp_path / "ds"
    perturb_rad = 0.06
    try:
        ran = record_from_twin(
            tmp_path,
            info,
            root,
            *("--episodes", "2", "--episode-time-s", "2", "--task", "reach the target"),
            *("--perturb", str(perturb_rad)),
        )
    finally:
        stop_twin(proc)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert proc.returncode == 0, (tmp_path / "twin.err").read_text()[-3000:]
    ds = LeRobotDataset("local/ds", root=root)
    assert ds.meta.total_episodes == 2 and ds.meta.total_frames == 120  # 2 x 2 s at 30 Hz
    # lerobot's native convention, as lerobot-record writes an SO-101: degrees under "<joint>.pos".
    assert ds.meta.robot_type == "so101_follower"
    assert ds.meta.features["observation.state"]["names"][0] == "shoulder_pan.pos"
    columns = ("observation.state", "action", "teleop.action")  # clean: the leader's command
    state, action, clean = (np.stack([np.asarray(v) for v in ds.hf_dataset[key]]) for key in columns)
    first = state[:60, :5]
    assert np.ptp(first, axis=0).max() > 20, np.ptp(first, axis=0)  # the expert moved the arm tens of degrees
    # The follower reaches the leader's command a few ticks later (bus ticks on both sides,
    # then the servos' own dynamics): at the best lag the arm joints agree to a degree or two.
    errors = [np.median(np.abs(state[lag:60, :5] - action[: 60 - lag, :5])) for lag in range(7)]
    assert 1 <= int(np.argmin(errors)) <= 5 and min(errors) < 2.0, errors
    # DART: `action` is the leader's command plus an offset of about perturb_rad on each arm
    # joint (stored in degrees), the gripper's untouched; the arm followed the offset command.
    offset_deg = (action - clean)[np.r_[10:60, 70:120]]  # past each episode's start (velocity clamps)
    assert 0.5 < np.std(offset_deg[:, :5]) / math.degrees(perturb_rad) < 2.0, np.std(offset_deg[:, :5], axis=0)
    assert np.abs(offset_deg[:, 5]).max() < 1e-3
    lag = int(np.argmin(errors))
    to_clean = np.median(np.abs(state[lag:60, :5] - clean[: 60 - lag, :5]))
    assert to_clean > 1.5 * min(errors), (to_clean, errors)
    for cam in ("front", "wrist"):
        key = f"observation.images.{cam}"
        assert tuple(ds.meta.features[key]["shape"]) == (48, 64, 3)
        frames = np.stack([ds[i][key].numpy() for i in (0, 30, 59)])  # (3, 3, H, W) in [0, 1]
        assert frames.std(axis=(1, 2, 3)).min() > 0.02  # an image, not a flat frame
        assert np.abs(frames[0] - frames[-1]).mean() > 0.005, cam  # the arm moved in view


def test_twin_round_trip_record_lerobot_train_act_and_serve_it_in_vlash_mode(tmp_path: Path) -> None:
    """The real-arm path end to end on lerobot's drivers: 3 episodes from the leader with two
    cameras (`record --twin`: each on the twin's next scene, driven from its first tick, the
    twin's camera calibration stored with the dataset) -> lerobot-train ACT (lerobot's own
    trainer, in the project's venv) -> robotrl serves that checkpoint on the twin in vlash
    mode, in the dataset's units."""
    info_file = tmp_path / "twin.json"
    proc, info = start_twin(tmp_path, "--task", "reach", "--info", str(info_file))
    root, out = tmp_path / "demos", tmp_path / "act"
    try:
        argv = ["robotrl.cli", "record", "--robot", "so101", "--twin", str(info_file), "--teleop", "leader"]
        argv += ["--episodes", "3", "--episode-time-s", "1", "--task", "touch the red ball", "--root", str(root)]
        ran = subprocess.run([sys.executable, "-m", *argv], env=ENV, capture_output=True, text=True, timeout=300)
        assert ran.returncode == 0, ran.stderr[-3000:]
        log = (tmp_path / "twin.err").read_text()
        scenes = re.findall(r"scene (\d) \(seed \d+\) (?:not solved in|solved at) [\d.]+ s(.*)", log)
        assert [n for n, _ in scenes] == ["1", "2", "3"], log[-3000:]  # the first scene, then one per episode
        assert scenes[0][1] == " (not driven throughout)" and scenes[1][1] == scenes[2][1] == "", scenes
        assert json.loads((root / "meta" / "camera_calibration.json").read_text()) == json.loads(
            Path(info["camera_calibration"]).read_text()
        )
        train = [sys.executable, "-m", "lerobot.scripts.lerobot_train", "--dataset.repo_id=local/demos"]
        train += [f"--dataset.root={root}", "--dataset.video_backend=pyav", "--policy.type=act", "--policy.device=cpu"]
        train += ["--policy.push_to_hub=false", "--policy.pretrained_backbone_weights=null", "--policy.dim_model=32"]
        train += ["--policy.dim_feedforward=64", "--policy.n_encoder_layers=1", "--policy.n_decoder_layers=1"]
        train += ["--policy.chunk_size=8", "--policy.n_action_steps=8", "--steps=20", "--batch_size=4"]
        train += ["--num_workers=0", "--save_freq=1000", f"--output_dir={out}", "--wandb.enable=false"]
        trained = subprocess.run(train, env=ENV, capture_output=True, text=True, timeout=600)
        assert trained.returncode == 0, trained.stderr[-3000:]
        checkpoint = out / "checkpoints" / "last" / "pretrained_model"
        config = json.loads((checkpoint / "config.json").read_text())
        assert set(config["input_features"]) == {
            "observation.state",
            "observation.images.front",
            "observation.images.wrist",
        }
        args = ["--robot", "so101", "--port", info["follower_port"], "--robot-id", info["robot_id"]]
        args += [
            "--cameras",
            info["cameras"],
            "--mode",
            "vlash",
            "--policy",
            str(checkpoint),
            "--task",
            "touch the red ball",
        ]
        deployed = run_on_twin(info, "robotrl.cli", "deploy", *args, "--episodes", "1", "--max-seconds", "2")
    finally:
        stop_twin(proc)
    assert deployed.returncode == 0, deployed.stderr[-3000:]
    row = next(line.split() for line in deployed.stdout.splitlines() if line.startswith("0 "))
    ticks, missed = int(row[2]), int(row[3])
    assert ticks == 60 and missed <= 6, deployed.stdout  # 2 s at 30 Hz on the twin's wall clock
    assert "arm read (motors and cameras, ms): p50" in deployed.stdout
    ticks_of = {  # "inference delay (ticks): p50 1  p95 1  max 2" -> [1, 1, 2]
        line.split(" (ticks)")[0]: [float(v) for v in line.split()[-5::2]]
        for line in deployed.stdout.splitlines()
        if " (ticks): p50" in line
    }
    assert ticks_of["row age"][0] >= ticks_of["inference delay"][0] >= 0  # a row runs once its reply is in
    from robotrl.policies.loading import load_policy

    assert load_policy(checkpoint).joints.name == "lerobot"  # served in the dataset's degrees


def test_lerobot_record_itself_on_the_twin_makes_a_dataset_robotrl_trains_on(tmp_path: Path) -> None:
    """lerobot's own recorder (`lerobot-record`, its SO-101 follower and leader, ZMQ cameras)
    against the twin: its dataset (degrees, robot_type so_follower) loads in radians."""
    from robotrl.hardware.lerobot_arm.convention import LEROBOT, JointConvention
    from robotrl.record.dataset import load_frames

    proc, info = start_twin(tmp_path, "--task", "reach")
    root = tmp_path / "lerobot_recorded"
    args = ["--robot.type=so101_follower", f"--robot.port={info['follower_port']}", f"--robot.id={info['robot_id']}"]
    args += [f"--robot.cameras={info['cameras']}", "--teleop.type=so101_leader", f"--teleop.port={info['leader_port']}"]
    args += [
        f"--teleop.id={info['leader_id']}",
        "--display_data=false",
        "--dataset.repo_id=me/twin",
        f"--dataset.root={root}",
    ]
    args += ["--dataset.single_task=touch the red ball", "--dataset.num_episodes=2", "--dataset.episode_time_s=1.5"]
    args += ["--dataset.reset_time_s=0", "--dataset.push_to_hub=false"]
    try:
        ran = run_on_twin(info, "lerobot.scripts.lerobot_record", *args)
    finally:
        stop_twin(proc)
    assert ran.returncode == 0, ran.stderr[-3000:]
    frames = load_frames(root, cameras=("front", "wrist"), image_size_px=32, progress=False)
    assert frames.joint_units == "lerobot" and frames.num_episodes == 2
    table = json.loads((root / "meta" / "info.json").read_text())
    assert table["robot_type"] == "so_follower"
    import pandas as pd

    stored = np.stack(
        pd.concat(pd.read_parquet(p) for p in sorted((root / "data").rglob("*.parquet")))["observation.state"]
    )
    np.testing.assert_allclose(frames.states, JointConvention(LEROBOT, "so101").to_radians(stored), atol=1e-6)
    assert np.ptp(frames.states[:, :5], axis=0).max() > 0.1  # the expert moved the arm (radians)


def test_deploy_on_a_twin_lays_out_each_episodes_scene_before_its_first_reading(tmp_path: Path, tiny_flow) -> None:
    """`deploy --twin INFO`: the arm's bus, cameras and calibration come from the twin's info
    file, and each episode's reset period asks the twin for a new scene (SIGUSR1), so every
    scene is driven from its episode's first reading on. Without --task the policy is told
    the one instruction it was trained on (the server's hello names it)."""
    tiny_flow(cameras=("front",), instructions=("touch the red ball",)).save(tmp_path / "ckpt")
    info_file = tmp_path / "twin.json"
    proc, _ = start_twin(tmp_path, "--task", "reach", "--info", str(info_file))
    try:
        argv = [
            "robotrl.cli",
            "deploy",
            "--robot",
            "so101",
            "--twin",
            str(info_file),
            "--policy",
            str(tmp_path / "ckpt"),
        ]
        argv += ["--episodes", "2", "--max-seconds", "1"]
        deployed = subprocess.run([sys.executable, "-m", *argv], env=ENV, capture_output=True, text=True, timeout=300)
    finally:
        stop_twin(proc)
    assert deployed.returncode == 0, deployed.stderr[-3000:]
    assert deployed.stderr.count("reset the scene: the episode starts in 0.3 s") == 2, deployed.stderr[-3000:]
    assert "instruction: 'touch the red ball' (the one the policy was trained on)" in deployed.stderr
    log = (tmp_path / "twin.err").read_text()
    ended = re.findall(r"scene (\d) \(seed \d+\) not solved in ([\d.]+) s(.*)", log)
    assert [n for n, _, _ in ended] == ["1", "2", "3"], log[-3000:]  # the first scene, then one per episode
    # Scene 2 is episode 1 (1 s) and the start of episode 2's reset period, driven on every tick;
    # scene 3 is episode 2, driven until deploy let go of the arm: both count, the first does not.
    assert 1.0 <= float(ended[1][1]) <= 2.0 and ended[1][2] == "" and ended[2][2] == "", ended
    assert ended[0][2] == " (not driven throughout)" and "of 2 driven scenes solved" in log


def test_a_person_takes_over_with_the_twins_leader_while_the_terminals_i_holds_it(tmp_path: Path, tiny_flow) -> None:
    """`actor --twin INFO --intervene leader`: the leader arm's pose is the target while the
    terminal's `i` toggles the takeover (a leader has no buttons). On the twin the task's
    expert moves the leader, as a person would, so the episode taken over from its first tick
    solves its reach scene through lerobot's leader and follower drivers, every tick flagged;
    each episode starts with the takeover off, so the next one is the untrained policy's. The
    leader's bus and calibration come from the twin's info file."""
    import pty
    import tty

    from robotrl.learn.metrics import read_csv

    tiny_flow(cameras=("front",), instructions=("touch the red ball",)).save(tmp_path / "ckpt")
    info_file = tmp_path / "twin.json"
    proc, _ = start_twin(tmp_path, "--task", "reach", "--info", str(info_file))
    terminal, person = pty.openpty()
    try:
        tty.setcbreak(person)
        os.write(terminal, b"i")  # typed before the first episode: read on its first tick
        argv = ["robotrl.cli", "actor", "--robot", "so101", "--twin", str(info_file)]
        argv += ["--policy", str(tmp_path / "ckpt"), "--intervene", "leader", "--actor-log", str(tmp_path / "a.csv")]
        argv += ["--episodes", "2", "--max-seconds", "3"]
        ran = subprocess.run(
            [sys.executable, "-m", *argv], stdin=person, env=ENV, capture_output=True, text=True, timeout=300
        )
    finally:
        stop_twin(proc)
        os.close(terminal)
        os.close(person)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "leader: i (or a foot pedal typing i) toggles the takeover" in ran.stderr
    rows = read_csv(tmp_path / "a.csv")
    assert [int(r["ticks"]) for r in rows] == [90, 90], rows  # 3 s at 30 Hz
    assert [(int(r["intervention_ticks"]), int(r["takeovers"])) for r in rows] == [(90, 1), (0, 0)], rows
    log = (tmp_path / "twin.err").read_text()
    ended = re.findall(r"scene (\d) \(seed \d+\) (solved|not solved)", log)
    assert ended[1:3] == [("2", "solved"), ("3", "not solved")], log[-3000:]


def test_a_leader_takeover_needs_the_leaders_bus_or_a_twin_to_take_it_from() -> None:
    from robotrl.core.errors import UserError
    from robotrl.inference.arm import ArmConfig
    from robotrl.learn.actor import ActorJob, InterventionConfig

    real = ArmConfig("so101", "touch the red ball", port="/dev/ttyACM0")
    with pytest.raises(UserError, match="--intervene leader needs --leader-port"):
        ActorJob(real, "tcp://127.0.0.1:1", intervention=InterventionConfig("leader"))
    ActorJob(real, "tcp://127.0.0.1:1", intervention=InterventionConfig("leader", leader_port="/dev/ttyACM1"))
    twin = ArmConfig("so101", "touch the red ball", twin_info="twin.json")
    ActorJob(twin, "tcp://127.0.0.1:1", intervention=InterventionConfig("leader"))
