"""LerobotArm and its unit mapping: golden numbers, spec before connect, error paths, the
whole lerobot + Feetech SDK stack against simulated servos on a pseudo-terminal, and
opt-in tests on a real arm (`pytest -m hardware`, port from ROBOTRL_SO101_PORT)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from robotrl.core.errors import ConfigError, DeviceNotConnected
from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.lerobot_arm.robot import LerobotArm
from robotrl.hardware.lerobot_arm.units import (
    LerobotUnits,
    lerobot_keys,
    to_lerobot,
    to_radians,
    units_for,
)
from robotrl.hardware.models import ARMS, velocity_limits
from robotrl.sim.twin.bus import READ, write_calibration
from robotrl.sim.twin.bus import SimServoBus as FakeServoBus

# so101.urdf gripper limits: -10 deg .. 100 deg.
SO101_GRIPPER_LOWER_RAD = -0.174533
SO101_GRIPPER_UPPER_RAD = 1.74533
SO101 = units_for("so101", SO101_GRIPPER_LOWER_RAD, SO101_GRIPPER_UPPER_RAD)
MISSING_PORT = "/dev/robotrl-test-no-such-port"


# -- units ---------------------------------------------------------------------------------
def test_keys_follow_robotrl_joint_order() -> None:
    assert lerobot_keys(ARMS["so101"].joint_names) == (
        "shoulder_pan.pos",
        "shoulder_lift.pos",
        "elbow_flex.pos",
        "wrist_flex.pos",
        "wrist_roll.pos",
        "gripper.pos",
    )


def test_so101_arm_degrees_are_urdf_radians() -> None:
    # so101.urdf is "so101_new_calib": lerobot's 0 deg is the URDF zero, same directions.
    # 90 deg = pi/2, -45 deg = -pi/4, 180 deg = pi; gripper 50 is checked below.
    q = to_radians(np.array([90.0, -45.0, 0.0, 180.0, -180.0, 50.0]), SO101)
    np.testing.assert_allclose(q[:5], [math.pi / 2, -math.pi / 4, 0.0, math.pi, -math.pi], atol=1e-12)
    back = to_lerobot(np.array([math.pi / 2, -math.pi / 4, 0.0, 1.0, -1.0, 0.0]), SO101)
    # 1 rad = 57.29577951 deg
    np.testing.assert_allclose(back[:5], [90.0, -45.0, 0.0, 57.29577951308232, -57.29577951308232])


def test_gripper_0_100_maps_onto_urdf_limits() -> None:
    # lerobot 0 (closed) -> lower limit -0.174533 rad; 100 (open) -> upper limit 1.74533 rad;
    # 50 -> midpoint (-0.174533 + 1.74533) / 2 = 0.7853985 rad (45 deg).
    closed, mid, open_ = (to_radians(np.array([0.0] * 5 + [g]), SO101)[-1] for g in (0.0, 50.0, 100.0))
    assert closed == pytest.approx(-0.174533, abs=1e-12)
    assert mid == pytest.approx(0.7853985, abs=1e-12)
    assert open_ == pytest.approx(1.74533, abs=1e-12)
    # URDF 0 rad (jaws touching) is 10 deg into the 110 deg span: 100 * 10 / 110 = 9.0909...
    assert to_lerobot(np.zeros(6), SO101)[-1] == pytest.approx(100 / 11, abs=1e-4)


def test_so100_frame_is_urdf_midrange_with_flipped_pan() -> None:
    units = units_for("so100", -0.2, 2.0)
    # lerobot 0 deg -> midpoints of so100.urdf limits; pan +10 deg -> -0.17453293 rad.
    q = to_radians(np.array([10.0, 0.0, 0.0, 0.0, 0.0, 0.0]), units)
    np.testing.assert_allclose(q, [-0.17453292519943295, 1.75, -1.57079, -0.65, 0.0, -0.2])
    kin = Kinematics(ARMS["so100"])
    midpoints = (kin.lower_rad[:5] + kin.upper_rad[:5]) / 2
    np.testing.assert_allclose(units.arm_zero_rad, midpoints, atol=1e-5)


@pytest.mark.parametrize("model", ["so101", "so100"])
def test_round_trip_is_vectorised(model: str) -> None:
    kin = Kinematics(ARMS[model])
    units = units_for(model, kin.lower_rad[-1], kin.upper_rad[-1])
    q = np.random.default_rng(0).uniform(kin.lower_rad, kin.upper_rad, size=(7, 3, 6))
    np.testing.assert_allclose(to_radians(to_lerobot(q, units), units), q, atol=1e-12)
    np.testing.assert_allclose(to_lerobot(kin.lower_rad, units)[-1], 0.0, atol=1e-9)
    np.testing.assert_allclose(to_lerobot(kin.upper_rad, units)[-1], 100.0, atol=1e-9)


def test_bad_shapes_and_units_are_refused() -> None:
    with pytest.raises(ValueError, match=r"\(\.\.\., 6\)"):
        to_radians(np.zeros(5), SO101)
    with pytest.raises(ValueError):
        to_lerobot(np.float64(0.0), SO101)
    with pytest.raises(ConfigError, match="arm_sign"):
        LerobotUnits(0.0, 1.0, arm_sign=(1.0, 1.0, 2.0, 1.0, 1.0))
    with pytest.raises(ConfigError, match="differ"):
        LerobotUnits(1.0, 1.0)
    with pytest.raises(ConfigError, match="known: so100, so101"):
        units_for("koch", 0.0, 1.0)


# -- LerobotArm without hardware -------------------------------------------------------------
@pytest.mark.parametrize("model", ["so101", "so100"])
def test_spec_is_readable_before_connect(model: str) -> None:
    arm = LerobotArm(model, port=MISSING_PORT, control_rate_hz=15.0)
    kin = Kinematics(ARMS[model])
    spec = arm.spec
    assert spec.name == model and spec.joint_names == ARMS[model].joint_names
    np.testing.assert_array_equal(spec.lower_rad, kin.lower_rad)
    np.testing.assert_array_equal(spec.upper_rad, kin.upper_rad)
    np.testing.assert_array_equal(spec.max_velocity_rad_s, velocity_limits(ARMS[model]))
    assert spec.control_rate_hz == 15.0 and spec.cameras == () and spec.ee_frame == ARMS[model].ee_frame
    assert arm.units.gripper_closed_rad == kin.lower_rad[-1]
    assert arm.units.gripper_open_rad == kin.upper_rad[-1]
    assert not arm.is_connected


def test_camera_specs_come_from_lerobot_configs() -> None:
    from lerobot.cameras.opencv import OpenCVCameraConfig

    front = OpenCVCameraConfig(index_or_path=0, fps=30, width=640, height=480)
    arm = LerobotArm("so101", port=MISSING_PORT, cameras={"front": front})
    assert [(c.name, c.height_px, c.width_px) for c in arm.spec.cameras] == [("front", 480, 640)]
    with pytest.raises(ConfigError, match="'wrist'.*fps, width and height"):
        LerobotArm("so101", port=MISSING_PORT, cameras={"wrist": OpenCVCameraConfig(index_or_path=1)})


def test_missing_port_raises_before_touching_lerobot() -> None:
    arm = LerobotArm("so101", port=MISSING_PORT, robot_id="test")
    with pytest.raises(DeviceNotConnected, match=f"{MISSING_PORT}.*robotrl devices"):
        arm.connect()
    assert not arm.is_connected
    with pytest.raises(DeviceNotConnected, match="connect"):
        arm.read()
    with pytest.raises(DeviceNotConnected):
        arm.command(np.zeros(6))
    arm.hold()  # never raises, connected or not
    arm.disconnect()


def test_failed_connect_imports_neither_lerobot_nor_torch() -> None:
    code = f"""
