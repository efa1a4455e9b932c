"""`robotrl up` and a fleet's recorders: the `[robots.NAME.record]` fields (errors that name
the field), the plan (the recorder before the arm's role on the same robot, its `robotrl
record` argv recording only the episodes the dataset lacks), the supervisor starting a
role once the role it waits for is done, the recorder's beacon and status row, and a
simulated arm's dataset recorded by `robotrl up` for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_up import names_the_field

from robotrl.bringup.launches import RecordLaunch
from robotrl.bringup.plan import plan_bringup
from robotrl.bringup.process import SpawnError
from robotrl.bringup.status import status_table
from robotrl.bringup.supervisor import RoleSpec, Supervisor
from robotrl.core.errors import ConfigError
from robotrl.fleet import load_fleet, parse_fleet
from robotrl.record.beacon import RecordBeacon

ROBOT = '[robots.a]\nmodel = "so101"\ndriver = "{driver}"\nroles = ["recorder"]\n'
SIM = ROBOT.format(driver="sim")
REAL = ROBOT.format(driver="lerobot") + 'port = "/dev/ttyACM0"\n'
RECORD = '[robots.a.record]\ndataset = "d"\n'

BAD_RECORD = [
    (SIM, 'robots.a.record: missing; the recorder role needs [robots.a.record] with its dataset = "FOLDER"'),
    (SIM.replace('"recorder"', '"deploy_client"') + RECORD, "robots.a.record: only for a robot with the 'recorder'"),
    (SIM + "record = 3\n", "robots.a.record: expected a table [robots.a.record], got 3"),
    (SIM + "[robots.a.record]\nepisodes = 2\n", "robots.a.record.dataset: missing"),
    (SIM + '[robots.a.record]\ndataset = ""\n', "robots.a.record.dataset: must not be empty"),
    (SIM + RECORD + "fps = 30\n", "robots.a.record.fps: unknown key (known: dataset, episodes, teleop,"),
    (SIM + RECORD + "episodes = 0\n", "robots.a.record.episodes: must be at least 1, got 0"),
    (SIM + RECORD + 'teleop = "telepathy"\n', "robots.a.record.teleop: 'telepathy' is not a teleop device (expert,"),
    (SIM + RECORD + 'teleop = "keyboard"\n', "robots.a.record.teleop: 'keyboard' is not for `robotrl up`"),
    (REAL + RECORD + 'teleop = "expert"\n', "robots.a.record.teleop: 'expert' (the task's scripted expert) is for"),
    (REAL + RECORD, "robots.a.record.leader_port: missing; teleop 'leader' reads the leader arm"),
    (SIM + RECORD + 'leader_port = "/dev/ttyACM1"\n', "robots.a.record.leader_port: only for teleop 'leader'"),
    (
        REAL + RECORD + 'leader_port = "/dev/ttyACM0"\n',
        "robots.a.record.leader_port: '/dev/ttyACM0' is already used by robots.a",
    ),
    (SIM + RECORD + "max_seconds = 0\n", "robots.a.record.max_seconds: must be above 0, got 0"),
    (SIM + RECORD + "seed = -1\n", "robots.a.record.seed: must be at least 0, got -1"),
    (SIM + RECORD + "image_size = 0\n", "robots.a.record.image_size: must be at least 1, got 0"),
    (REAL + RECORD + 'teleop = "gamepad"\nimage_size = 64\n', "robots.a.record.image_size: only for driver 'sim'"),
    (REAL + RECORD + 'teleop = "gamepad"\ncameras = ""\n', "robots.a.record.cameras: only for driver 'sim'"),
    (SIM + RECORD + "cameras = 3\n", "robots.a.record.cameras: expected a comma-separated list of cameras"),
    (SIM + RECORD + 'keep_failed = "yes"\n', "robots.a.record.keep_failed: expected true or false, got 'yes'"),
    (ROBOT.format(driver="twin") + RECORD, "robots.a.record: not for driver 'twin'"),
    (SIM + RECORD + SIM.replace("robots.a", "robots.b") + RECORD.replace("robots.a", "robots.b"), "robots.b.record."),
]


@pytest.mark.parametrize(
    "text, message", BAD_RECORD, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(BAD_RECORD)]
)
def test_bad_record_field_is_named(text, message):
    names_the_field(text, message)


def test_record_defaults_follow_the_driver():
    sim = parse_fleet(tomllib.loads(SIM + RECORD)).robots[0].record
    assert sim is not None and (sim.device, sim.episodes, sim.max_seconds, sim.seed) == ("expert", 10, 20.0, 0)
    assert (sim.leader_id, sim.image_size_px, sim.cameras, sim.keep_failed) == ("leader", None, None, False)
    real = parse_fleet(tomllib.loads(REAL + RECORD + 'leader_port = "/dev/ttyACM1"\n')).robots[0].record
    assert real is not None and real.device == "leader"


def _plan(tmp_path: Path, text: str):
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    return plan_bringup(load_fleet(path), tmp_path / "run")


def _info(dataset: Path, episodes: int, at: str = "meta/info.json") -> None:
    """A fake dataset's info.json (at `at` under `dataset`) holding `episodes`."""
    (dataset / at).parent.mkdir(parents=True, exist_ok=True)
    (dataset / at).write_text(json.dumps({"total_episodes": episodes}))


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_recorder_runs_before_the_actor_on_its_arm_and_records_what_is_missing(tmp_path, tiny_flow):
    tiny_flow(cameras=()).save(tmp_path / "ckpt")
    dataset = tmp_path / "demos"
    text = SIM.replace('["recorder"]', '["recorder", "actor"]') + 'task = "reach"\nscenario = "nominal"\n'
    text += f'[robots.a.record]\ndataset = "{dataset}"\nepisodes = 5\nseed = 40\ncameras = ""\nmax_seconds = 2\n'
    text += f'[serve]\npolicy = "{tmp_path / "ckpt"}"\n[learn]\n'
    bringup = _plan(tmp_path, text)
    assert [r.name for r in bringup.roles] == ["learn", "serve", "robots.a.record", "robots.a"]
    _, _, record, arm = bringup.roles
    assert (record.kind, record.after, arm.after) == ("robot", (), ("serve", "learn", "robots.a.record"))
    assert record.log == tmp_path / "run" / "robots" / "a" / "record.log"
    assert record.info == {"role": "recorder", "dataset": str(dataset), "teleop": "expert"}
    launch = record.launch
    assert isinstance(launch, RecordLaunch)

    argv = launch.command(0)  # no dataset yet: all 5 episodes, from the first seed
    assert argv is not None and argv[1:4] == ["-m", "robotrl.cli", "record"]
    assert (_flag(argv, "--fleet"), _flag(argv, "--fleet-robot")) == (str(tmp_path / "fleet.toml"), "a")
    assert (_flag(argv, "--task"), _flag(argv, "--scenario"), _flag(argv, "--teleop")) == ("reach", "nominal", "expert")
    assert (_flag(argv, "--root"), _flag(argv, "--cameras"), _flag(argv, "--max-seconds")) == (str(dataset), "", "2")
    assert _flag(argv, "--beacon") == str(tmp_path / "run" / "robots" / "a" / "record.beacon.json")
    assert (_flag(argv, "--episodes"), _flag(argv, "--seed")) == ("5", "40")
    assert "--resume" not in argv and "--leader-port" not in argv and "--keep-failed" not in argv

    _info(dataset, 2)  # a restart appends the 3 missing episodes
    argv = launch.command(1)
    assert argv is not None and "--resume" in argv
    assert (_flag(argv, "--episodes"), _flag(argv, "--seed")) == ("3", "42")
    launch.beacon.parent.mkdir(parents=True, exist_ok=True)
    launch.beacon.write_text(json.dumps({"seed": 44}))  # the last start tried seeds up to 44
    argv = launch.command(2)
    assert argv is not None and _flag(argv, "--seed") == "45" and not launch.beacon.exists()

    _info(dataset, 4, ".robotrl_commit/current/meta__info.json")  # interrupted while saving: the commit counts
    (dataset / ".robotrl_commit" / "writing").touch()
    _info(dataset, 5)
    argv = launch.command(3)
    assert argv is not None and _flag(argv, "--episodes") == "1"
    (dataset / ".robotrl_commit" / "writing").unlink()
    assert launch.command(4) is None  # all 5 there: the role is done
    for role in bringup.roles:
        role.probe.close()


