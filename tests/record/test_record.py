"""Recording into LeRobot datasets: real MuJoCo arm, real lerobot dataset API, real files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from recorded import SIM_JOINTS, load

from robotrl.cli import main
from robotrl.core.robot import RobotState
from robotrl.hardware.camera_geometry import load_rig
from robotrl.hardware.teleop.base import TeleopCommand, TeleopEvents
from robotrl.record import features as F
from robotrl.record.loop import record_episode
from robotrl.record.run import RecordConfig, record_dataset
from robotrl.record.writer import DatasetWriter
from robotrl.sim.env import TaskEnv
from robotrl.sim.teleop import ExpertTeleop


def episode_actions(root: Path) -> dict[int, np.ndarray]:
    """Executed actions of every episode, read straight from the parquet files."""
    import pandas as pd

    frames = pd.concat(pd.read_parquet(p) for p in sorted((root / "data").rglob("*.parquet")))
    return {
        int(e): np.stack(g.sort_values("frame_index")["action"].to_numpy()) for e, g in frames.groupby("episode_index")
    }


def test_recorded_sim_dataset_loads_with_lerobot(tmp_path, capsys):
    root = tmp_path / "reach_demo"
    rc = main(["record", "--task", "reach", "--episodes", "2", "--root", str(root), "--image-size", "64"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "dropped frames             0" in out

    ds = load(root)
    info = json.loads((root / "meta" / "info.json").read_text())
    lengths = list(ds.meta.episodes["length"])
    assert ds.num_episodes == 2 and ds.fps == 30
    assert len(ds) == sum(lengths) == info["total_frames"]
    assert all(20 < n <= 150 for n in lengths)  # reach succeeds well inside its 150 ticks
    assert ds.features[F.STATE]["names"] == [
        "shoulder_pan",
        "shoulder_lift",
        "elbow_flex",
        "wrist_flex",
        "wrist_roll",
        "gripper",
    ]
    assert ds.features[F.image_key("front")]["dtype"] == "video"
    frame = ds[lengths[0] + 3]  # 4th frame of episode 1
    assert int(frame["episode_index"]) == 1 and int(frame["frame_index"]) == 3
    assert frame[F.image_key("front")].shape == (3, 64, 64)
    assert frame[F.image_key("wrist")].shape == (3, 64, 64)
    assert frame[F.STATE].shape == (6,) and frame[F.ENV_STATE].shape == (3,)
    assert frame["task"] == "touch the red ball"
    # Stepped mode: the measured time of frame 3 is exactly 3 control periods.
    assert float(frame[F.MEASURED_TIME]) == pytest.approx(3 / 30, abs=1e-5)
    # The last frame of each episode is a success (the expert touched the ball).
    last = ds[lengths[0] - 1]
    assert bool(last[F.SUCCESS])
    # The cameras' exact calibration is kept with the dataset (for `train --ball-target`).
    rig = load_rig(root / F.CAMERA_CALIBRATION)
    assert {n: (c.mount, c.width_px) for n, c in rig.cameras.items()} == {"front": ("base", 64), "wrist": ("ee", 64)}


class JumpTeleop:
    """Holds the start pose, then asks for a 1 rad jump of shoulder_pan at tick 5."""

    def __init__(self) -> None:
        self.tick = 0
        self.start = None

    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    def reset(self, state: RobotState) -> None:
        self.tick, self.start = 0, state.q_rad.copy()

    def read(self, state: RobotState) -> TeleopCommand:
        self.tick += 1
        target = self.start.copy()
        if self.tick >= 5:
            target[0] += 1.0
        return TeleopCommand(target, TeleopEvents(success=self.tick == 12))


def test_stored_action_is_the_clamped_command(tmp_path):
    env = TaskEnv("reach", cameras=())
    writer = DatasetWriter(
        tmp_path / "jump", F.dataset_features(env.spec, SIM_JOINTS, env.env_state_dim), 30, SIM_JOINTS
    )
    outcome = record_episode(env, JumpTeleop(), writer, seed=0, max_ticks=50)
    writer.save_episode()
    env.close()
    assert outcome.frames == 12 and outcome.success
    actions = episode_actions(tmp_path / "jump")[0]
    import pandas as pd

    teleop = np.stack(pd.read_parquet(next((tmp_path / "jump" / "data").rglob("*.parquet")))[F.TELEOP_ACTION])
    # so101 pan velocity limit 3.0 rad/s at 30 Hz -> at most 0.1 rad per tick. The jump is
    # asked from frame 4 on: executed pan climbs 0.1 per frame, the teleop column keeps +1.0.
    start = actions[0, 0]
    np.testing.assert_allclose(actions[4:8, 0] - start, [0.1, 0.2, 0.3, 0.4], atol=1e-6)
    np.testing.assert_allclose(teleop[4:8, 0] - start, 1.0, atol=1e-6)
    assert np.all(np.abs(np.diff(actions[:, 0])) <= 0.1 + 1e-6)


def test_disturbance_is_a_reproducible_slow_offset_on_the_arm_joints():
    from robotrl.record.disturbance import Disturbance

    dist = Disturbance(0.04, joints=6, correlation_ticks=15)
    dist.reset(seed=3)
    offsets = np.array([dist() for _ in range(20_000)])
    assert np.all(offsets[:, 5] == 0.0)  # the gripper is left alone
    # Ornstein-Uhlenbeck: stationary std 0.04 rad, lag-1 correlation exp(-1/15) = 0.936.
    np.testing.assert_allclose(offsets[2000:, :5].std(0), 0.04, rtol=0.2)
    lag1 = np.corrcoef(offsets[2000:-1, 0], offsets[2001:, 0])[0, 1]
    assert lag1 == pytest.approx(np.exp(-1 / 15), abs=0.02)
    dist.reset(seed=3)
    np.testing.assert_array_equal([dist() for _ in range(5)], offsets[:5])  # same seed, same stream


def test_perturbed_recording_keeps_the_clean_targets_and_trains_on_them(tmp_path):
    """DART: the arm is pushed off the demonstrator's path (executed action = teleop + offset),
    teleop.action keeps the clean target, and training can read either column."""
    import pandas as pd

    from robotrl.record.dataset import load_frames

    root = tmp_path / "dart"
    assert (
        main(
            [
                "record",
                "--task",
                "reach",
                "--episodes",
                "2",
                "--root",
                str(root),
                "--cameras",
                "",
                "--perturb",
                "0.05",
                "--noise",
                "0",
            ]
        )
        == 0
    )
    table = pd.concat(pd.read_parquet(p) for p in sorted((root / "data").rglob("*.parquet")))
    executed, clean = np.stack(table[F.ACTION]), np.stack(table[F.TELEOP_ACTION])
    gap = executed[:, :5] - clean[:, :5]
    assert 0.01 < np.abs(gap).mean() < 0.1 and np.all(executed[:, 5] == clean[:, 5])
    assert not any(k.startswith("observation.images") for k in load(root).features)  # --cameras ''
    teleop = load_frames(root, cameras=(), action_key=F.TELEOP_ACTION, progress=False)
    np.testing.assert_array_equal(teleop.actions, clean.astype(np.float32))
    np.testing.assert_array_equal(load_frames(root, cameras=(), progress=False).actions, executed.astype(np.float32))


class RerecordOnce(ExpertTeleop):
    """The expert, but the first episode is thrown away at tick 10 (re-record)."""

    def __init__(self, env: TaskEnv) -> None:
        super().__init__(env)
        self.calls = 0
        self.episodes = 0

    def reset(self, state: RobotState) -> None:
        super().reset(state)
        self.episodes += 1
        self.calls = 0

    def read(self, state: RobotState) -> TeleopCommand:
        self.calls += 1
        cmd = super().read(state)
        if self.episodes == 1 and self.calls == 10:
            return TeleopCommand(cmd.target_rad, TeleopEvents(rerecord=True))
        return cmd


def record_reach(root: Path, make_teleop, config: RecordConfig):
    """`record_dataset` on a camera-less reach scene into a new dataset at `root`; the
    summary and the teleop."""
    env = TaskEnv("reach", cameras=())
    teleop = make_teleop(env)
    writer = DatasetWriter(root, F.dataset_features(env.spec, SIM_JOINTS, env.env_state_dim), 30, SIM_JOINTS)
    summary = record_dataset(env, teleop, writer, config)
    writer.close()
    env.close()
    return summary, teleop


def test_rerecord_discards_and_repeats_the_episode(tmp_path):
    root = tmp_path / "rerecord"
    summary, _ = record_reach(root, RerecordOnce, RecordConfig(episodes=2, seed=0, max_ticks=150))
    assert summary.rerecorded == 1 and summary.episodes_saved == 2
    ds = load(root)
    assert ds.num_episodes == 2
    assert len(ds) == summary.frames  # no frame of the discarded attempt was kept


def test_episode_metadata_stays_one_file_and_reopening_leaves_no_cache(tmp_path, monkeypatch):
    """Each episode re-opens the dataset, which reads every episode-metadata file: merged
    after each save, there is one file whatever the count (with a file per episode the
    start of episode 600 took 14 s), the rows point at it, and the `datasets` cache of each
    re-open is removed with it. A crash after a merge, before its commit, is rolled back."""
    import pyarrow.parquet as pq

    from robotrl.record.commit import EPISODE_META, begin_write

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    root = tmp_path / "many"
    summary, _ = record_reach(root, ExpertTeleop, RecordConfig(episodes=4, seed=0, max_ticks=60))
    assert [p.relative_to(root).as_posix() for p in (root / "meta" / "episodes").rglob("*.parquet")] == [EPISODE_META]
    rows = pq.read_table(root / EPISODE_META).to_pydict()
    assert rows["episode_index"] == [0, 1, 2, 3] and set(rows["meta/episodes/file_index"]) == {0}
    assert rows["dataset_to_index"][-1] == summary.frames
    assert list((tmp_path / "tmp").glob("robotrl-record-cache-*")) == []
    ds = load(root)
    assert ds.num_episodes == 4 and len(ds) == summary.frames

    merged = (root / EPISODE_META).read_bytes()
    begin_write(root)  # killed after merging the next episode's row, before committing it
    (root / EPISODE_META).write_bytes(merged[: len(merged) // 2])
    args = ["record", "--task", "reach", "--episodes", "1", "--root", str(root), "--cameras", "", "--seed", "9"]
    assert main([*args, "--resume"]) == 0
    assert pq.read_table(root / EPISODE_META).to_pydict()["episode_index"] == [0, 1, 2, 3, 4]
    assert load(root).num_episodes == 5


def test_kill_9_mid_episode_then_resume(tmp_path):
    root = tmp_path / "crash"
    cmd = [
        sys.executable,
        "-m",
        "robotrl.cli",
        "record",
        "--task",
        "reach",
        "--episodes",
        "8",
        "--root",
        str(root),
        "--image-size",
        "32",
        "--realtime",
    ]
    env = dict(os.environ)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    info = root / "meta" / "info.json"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if len(list((root / "data").rglob("*.parquet"))) >= 2 if root.exists() else False:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the recorder never saved two episodes")
        time.sleep(0.6)  # well inside the next episode (about 1.7 s long in real time)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        proc.kill()
    saved = json.loads(info.read_text())["total_episodes"]
    assert 2 <= saved < 8
    before = episode_actions(root)
    assert sorted(before) == list(range(saved))
    assert load(root).num_episodes == saved  # loadable right after the crash

    assert (
        main(
            [
                "record",
                "--task",
                "reach",
                "--episodes",
                "1",
                "--root",
                str(root),
                "--image-size",
                "32",
                "--resume",
                "--seed",
                "100",
            ]
        )
        == 0
    )
    after = episode_actions(root)
    assert sorted(after) == list(range(saved + 1))
    for episode, actions in before.items():
        np.testing.assert_array_equal(after[episode], actions)  # committed episodes intact
    assert load(root).num_episodes == saved + 1
    # the killed episode's streaming-encoder files were cleaned up on resume
    assert not [p for p in root.glob("tmp*/*") if p.is_file()]


def test_bad_input_is_reported_and_nothing_is_damaged(tmp_path, capsys):
    root = tmp_path / "ds"
    assert main(["record", "--task", "reach", "--episodes", "1", "--root", str(root), "--image-size", "32"]) == 0
    snapshot = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    capsys.readouterr()

    assert main(["record", "--task", "reach", "--teleop", "telepathy", "--root", str(tmp_path / "x")]) == 2
    assert "unknown teleop device 'telepathy'" in capsys.readouterr().err

    assert main(["record", "--task", "reach", "--episodes", "1", "--root", str(root)]) == 2
    assert "already exists: pass --resume" in capsys.readouterr().err

    assert main(["record", "--task", "pick_place", "--episodes", "1", "--root", str(root), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "features differ" in err and "sim.environment_state" in err

    assert main(["record", "--task", "reach", "--root", str(tmp_path / "missing"), "--resume"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["record", "--task", "reach", "--root", str(tmp_path / "y"), "--perturb", "-1"]) == 2
    assert "--perturb must be >= 0" in capsys.readouterr().err and not (tmp_path / "y").exists()
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == snapshot


def test_interrupted_save_is_rolled_back_on_resume(tmp_path):
    """A crash in the middle of lerobot's save: a half-written info.json and a stray data
    file, robotrl's write marker still set. --resume returns the folder to the last
    committed episode and appends."""
    from robotrl.record.commit import begin_write

    root = tmp_path / "torn"
    assert main(["record", "--task", "reach", "--episodes", "2", "--root", str(root), "--image-size", "32"]) == 0
    before = episode_actions(root)
    begin_write(root)  # what a writer killed between opening and committing leaves
    info = root / "meta" / "info.json"
    info.write_text(info.read_text()[:100])  # torn write
    stray = root / "data" / "chunk-000" / "file-009.parquet"
    stray.write_bytes(b"PAR1 half a file")
    assert (
        main(
            [
                "record",
                "--task",
                "reach",
                "--episodes",
                "1",
                "--root",
                str(root),
                "--image-size",
                "32",
                "--resume",
                "--seed",
                "7",
            ]
        )
        == 0
    )
    assert not stray.exists()
    after = episode_actions(root)
    assert sorted(after) == [0, 1, 2]
    for episode, actions in before.items():
        np.testing.assert_array_equal(after[episode], actions)
    assert load(root).num_episodes == 3


def test_resume_adopts_edits_made_with_lerobots_own_tools(tmp_path):
    """lerobot's `modify_tasks` (what `lerobot-edit-dataset --operation.type modify_tasks`
    runs) rewrites meta/tasks.parquet in place; --resume keeps that edit and appends."""
    from lerobot.datasets.dataset_tools import modify_tasks

    root = tmp_path / "edited"
    assert main(["record", "--task", "reach", "--episodes", "1", "--root", str(root), "--image-size", "32"]) == 0
    modify_tasks(load(root), new_task="touch the red dot")
    args = ["record", "--task", "reach", "--episodes", "1", "--root", str(root), "--image-size", "32"]
    assert main([*args, "--resume", "--seed", "3"]) == 0
    ds = load(root)
    assert ds.num_episodes == 2 and "touch the red dot" in list(ds.meta.tasks.index)
    assert ds[0]["task"] == "touch the red dot"


def test_repo_id_places_the_dataset_where_lerobot_looks_and_an_offline_push_is_one_line(tmp_path):
    """`--repo-id user/name` without --root records into $HF_LEROBOT_HOME/user/name (where
    lerobot's tools look for it); `--push-to-hub` offline fails with one line, exit 2, and
    the recorded dataset stays."""
    env = {**os.environ, "HF_LEROBOT_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "MUJOCO_GL": "egl"}
    args = ["record", "--task", "reach", "--episodes", "1", "--image-size", "32", "--repo-id", "me/reach_demos"]
    ran = subprocess.run(
        [sys.executable, "-m", "robotrl.cli", *args, "--push-to-hub"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 2
    last = ran.stderr.strip().splitlines()[-1]
    assert "could not push" in last and "me/reach_demos" in last and "(the dataset is saved)" in last, ran.stderr[
        -2000:
    ]
    assert load(tmp_path / "home" / "me" / "reach_demos").num_episodes == 1
    for bad in (["--repo-id", "reach_demos"], ["--push-to-hub", "--root", str(tmp_path / "r")], []):
        assert main(["record", "--task", "reach", *bad]) == 2


class CountingTeleop(ExpertTeleop):
    reads = 0

    def read(self, state):
        self.reads += 1
        return super().read(state)


def test_reset_time_drives_the_arm_between_episodes_without_recording(tmp_path):
    config = RecordConfig(episodes=3, seed=0, max_ticks=150, reset_ticks=20)
    summary, teleop = record_reach(tmp_path / "reset", CountingTeleop, config)
    assert summary.episodes_saved == 3 and len(load(tmp_path / "reset")) == summary.frames
    assert teleop.reads == summary.frames + 2 * 20  # two resets between three episodes, none after the last


def test_a_finished_recording_is_packed_into_lerobots_files_and_resumes(tmp_path):
    """Per-episode files while recording (crash safety), lerobot's packed layout when the
    session ends: one parquet and one video per camera, the same frames, and a later
    --resume appends and packs again."""
    from robotrl.record.pack import data_files

    root = tmp_path / "packed"
    args = ["record", "--task", "reach", "--root", str(root), "--image-size", "32"]
    assert main([*args, "--episodes", "3"]) == 0
    assert [p.relative_to(root).as_posix() for p in data_files(root)] == [
        "data/chunk-000/file-000.parquet",
        "videos/observation.images.front/chunk-000/file-000.mp4",
        "videos/observation.images.wrist/chunk-000/file-000.mp4",
    ]
    first = episode_actions(root)
    frame = load(root)[100]["observation.images.front"]
    assert main([*args, "--episodes", "2", "--resume", "--seed", "5"]) == 0
    assert len(data_files(root)) == 3
    after = episode_actions(root)
    assert sorted(after) == [0, 1, 2, 3, 4]
    for episode, actions in first.items():
        np.testing.assert_array_equal(after[episode], actions)
    ds = load(root)
    assert ds.num_episodes == 5 and torch_equal(ds[100]["observation.images.front"], frame)


def test_packing_caps_each_video_files_duration_so_lerobot_finds_every_frame(tmp_path, monkeypatch):
    """lerobot's decoder compares float32 timestamps, too coarse past 1024 s for its
    tolerance: packed video files are cut at `MAX_VIDEO_FILE_S` (here shrunk below one
    episode, so each episode gets its own file) and every frame still loads."""
    from lerobot.datasets.video_utils import get_video_duration_in_s

    import robotrl.record.pack as pack
    from robotrl.record.pack import data_files

    monkeypatch.setattr(pack, "MAX_VIDEO_FILE_S", 0.01)
    root = tmp_path / "capped"
    assert main(["record", "--task", "reach", "--root", str(root), "--image-size", "32", "--episodes", "3"]) == 0
    videos = [p for p in data_files(root) if "observation.images.front" in p.as_posix()]
    assert len(videos) == 3 and len(list((root / "data").rglob("*.parquet"))) == 1
    ds = load(root)
    longest = max(ds.meta.episodes[e]["length"] for e in range(3)) / ds.fps
    assert all(get_video_duration_in_s(p) <= longest + 1 / ds.fps for p in videos)
    last = ds.meta.episodes[2]["dataset_to_index"] - 1
    assert ds[last]["observation.images.front"].shape == (3, 32, 32)


def test_frames_late_in_a_long_video_file_decode_within_float32_spacing():
    """Past 1024 s float32's spacing (1.2e-4 s) exceeds lerobot's 1e-4 s tolerance; the
    loader's tolerance follows it, and stays lerobot's own early in a file."""
    from robotrl.record.dataset import frame_tolerance_s

    assert frame_tolerance_s(1e-4, 3.0) == 1e-4
    late = frame_tolerance_s(1e-4, 1024.7667)
    assert late >= 2 * np.spacing(np.float32(1024.7667)) > 1e-4 and late < 1e-3


def torch_equal(a, b) -> bool:
    return bool((a == b).all())


def test_sigterm_ends_the_episode_in_progress_and_exits_cleanly(tmp_path):
    # `robotrl up` stops a recorder with SIGTERM: it ends the episode in progress as a stop
    # key does (kept with --keep-failed), saves and packs the dataset, exits 0
    root, beacon = tmp_path / "ds", tmp_path / "beacon.json"
    cmd = [sys.executable, "-m", "robotrl.cli", "record", "--task", "reach", "--episodes", "50", "--root", str(root)]
    cmd += ["--cameras", "", "--realtime", "--keep-failed", "--beacon", str(beacon)]
    proc = subprocess.Popen(cmd, env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while (json.loads(beacon.read_text()) if beacon.exists() else {}).get("episodes", 0) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, "the recorder never saved two episodes"
            time.sleep(0.05)
        time.sleep(0.5)  # inside the next episode
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    saved = load(root).num_episodes  # finalized: lerobot loads it
    assert 3 <= saved < 50  # the two before, the one in progress kept, no more
    assert sorted(episode_actions(root)) == list(range(saved))


def test_a_stop_signal_becomes_a_stop_event_on_the_next_tick():
    import threading

    from robotrl.record.teleop import StopOnSignal

    class Device:
        connected = False

        def connect(self):
            self.connected = True

        def disconnect(self):
            self.connected = False

        def reset(self, state):
            pass

        def read(self, state):
            return TeleopCommand(np.full(6, 0.25), TeleopEvents(intervene=True))

    stop = threading.Event()
    teleop = StopOnSignal(Device(), stop)
    teleop.connect()
    assert teleop.device.connected and teleop.read(None).events == TeleopEvents(intervene=True)
    stop.set()
    cmd = teleop.read(None)
    assert cmd.events == TeleopEvents(intervene=True, stop=True) and cmd.events.ends_episode
    np.testing.assert_array_equal(cmd.target_rad, np.full(6, 0.25))  # the device's target, untouched