import sys
from robotrl.core.errors import DeviceNotConnected
from robotrl.hardware.lerobot_arm.robot import LerobotArm
try:
    LerobotArm("so101", port={MISSING_PORT!r}).connect()
except DeviceNotConnected:
    pass
else:
    raise SystemExit("connect() did not raise")
assert "lerobot" not in sys.modules and "torch" not in sys.modules, "lerobot was imported"
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_port_that_is_no_motor_bus_raises_device_not_connected(tmp_path) -> None:
    pytest.importorskip("scservo_sdk", reason="lerobot[feetech] (feetech-servo-sdk) is not installed")
    arm = LerobotArm("so101", port=os.devnull, robot_id="test", calibration_dir=tmp_path)
    with pytest.raises(DeviceNotConnected, match=f"so101 arm on {os.devnull}"):
        arm.connect()
    assert not arm.is_connected


# -- a simulated motor bus (the twin's `SimServoBus`): real lerobot + Feetech SDK code over a
# pseudo-terminal ------------------------------------------------------------------------------
# Raw encoder ranges (0..4095 per turn): arm joints 1024..3072 (+-1024 ticks around 2048,
# +-1024 * 360 / 4095 = +-90.022 deg), wrist roll the full turn, gripper 2000..3000.
FAKE_RANGES = {1: (1024, 3072), 2: (1024, 3072), 3: (1024, 3072), 4: (1024, 3072), 5: (0, 4095), 6: (2000, 3000)}
FAKE_HALF_RANGE_RAD = math.radians(1024 * 360 / 4095)
PING = 0x01
"""The Feetech protocol's ping instruction."""