def test_a_fleet_of_recorders_needs_no_server_and_a_foreign_folder_is_named(tmp_path):
    record = RECORD.replace('"d"', f'"{tmp_path / "d"}"')
    bringup = _plan(tmp_path, SIM + record)
    assert [r.name for r in bringup.roles] == ["robots.a.record"] and bringup.endpoints == {}
    with pytest.raises(ConfigError, match=r"serve: missing; robots.a is a deploy_client"):
        _plan(tmp_path, SIM.replace('["recorder"]', '["recorder", "deploy_client"]') + record)
    (tmp_path / "d").mkdir()  # the dataset's folder holds something else
    with pytest.raises(ConfigError, match=r"robots.a.record.dataset: .*/d is not a LeRobotDataset \(no meta/info"):
        _plan(tmp_path, SIM + record)


def test_under_ray_a_recorder_runs_in_its_robots_actor(tmp_path):
    from robotrl.bringup.ray_cluster import RoleResources, role_resources
    from robotrl.commands.up import _spawners

    fleet = parse_fleet(tomllib.loads(SIM + RECORD))
    assert role_resources(fleet) == {"robots.a": RoleResources(1.0, 0.0, {"robot_a": 1.0}, "robots.a")}
    handle = object()  # the robot's placed actor
    bringup = _plan(tmp_path, SIM + RECORD.replace('"d"', f'"{tmp_path / "d"}"'))
    assert _spawners(bringup.roles, {"robots.a": handle}) == {"robots.a.record": handle}


