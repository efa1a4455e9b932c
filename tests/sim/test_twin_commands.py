"""Commands against a running `robotrl twin` process, through lerobot's real drivers and
cameras: a clean SIGTERM, `robotrl record` (with DART offsets and `--twin`), `lerobot-train`
and `lerobot-record` on its recordings, `deploy --twin` and a leader takeover."""

from __future__ import annotations

import json
import math
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from robotrl.hardware.camera_geometry import load_rig

TICK_RAD = 2 * math.pi / 4095
"""One encoder tick in lerobot's maths (360 deg per 4095 ticks)."""
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}


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
    age_line = next(line for line in deployed.stdout.splitlines() if line.startswith("camera frame age (ms)"))
    age_p50, age_max = float(age_line.split()[5]), float(age_line.split()[-1])
    assert 0.0 < age_p50 <= age_max < 200.0  # lerobot's capture stamps: 30 fps frames, sent once each
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