@pytest.fixture
def fake_arm(fake_bus: FakeServoBus, tmp_path: Path):
    write_calibration(tmp_path, "fake", FAKE_RANGES)
    arm = LerobotArm("so101", port=fake_bus.port, robot_id="fake", calibration_dir=tmp_path)
    arm.connect()
    yield arm
    arm.disconnect()


def test_read_converts_lerobot_positions_to_radians(fake_arm: LerobotArm) -> None:
    before = time.monotonic()
    state = fake_arm.read()
    assert before <= state.timestamp_s <= time.monotonic() and state.images == {}
    # Servos sit at the middle of their raw ranges: 2048 on the arm joints -> 0 deg; wrist
    # roll 2047 in 0..4095 (mid 2047.5) -> -0.5 * 360 / 4095 deg; gripper 2500 -> 50 -> midpoint.
    expected = [0.0, 0.0, 0.0, 0.0, math.radians(-0.5 * 360 / 4095), 0.7853985]
    np.testing.assert_allclose(state.q_rad, expected, atol=1e-9)


def test_command_returns_targets_inside_the_calibrated_range(fake_arm: LerobotArm, fake_bus: FakeServoBus) -> None:
    target = np.array([0.5, -0.5, 1.0, -1.0, 2.0, 1.0])
    np.testing.assert_allclose(fake_arm.command(target), target, atol=1e-12)
    # lerobot truncates to whole encoder ticks: 1 tick = 2 pi / 4095 = 0.00153 rad.
    np.testing.assert_allclose(fake_arm.read().q_rad, target, atol=2 * math.tau / 4095)
    # 0.5 rad = 28.648 deg = 325.9 ticks above the middle (2048): 2373 after truncation.
    assert fake_bus.present(1) == 2373


def test_command_clips_to_what_the_motors_accept(fake_arm: LerobotArm) -> None:
    spec = fake_arm.spec
    # Arm joints stop at +-90.022 deg (the calibrated range), the gripper at lerobot 0 / 100.
    sent = fake_arm.command(np.array([2.0, -2.0, 0.0, 0.0, 0.0, spec.upper_rad[-1] + 1.0]))
    expected = [FAKE_HALF_RANGE_RAD, -FAKE_HALF_RANGE_RAD, 0.0, 0.0, 0.0, spec.upper_rad[-1]]
    np.testing.assert_allclose(sent, expected, atol=1e-12)
    np.testing.assert_allclose(fake_arm.read().q_rad, expected, atol=2 * math.tau / 4095)
    sent = fake_arm.command(np.array([0.0, 0.0, 0.0, 0.0, 0.0, spec.lower_rad[-1] - 1.0]))
    assert sent[-1] == pytest.approx(spec.lower_rad[-1], abs=1e-12)
    with pytest.raises(ValueError, match=r"\(6,\)"):
        fake_arm.command(np.zeros(5))


def test_hold_commands_the_last_measured_position(
    fake_arm: LerobotArm, fake_bus: FakeServoBus, caplog: pytest.LogCaptureFixture
) -> None:
    measured = fake_arm.read().q_rad
    fake_arm.command(measured + 0.3)
    fake_arm.hold()
    np.testing.assert_allclose(fake_arm.read().q_rad, measured, atol=2 * math.tau / 4095)
    fake_bus.close()  # the bus dies: hold() logs and returns
    fake_arm.hold()
    assert "LerobotArm.hold failed" in caplog.text


def test_calibration_that_does_not_match_the_motors_is_refused(fake_bus: FakeServoBus, tmp_path: Path) -> None:
    arm = LerobotArm("so101", port=fake_bus.port, robot_id="other", calibration_dir=tmp_path)
    with pytest.raises(ConfigError, match="lerobot-calibrate --robot.type=so101_follower"):
        arm.connect()  # no calibration file at all
    write_calibration(tmp_path, "other", {**FAKE_RANGES, 6: (1900, 3000)})
    with pytest.raises(ConfigError, match="other.json"):
        arm.connect()
    assert not arm.is_connected