# -- the supervisor: an arm's role after its recorder -------------------------------------


@dataclass
class _Process:
    pid: int
    code: int | None = None

    def poll(self) -> int | None:
        return self.code

    def send_signal(self, sig: int) -> None:
        self.code = -sig

    def kill(self) -> None:
        self.code = -9

    def wait(self) -> int:
        return 0 if self.code is None else self.code


class _Spawner:
    """Fake processes, one per start; `broken`: every start fails (its Ray actor is gone)."""

    node = None

    def __init__(self, broken: bool = False) -> None:
        self.procs: list[_Process] = []
        self.broken = broken

    def spawn(self, argv: list[str], log: Path, start: int) -> _Process:
        if self.broken:
            raise SpawnError("gone")
        self.procs.append(_Process(1000 + len(self.procs)))
        return self.procs[-1]


class _Launch:
    def command(self, start: int) -> list[str]:
        return ["run"]


class _Quiet:
    def check(self) -> tuple[float | None, dict]:
        return None, {}

    def close(self) -> None:
        pass


def _roles(tmp_path: Path) -> list[RoleSpec]:
    record = RoleSpec("robots.a.record", "robot", _Launch(), _Quiet(), tmp_path / "r.log", info={"role": "recorder"})
    arm = RoleSpec("robots.a", "robot", _Launch(), _Quiet(), tmp_path / "a.log", ("robots.a.record",))
    return [record, arm]


def test_a_role_starts_once_the_role_it_waits_for_is_done(tmp_path):
    recorder, arm = _Spawner(), _Spawner()
    sup = Supervisor(_roles(tmp_path), spawners={"robots.a.record": recorder, "robots.a": arm})
    sup.step()
    states = {name: r["state"] for name, r in sup.status()["roles"].items()}
    assert states == {"robots.a.record": "starting", "robots.a": "waiting"} and not arm.procs
    recorder.procs[0].code = 0  # the dataset is recorded
    sup.step()
    states = {name: r["state"] for name, r in sup.status()["roles"].items()}
    assert states == {"robots.a.record": "done", "robots.a": "starting"} and len(arm.procs) == 1
    assert sup.outcome() is None
    arm.procs[0].code = 0
    sup.step()
    assert sup.outcome() == 0
    sup.shutdown()


