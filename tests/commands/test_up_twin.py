"""`robotrl up` with a driver-"twin" robot: the fleet fields, the plan (a twin role the arm
comes after, the arm's bus, cameras and calibration read from the twin's info file), and
for real: the twin, a server and a deploy client driving the twin through lerobot's bus
and cameras; the twin killed mid-run comes back with new buses, its arm with it, and the
episodes all end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_up import _status, _stop, _wait, names_the_field

from robotrl.bringup.plan import plan_bringup
from robotrl.core.errors import ConfigError, UserError
from robotrl.fleet import load_fleet
from robotrl.inference.arm import ArmConfig, twin_resources

TWIN = '[robots.t]\nmodel = "so101"\ndriver = "twin"\nroles = ["deploy_client"]\n'

BAD_TWIN = [
    (TWIN + 'port = "/dev/ttyACM0"\n', "robots.t.port: only used with driver 'lerobot'; remove it for a twin robot"),
    (TWIN.replace("so101", "so100"), "robots.t.model: the twin is an SO-101; driver 'twin' needs model 'so101'"),
    (TWIN + 'task = "juggle"\n', "robots.t.task: 'juggle' is not a simulated task"),
    (TWIN + 'scenario = "shifted"\n', "robots.t.scenario: only for driver 'sim'"),
    (TWIN + 'intervene = "scripted"\n', "robots.t.intervene: 'scripted' (the task's expert) is for driver 'sim'"),
    (
        TWIN.replace('"twin"', '"sim"') + 'instruction = "wave"\n',
        "robots.t.instruction: only for driver 'twin'",
    ),
]


@pytest.mark.parametrize("text, message", BAD_TWIN, ids=[m.split(":")[1].strip() for _, m in BAD_TWIN])
def test_bad_twin_field_is_named(text, message):
    names_the_field(text, message)


def test_plan_starts_the_twin_first_and_the_arm_reads_its_buses(tmp_path, tiny_flow):
    tiny_flow(cameras=()).save(tmp_path / "ckpt")
    serve = f'[serve]\npolicy = "{tmp_path / "ckpt"}"\n'
    path = tmp_path / "fleet.toml"
    path.write_text(TWIN + 'task = "reach"\nseed = 7\nmax_seconds = 4\n' + serve)
    bringup = plan_bringup(load_fleet(path), tmp_path / "run")
    assert [r.name for r in bringup.roles] == ["serve", "robots.t.twin", "robots.t"]
    _, twin, arm = bringup.roles
    assert twin.kind == "twin" and arm.after == ("serve", "robots.t.twin")
    info = tmp_path / "run" / "robots" / "t" / "twin.json"
    info.parent.mkdir(parents=True)
    info.write_text("{}")
    argv = twin.launch.command(0)
    assert not info.exists()  # the role is up only once this start wrote it
    options = dict(zip(argv[4::2], argv[5::2]))  # python -m robotrl.cli twin --task reach ...
    assert argv[3] == "twin" and options["--task"] == "reach" and options["--seed"] == "7"
    assert (options["--robot-id"], options["--info"]) == ("t", str(info))
    assert "--reset-every-s" not in options  # the arm asks for each episode's scene
    job = json.loads(Path(arm.launch.command(0)[-1]).read_text())
    assert job["arm"]["robot"] == "so101" and job["arm"]["port"] is None and job["arm"]["twin_info"] == str(info)
    assert (job["arm"]["task"], job["arm"]["robot_id"]) == ("touch the red ball", "t")  # the scene's instruction
    for role in bringup.roles:
        role.probe.close()
    path.write_text(TWIN + 'task = "pick_place"\n' + serve)
    with pytest.raises(ConfigError, match=r"robots.t.instruction: missing; each pick_place scene names a new"):
        plan_bringup(load_fleet(path), tmp_path / "run2")
    path.write_text(TWIN + 'task = "pick_place"\ninstruction = "put the red cube in the bin"\n' + serve)
    arm = plan_bringup(load_fleet(path), tmp_path / "run3").roles[-1]
    assert json.loads(Path(arm.launch.command(0)[-1]).read_text())["arm"]["task"] == "put the red cube in the bin"


def test_an_arm_on_a_twin_needs_its_info_file(tmp_path):
    with pytest.raises(UserError, match="give neither"):
        ArmConfig("so101", "wave", port="/dev/ttyACM0", twin_info="twin.json")
    with pytest.raises(UserError, match=r"no running twin's info file there \(start it with `robotrl twin --info"):
        twin_resources(tmp_path / "twin.json")
    (tmp_path / "twin.json").write_text('{"follower_port": "/dev/pts/9", "cameras": ""}')
    with pytest.raises(UserError, match="no running twin's info file"):
        twin_resources(tmp_path / "twin.json")  # no calibration folder: not a twin's


def test_up_drives_a_twin_through_lerobot_and_brings_a_killed_twin_back(tmp_path, tiny_flow):
    # an untrained policy reading the twin's front camera through lerobot's ZMQ camera
    tiny_flow(cameras=("front",)).save(tmp_path / "ckpt")
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(
        TWIN + 'task = "reach"\nepisodes = 4\nmax_seconds = 1.5\n' + f'[serve]\npolicy = "{tmp_path / "ckpt"}"\n'
    )
    status_file = tmp_path / "status.json"
    log = (tmp_path / "up.log").open("w")
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "robotrl.cli",
            "up",
            str(fleet),
            "--out",
            "run",
            "--status",
            str(status_file),
            "--quiet",
        ],
        cwd=tmp_path,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:

        def driving(s: dict) -> bool:
            roles = s["roles"]
            return roles["robots.t.twin"]["state"] == "up" and roles["robots.t"]["report"].get("episodes", 0) >= 1

        status = _wait(status_file, up, driving, 90, "the twin up and an episode on it")
        twin, arm = status["roles"]["robots.t.twin"], status["roles"]["robots.t"]
        assert twin["report"]["follower_port"].startswith("/dev/pts/") and arm["restarts"] == 0
        assert arm["report"]["arm_state"] == "up" and arm["report"]["cameras"]["front"]["state"] == "up"
        assert arm["report"]["bus_errors"] == 0  # the arm reads the twin's simulated Feetech bus
        os.kill(twin["pid"], signal.SIGKILL)  # the hardware goes away; both come back

        def back(s: dict) -> bool:
            roles = s["roles"]
            new = roles["robots.t.twin"]
            return new["restarts"] == 1 and new["state"] == "up" and roles["robots.t"]["restarts"] >= 1

        status = _wait(status_file, up, back, 60, "the twin and its arm restarted")
        assert status["roles"]["robots.t.twin"]["report"]["follower_port"] != twin["report"]["follower_port"]
        assert up.wait(timeout=90) == 0  # the arm ran its episodes left, then everything stopped
    finally:
        _stop(up, log)
    final = _status(status_file)
    assert final["roles"]["robots.t"]["state"] == "done" and final["roles"]["robots.t.twin"]["state"] == "stopped"
    logs = sorted((tmp_path / "run" / "robots" / "t").glob("episodes.*.csv"))
    ended = sum(len(p.read_text().splitlines()) - 1 for p in logs)
    assert len(logs) >= 2 and ended == 4  # every episode ended once, over the starts
    assert not (tmp_path / "run" / "robots" / "t" / "twin.json").exists()  # the twin removed its file
    roles = final["roles"]
    print(f"twin restarted: {roles['robots.t.twin']['last_exit']}; arm: {roles['robots.t']['last_exit']}")