class LateServoBus(FakeServoBus):
    """`FakeServoBus` whose servo 1 answers nothing until it has had `late` pings and leaves
    its register read number `missed_read` (from 1) unanswered (replies that missed the
    Feetech SDK's timeout; a huge `late` is a servo that is not there: no ping, no write
    answered); `pings` and `reads` count what servo 1 got."""

    def __init__(self, ranges, late: int, missed_read: int = 0) -> None:
        self.late, self.missed_read, self.pings, self.reads = late, missed_read, 0, 0
        super().__init__(ranges)

    def _handle(self, id_: int, instruction: int, params: bytes) -> None:
        if id_ == 1:
            self.pings += instruction == PING
            self.reads += instruction == READ
            if self.pings <= self.late or (instruction == READ and self.reads == self.missed_read):
                return
        super()._handle(id_, instruction, params)


@pytest.mark.parametrize("missed", ["ping", "port handshake read", "calibration read"])
@pytest.mark.parametrize("device", ["arm", "leader"])
def test_a_servo_that_misses_one_reply_of_the_handshake_is_tried_once_more(
    device: str, missed: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """lerobot's handshake pings each servo once, then reads its calibration registers once:
    a reply that comes late once (a loaded host) costs a second connect, not the run; a
    servo that is not there fails after two tries, with lerobot's list of the missing ids
    (the port closed without the torque-off write that servo could not answer)."""
    pytest.importorskip("scservo_sdk", reason="lerobot[feetech] (feetech-servo-sdk) is not installed")
    from robotrl.hardware.teleop.leader import LeaderArmTeleop

    write_calibration(tmp_path, "fake", FAKE_RANGES)
    make = LerobotArm if device == "arm" else LeaderArmTeleop
    missed_read = {"ping": 0, "port handshake read": 2, "calibration read": 4}[missed]  # servo 1's reads, in order
    bus = LateServoBus(FAKE_RANGES, late=int(missed == "ping"), missed_read=missed_read)
    try:
        connected = make("so101", port=bus.port, robot_id="fake", calibration_dir=tmp_path)
        connected.connect()
        assert bus.pings == 2 and "connecting once more" in caplog.text
        warned = {"ping": "motor check failed", "port handshake read": "Could not connect on port"}
        assert warned.get(missed, "Failed to read 'Min_Position_Limit'") in caplog.text
        if isinstance(connected, LerobotArm):
            np.testing.assert_allclose(connected.read().q_rad[:4], 0.0, atol=1e-9)
        connected.disconnect()
    finally:
        bus.close()
    dead = LateServoBus(FAKE_RANGES, late=10**6)
    try:
        with pytest.raises(DeviceNotConnected, match=r"Missing motor IDs: - 1 \(expected model: 777\)"):
            make("so101", port=dead.port, robot_id="fake", calibration_dir=tmp_path).connect()
        assert dead.pings == 2 and "could not close" not in caplog.text
    finally:
        dead.close()


# -- a real arm (opt-in) ---------------------------------------------------------------------
@pytest.fixture
def real_arm():
    port = os.environ.get("ROBOTRL_SO101_PORT")
    if not port:
        pytest.skip("set ROBOTRL_SO101_PORT (and ROBOTRL_SO101_ID) to test a real SO-101")
    arm = LerobotArm("so101", port=port, robot_id=os.environ.get("ROBOTRL_SO101_ID"))
    arm.connect()
    yield arm
    arm.disconnect()


@pytest.mark.hardware
def test_real_arm_reads_finite_radians_inside_the_urdf_limits(real_arm: LerobotArm) -> None:
    first, second = real_arm.read(), real_arm.read()
    assert first.q_rad.shape == (6,) and np.all(np.isfinite(first.q_rad))
    assert second.timestamp_s > first.timestamp_s
    slack_rad = 0.2  # calibrated ranges are not exactly the URDF's
    assert np.all(first.q_rad >= real_arm.spec.lower_rad - slack_rad), first.q_rad
    assert np.all(first.q_rad <= real_arm.spec.upper_rad + slack_rad), first.q_rad


@pytest.mark.hardware
def test_real_arm_command_returns_what_was_sent_and_hold_keeps_still(real_arm: LerobotArm) -> None:
    q = real_arm.read().q_rad
    sent = real_arm.command(q)  # the measured position: no motion
    np.testing.assert_allclose(sent, q, atol=1e-9)
    target = q.copy()
    target[4] += 0.05  # nudge the wrist roll by about 3 degrees
    sent = real_arm.command(target)
    np.testing.assert_allclose(sent, target, atol=1e-9)
    time.sleep(0.5)
    real_arm.hold()
    held = real_arm.read().q_rad
    real_arm.hold()
    np.testing.assert_allclose(real_arm.read().q_rad, held, atol=0.03)