def test_a_role_whose_recorder_failed_fails_too(tmp_path):
    sup = Supervisor(_roles(tmp_path), spawners={"robots.a.record": _Spawner(broken=True), "robots.a": _Spawner()})
    sup.step()
    roles = sup.status()["roles"]
    assert (roles["robots.a.record"]["state"], roles["robots.a"]["state"]) == ("failed", "failed")
    assert roles["robots.a"]["last_exit"]["error"] == "robots.a.record failed"
    assert sup.outcome() == 1  # `up` ends instead of waiting for ever
    sup.shutdown()


# -- the recorder's beacon and status row -------------------------------------------------


def test_the_beacon_is_rewritten_at_most_every_half_second_and_at_each_episode_end(tmp_path):
    now = [10.0]
    path = tmp_path / "robots" / "a" / "record.beacon.json"
    beacon = RecordBeacon(path, clock=lambda: now[0])
    assert not path.exists()  # first written at the first episode's start
    beacon.on_episode_start(7)
    for _ in range(3):
        now[0] += 0.1
        beacon.on_tick()
    data = json.loads(path.read_text())
    assert (data["monotonic_s"], data["seed"], data["ticks"], data["pid"]) == (10.0, 7, 0, os.getpid())
    now[0] += 0.3  # 0.6 s after the last write
    beacon.on_tick()
    assert json.loads(path.read_text())["ticks"] == 4
    beacon.on_episode_end(True)
    assert json.loads(path.read_text())["control_rate_hz"] == pytest.approx(4 / 0.6, abs=0.01)  # 4 ticks in 0.6 s
    beacon.on_episode_start(8)
    now[0] += 0.25
    beacon.on_tick()
    beacon.on_episode_end(False)
    data = json.loads(path.read_text())
    assert (data["episodes"], data["frames"], data["discarded"], data["ticks"], data["seed"]) == (1, 4, 1, 5, 8)
    assert data["control_rate_hz"] == 4.0  # the episode's ticks per second since it started


def test_the_status_table_shows_a_recorders_episodes_of_those_wanted():
    report = {"episodes": 3, "episodes_planned": 10, "frames": 240, "discarded": 1, "seed": 4, "control_rate_hz": 29.6}
    role = {"kind": "robot", "role": "recorder", "state": "up", "pid": 42, "restarts": 0, "uptime_s": 9.0}
    status = {
        "phase": "running",
        "uptime_s": 10.0,
        "roles": {"robots.a.record": {**role, "quiet_s": 0.1, "report": report}},
    }
    row = status_table(status).splitlines()[-1]
    assert row.startswith("robots.a.record") and "recorded 3/10 episodes  frames 240  discarded 1  seed 4  30 Hz" in row


# -- a simulated arm's dataset, recorded by `robotrl up` ---------------------------------


def test_up_records_a_simulated_arms_dataset_and_ends(tmp_path):
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(
        SIM
        + 'task = "reach"\n[robots.a.record]\ndataset = "data/reach"\nepisodes = 2\nteleop = "expert"\n'
        + 'max_seconds = 2\ncameras = ""\n'
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    up = [sys.executable, "-m", "robotrl.cli", "up", str(fleet), "--out", "run", "--quiet"]
    done = subprocess.run(up, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr + (tmp_path / "run/robots/a/record.log").read_text()
    info = json.loads((tmp_path / "data" / "reach" / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 2 and info["total_frames"] > 0
    assert not [key for key in info["features"] if key.startswith("observation.images")]  # cameras = ""
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    role = status["roles"]["robots.a.record"]
    assert (status["phase"], role["state"], role["restarts"], role["role"]) == ("stopped", "done", 0, "recorder")
    assert (role["report"]["episodes"], role["report"]["episodes_planned"]) == (2, 2)
    beacon = json.loads((tmp_path / "run" / "robots" / "a" / "record.beacon.json").read_text())
    assert (beacon["episodes"], beacon["frames"], beacon["seed"]) == (2, info["total_frames"], 1)

    again = subprocess.run([*up, "--resume"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr  # nothing left to record: done at once
    assert json.loads((tmp_path / "data" / "reach" / "meta" / "info.json").read_text())["total_episodes"] == 2
    assert json.loads((tmp_path / "run" / "status.json").read_text())["roles"]["robots.a.record"]["state"] == "done"
