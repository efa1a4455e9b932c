"""Fleet files: parsing, validation messages that name the field, device checks, CLI."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from robotrl.cli import main
from robotrl.core.errors import ConfigError
from robotrl.fleet import ROLES, check_devices, load_fleet, parse_fleet

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet.toml"

ARM = '[robots.a]\nmodel = "so101"\ndriver = "sim"\nroles = ["recorder"]\nrecord = { dataset = "d" }\n'
REAL_ARM = (
    '[robots.a]\nmodel = "so101"\ndriver = "lerobot"\nport = "/dev/ttyACM0"\nroles = ["recorder"]\n'
    'record = { dataset = "d", teleop = "gamepad" }\n'
)
GPU = '[gpus.box]\nroles = ["learner"]\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    return path


def test_example_fleet_parses():
    fleet = load_fleet(EXAMPLE)
    left = next(r for r in fleet.robots if r.name == "left_arm")
    assert (left.model, left.driver, left.port, left.calibration_id) == (
        "so101",
        "lerobot",
        "/dev/ttyACM0",
        "left_follower",
    )
    assert left.roles == ("recorder", "deploy_client")
    (front,) = fleet.cameras
    assert (front.index, front.width_px, front.height_px, front.fps) == (0, 640, 480, 30)
    assert front.robot == "left_arm"
    (box,) = fleet.gpus
    assert (box.index, box.host, box.roles) == (0, "localhost", ("inference_server", "learner"))
    roles = fleet.assignments()
    assert set(roles) == set(ROLES)
    assert roles["learner"] == ("gpus.box",)
    assert roles["deploy_client"] == ("robots.left_arm", "robots.twin_arm")


BAD_FLEETS = [
    ('[pilots.x]\nname = "y"\n', "pilots: unknown section"),
    ("robots = 3\n", "robots: expected tables like [robots.NAME]"),
    ("[robots]\na = 1\n", "robots.a: expected a table"),
    (ARM + 'prot = "/dev/ttyACM0"\n', "robots.a.prot: unknown key"),
    ('[robots.a]\ndriver = "sim"\nroles = ["recorder"]\n', "robots.a.model: missing"),
    (ARM.replace("so101", "so999"), "robots.a.model: 'so999' is not a known arm model (so100, so101)"),
    (ARM.replace('"sim"', '"dynamixel"'), "robots.a.driver: 'dynamixel' is not a driver (lerobot, sim, twin)"),
    (ARM.replace('"sim"', '"lerobot"'), "robots.a.port: missing"),
    (ARM + 'port = "/dev/ttyACM0"\n', "robots.a.port: only used with driver 'lerobot'"),
    (REAL_ARM.replace('"/dev/ttyACM0"', "3"), "robots.a.port: expected a device path, got 3"),
    (ARM + "id = 5\n", "robots.a.id: expected a string"),
    (
        ARM.replace('["recorder"]', '["recorder", "pilot"]'),
        "robots.a.roles[1]: 'pilot' is not a role (recorder, deploy_client, actor, inference_server, learner)",
    ),
    (ARM.replace('["recorder"]', '["learner"]'), "robots.a.roles[0]: 'learner' is not a robot role"),
    (ARM.replace('["recorder"]', '["recorder", "recorder"]'), "robots.a.roles[1]: 'recorder' is listed twice"),
    (ARM.replace('["recorder"]', '"recorder"'), "robots.a.roles: expected a non-empty array"),
    (ARM.replace('["recorder"]', "[]"), "robots.a.roles: expected a non-empty array"),
    (ARM.replace('["recorder"]', "[1]"), "robots.a.roles[0]: expected a role name, got 1"),
    (REAL_ARM + REAL_ARM.replace("robots.a", "robots.b"), "robots.b.port: '/dev/ttyACM0' is already used by robots.a"),
    (
        ARM + '[cameras.front]\nindex = 0\nrobot = "ghost"\n',
        "cameras.front.robot: 'ghost' is not a robot in this file (a)",
    ),
    ('[cameras.front]\nindex = 0\npath = "/dev/video0"\n', "cameras.front.path: give index or path, not both"),
    ("[cameras.front]\nwidth = 640\n", "cameras.front: needs index"),
    ("[cameras.front]\nindex = -1\n", "cameras.front.index: must be at least 0"),
    ("[cameras.front]\nindex = 0\nwidth = 0\n", "cameras.front.width: must be at least 1"),
    ("[cameras.front]\nindex = 0\nheight = true\n", "cameras.front.height: expected an integer, got True"),
    ('[cameras.front]\nindex = 0\nfps = "30"\n', "cameras.front.fps: expected an integer, got '30'"),
    ("[cameras.a]\nindex = 0\n[cameras.b]\nindex = 0\n", "cameras.b.index: index 0 is already used by cameras.a"),
    ("[gpus.box]\nindex = 0\n", "gpus.box.roles: expected a non-empty array"),
    (GPU.replace('["learner"]', '["recorder"]'), "gpus.box.roles[0]: 'recorder' is not a GPU role"),
    (GPU + "index = 1.5\n", "gpus.box.index: expected an integer, got 1.5"),
    (GPU + 'host = ""\n', "gpus.box.host: must not be empty"),
    (GPU + GPU.replace("gpus.box", "gpus.two"), "gpus.two.index: GPU 0 of localhost is already used by gpus.box"),
    ("[robots.a\n", "not valid TOML"),
]


@pytest.mark.parametrize("text, message", BAD_FLEETS, ids=[m.split(":")[0] for _, m in BAD_FLEETS])
def test_bad_fleet_names_the_field(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_fleet(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def test_missing_fleet_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read fleet file"):
        load_fleet(tmp_path / "nope.toml")


def test_check_devices_reports_a_missing_serial_port(tmp_path):
    fleet = load_fleet(write(tmp_path, REAL_ARM.replace("/dev/ttyACM0", "/dev/ttyNOPE")))
    (problem,) = check_devices(fleet)
    assert problem.startswith("robots.a.port: serial port /dev/ttyNOPE does not exist")


def test_check_devices_passes_when_everything_is_there(tmp_path):
    port = tmp_path / "ttyFAKE"  # a readable, writable file stands in for the device node
    port.write_text("")
    camera = tmp_path / "video9"
    camera.write_text("")
    text = REAL_ARM.replace("/dev/ttyACM0", str(port)) + f'[cameras.front]\npath = "{camera}"\n'
    assert check_devices(load_fleet(write(tmp_path, text))) == []
    assert check_devices(load_fleet(write(tmp_path, ARM + GPU))) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root may open any file")
def test_check_devices_reports_permissions(tmp_path):
    port = tmp_path / "ttyLOCKED"
    port.write_text("")
    port.chmod(0o400)
    fleet = load_fleet(write(tmp_path, REAL_ARM.replace("/dev/ttyACM0", str(port))))
    (problem,) = check_devices(fleet)
    assert "no read/write permission" in problem and "dialout" in problem


def test_cli_shows_the_fleet_with_roles(capsys):
    assert main(["devices", "--fleet", str(EXAMPLE), "--max-cameras", "0"]) == 0
    out = capsys.readouterr().out
    assert "left_arm" in out and "inference_server" in out and "robots.left_arm, robots.twin_arm" in out


def test_cli_fleet_json(capsys):
    assert main(["devices", "--json", "--fleet", str(EXAMPLE), "--max-cameras", "0"]) == 0
    fleet = json.loads(capsys.readouterr().out)["fleet"]
    assert fleet["roles"]["inference_server"] == ["gpus.box"]
    assert [r["name"] for r in fleet["robots"]] == ["left_arm", "twin_arm"]


def test_cli_bad_fleet_exits_2_naming_the_field(tmp_path, capsys):
    path = write(tmp_path, ARM.replace('["recorder"]', '["recorder", "pilot"]'))
    assert main(["devices", "--fleet", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("robotrl devices: error: ")
    assert "robots.a.roles[1]" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_cli_check_missing_port_exits_2(tmp_path, capsys):
    path = write(tmp_path, REAL_ARM.replace("/dev/ttyACM0", "/dev/ttyNOPE"))
    assert main(["devices", "--fleet", str(path), "--check"]) == 2
    err = capsys.readouterr().err
    assert "/dev/ttyNOPE" in err and "robots.a.port" in err
    assert len(err.strip().splitlines()) == 1


def test_cli_check_needs_a_fleet(capsys):
    assert main(["devices", "--check"]) == 2
    assert "--check needs --fleet" in capsys.readouterr().err


def test_a_fleet_robot_gives_the_arm_options_and_its_cameras_as_lerobot_configs(tmp_path, capsys, tiny_flow):
    from lerobot.cameras.opencv import OpenCVCameraConfig

    from robotrl.hardware.lerobot_arm.cameras import parse_cameras

    fleet = load_fleet(EXAMPLE)
    left = fleet.arm("left_arm")
    assert (left["robot"], left["port"], left["robot_id"]) == ("so101", "/dev/ttyACM0", "left_follower")
    ((name, camera),) = parse_cameras(left["cameras"]).items()
    assert name == "front" and isinstance(camera, OpenCVCameraConfig)
    assert (camera.index_or_path, camera.width, camera.height, camera.fps) == (0, 640, 480, 30)
    with pytest.raises(ConfigError, match=r"robots.twin_arm: a twin's buses exist only while it runs: `robotrl up`"):
        fleet.arm("twin_arm")
    sim = parse_fleet(tomllib.loads('[robots.s]\nmodel = "so101"\ndriver = "sim"\nroles = ["deploy_client"]\n'))
    assert sim.arm("s") == {"robot": "sim", "port": None, "robot_id": None, "cameras": None}
    with pytest.raises(ConfigError, match=r"no robot 'right_arm' \(robots: left_arm, twin_arm\)"):
        fleet.arm("right_arm")
    # The commands take it: record and deploy open the fleet's port (absent on this machine).
    fleet_args = ["--fleet", str(EXAMPLE), "--fleet-robot", "left_arm"]
    checkpoint = tmp_path / "ck"
    tiny_flow().save(checkpoint)
    for command in (
        ["record", "--root", str(tmp_path / "ds"), "--teleop", "keyboard"],
        ["deploy", "--policy", str(checkpoint)],
    ):
        assert main([*command, *fleet_args]) == 2
        err = capsys.readouterr().err
        assert "/dev/ttyACM0" in err and len(err.strip().splitlines()) == 1, err
    assert main(["deploy", "--fleet", str(EXAMPLE), "--policy", str(checkpoint)]) == 2
    assert "--fleet and --fleet-robot go together" in capsys.readouterr().err
