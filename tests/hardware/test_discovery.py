"""Device discovery on this machine (real /dev, /proc and nvidia-smi; nothing mocked)."""

from __future__ import annotations

import glob
import json
import os
import time

import pytest

from robotrl.cli import main
from robotrl.hardware.discovery import (
    CameraInfo,
    GpuInfo,
    discover,
    find_cameras,
    find_cpus,
    find_gpus,
    find_serial_ports,
    find_sim_robots,
    is_likely_motor_bus,
    parse_nvidia_smi,
)
from robotrl.hardware.models import ARMS


def test_sim_robots_are_the_known_arm_models():
    robots = find_sim_robots()
    assert [r.name for r in robots] == sorted(ARMS)
    for robot in robots:
        assert robot.driver == "sim"
        assert robot.num_joints == len(ARMS[robot.name].joint_names)


def test_at_least_one_cpu_with_cores_and_memory():
    cpus = find_cpus()
    assert len(cpus) >= 1
    cpu = cpus[0]
    assert cpu.model
    assert cpu.logical_cores >= 1
    assert 1 <= cpu.usable_cores <= cpu.logical_cores
    assert cpu.memory_mib is None or cpu.memory_mib > 0


def test_camera_probing_is_bounded():
    assert find_cameras(max_cameras=0) == []
    start = time.monotonic()
    cameras = find_cameras(max_cameras=2, budget_s=1.0)
    elapsed_s = time.monotonic() - start
    # 2 cameras x 1 s budget, plus the OpenCV import.
    assert elapsed_s < 2 * 1.0 + 2.0
    for camera in cameras:
        assert isinstance(camera, CameraInfo)
        assert camera.width_px > 0 and camera.height_px > 0 and camera.fps >= 0


@pytest.mark.skipif(bool(glob.glob("/dev/video*")), reason="this machine has video devices")
def test_no_cameras_returns_empty_at_once():
    start = time.monotonic()
    assert find_cameras() == []
    assert time.monotonic() - start < 0.5


def test_serial_ports_exist_and_are_classified():
    for port in find_serial_ports():
        assert os.path.exists(port.device)
        assert port.likely_motor_bus == is_likely_motor_bus(port.device, port.vid_pid)


@pytest.mark.parametrize(
    "device, vid_pid, expected",
    [
        ("/dev/ttyUSB0", "1a86:7523", True),  # CH340 (Feetech boards)
        ("/dev/ttyACM0", "1a86:55d3", True),  # CH343 (SO-101 bus servo adapter)
        ("/dev/ttyUSB0", "0403:6014", True),  # FTDI (Robotis U2D2)
        ("/dev/ttyUSB1", "10c4:ea60", True),  # CP210x
        ("/dev/ttyACM1", None, True),  # CDC-ACM, vendor unknown
        ("/dev/ttyUSB2", "067b:2303", False),  # Prolific: a GPS or console cable
        ("/dev/ttyS0", None, False),
    ],
)
def test_likely_motor_bus(device, vid_pid, expected):
    assert is_likely_motor_bus(device, vid_pid) is expected


def test_parse_nvidia_smi():
    text = "0, NVIDIA H200, 143771\n1, NVIDIA GeForce RTX 4090, [N/A]\n\nNo devices were found\n"
    assert parse_nvidia_smi(text) == [GpuInfo(0, "NVIDIA H200", 143771), GpuInfo(1, "NVIDIA GeForce RTX 4090", None)]


def test_find_gpus_is_fast_and_well_formed():
    start = time.monotonic()
    gpus = find_gpus(timeout_s=5.0)
    assert time.monotonic() - start < 6.0
    assert [g.index for g in gpus] == sorted({g.index for g in gpus})
    assert all(g.name for g in gpus)


def test_discover_is_json_able():
    data = discover(max_cameras=0).to_dict()
    assert set(data) == {"robots", "serial_ports", "cameras", "gpus", "cpus"}
    assert json.loads(json.dumps(data)) == data


def test_cli_devices_json(capsys):
    assert main(["devices", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"robots", "cameras", "gpus", "cpus", "serial_ports"} <= set(data)
    assert {r["name"] for r in data["robots"]} == set(ARMS)
    assert data["cpus"][0]["logical_cores"] > 0


def test_cli_devices_table(capsys):
    assert main(["devices", "--max-cameras", "0"]) == 0
    out = capsys.readouterr().out
    for title in ("serial ports", "cameras", "sim robots", "GPUs", "CPUs", "so101"):
        assert title in out
