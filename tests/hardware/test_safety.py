"""SafeRobot and its pure functions: golden numbers with the arithmetic in comments.

Every robot here is the MuJoCo SO-101 (`SimRobot`, state-only) on its own `SimClock`, so
time only moves when a test advances it. SO-101 numbers used below (from its URDF and
`hardware/models.py`):

    upper_rad          = [1.91986, 1.74533, 1.69, 1.65806, 2.84121, 1.74533]
    max_velocity_rad_s = [3, 3, 3, 3, 3, 5]      control rate 30 Hz
    max step per tick  = v * dt = [3/30 ... , 5/30] = [0.1, 0.1, 0.1, 0.1, 0.1, 0.1667]
    HOME_Q_RAD         = [0, -1.2, 1.1, 1.3, 0, 0]
"""

from __future__ import annotations

import numpy as np
import pytest

from robotrl.core.errors import ConfigError, SafetyTrip
from robotrl.hardware.safety import (
    SafeRobot,
    SafetyLimits,
    box_violation,
    clamp_step,
    clamp_to_limits,
    clamp_to_workspace,
)
from robotrl.hardware.sim_arm.robot import HOME_Q_RAD

DT_S = 1.0 / 30.0
PAN = 0  # shoulder_pan: turning it moves the end effector on a circle at constant height


def actuator_ids(sim) -> np.ndarray:
    """Indices into `sim.data.ctrl` of the arm's joints, in command order."""
    return np.array([sim.model.actuator(name).id for name in sim.spec.joint_names])


@pytest.fixture
def safe(so101_sim):
    """Default limits around the connected SO-101, reference = HOME_Q_RAD at t = 0."""
    robot = SafeRobot(so101_sim, SafetyLimits())
    robot.connect()
    return robot


def tick(robot: SafeRobot, target: np.ndarray) -> np.ndarray:
    """One control tick: command, let 1/30 s of physics pass, read."""
    sent = robot.command(target)
    robot.clock.advance(DT_S)
    robot.read()
    return sent


# -- step clamp ----------------------------------------------------------------------------


def test_max_step_is_velocity_times_period(safe):
    # 3.0 rad/s * (1/30) s = 0.1 rad for the arm joints; 5.0 * (1/30) = 0.1667 for the gripper
    np.testing.assert_allclose(safe._max_step, [0.1, 0.1, 0.1, 0.1, 0.1, 5.0 / 30.0], rtol=0, atol=1e-15)


def test_one_radian_request_moves_exactly_one_step(safe):
    target = HOME_Q_RAD + np.array([1.0, 0, 0, 0, 0, 0])
    sent = safe.command(target)
    # pan: 0 + clip(1.0 - 0, -0.1, 0.1) = 0.1; the other joints are already there
    np.testing.assert_allclose(sent, HOME_Q_RAD + [0.1, 0, 0, 0, 0, 0], rtol=0, atol=1e-15)
    assert safe.stats.step_clamps == 1
    assert safe.stats.limit_clamps == 0 and safe.stats.workspace_clamps == 0
    np.testing.assert_array_equal(safe.robot.data.ctrl[actuator_ids(safe.robot)], sent)


def test_velocity_scale_shrinks_the_step(so101_sim):
    robot = SafeRobot(so101_sim, SafetyLimits(velocity_scale=0.5))
    robot.connect()
    sent = robot.command(HOME_Q_RAD + [1.0, 0, 0, 0, 0, -1.0])
    # pan: 3.0 * 0.5 / 30 = 0.05; gripper: -(5.0 * 0.5 / 30) = -0.08333
    np.testing.assert_allclose(sent, HOME_Q_RAD + [0.05, 0, 0, 0, 0, -2.5 / 30.0], rtol=0, atol=1e-15)


def test_step_reference_is_the_last_target_not_the_measurement(safe):
    # Three ticks toward pan = 1.0: 0.1, 0.2, 0.3 whatever the physics lags behind.
    sent = [tick(safe, HOME_Q_RAD + [1.0, 0, 0, 0, 0, 0])[PAN] for _ in range(3)]
    assert sent == pytest.approx([0.1, 0.2, 0.3], abs=1e-12)
    assert safe.stats.step_clamps == 3


# -- position limits -----------------------------------------------------------------------


def test_request_beyond_upper_limit_walks_to_upper_minus_margin(safe):
    upper = safe.spec.upper_rad[PAN]  # 1.91986
    target = HOME_Q_RAD.copy()
    target[PAN] = upper + 1.0  # 2.91986, clipped to 1.91986 - 0.02 = 1.89986
    sent = [tick(safe, target)[PAN] for _ in range(21)]
    # ticks 1..18 move 0.1 each: 0.1, 0.2, ..., 1.8; tick 19 has 1.89986 - 1.8 = 0.09986
    # left (< 0.1, no step clamp) and lands on the limit; ticks 20, 21 stay there.
    expected = [0.1 * n for n in range(1, 19)] + [1.89986] * 3
    assert sent == pytest.approx(expected, abs=1e-12)
    assert safe.stats.limit_clamps == 21  # every request was beyond the limit
    assert safe.stats.step_clamps == 18
    assert safe.stats.workspace_clamps == 0
    assert max(sent) <= upper - 0.02


def test_margin_zero_reaches_the_urdf_limit(so101_sim):
    robot = SafeRobot(so101_sim, SafetyLimits(limit_margin_rad=0.0))
    robot.connect()
    target = HOME_Q_RAD + [0, 0, 0, 0, 0, 5.0]
    for _ in range(12):
        sent = tick(robot, target)
    # gripper: 11 steps of 5/30 = 1.8333 > 1.74533, so it sits on the URDF limit after 11
    assert sent[5] == pytest.approx(1.74533, abs=1e-12)


# -- workspace box -------------------------------------------------------------------------


def test_workspace_box_stops_the_end_effector_at_the_boundary(safe):
    # Home end effector (pinocchio) is at (0.1585, 0.0000, 0.0509) m; the pan axis is the
    # vertical through x = 0.0388, so turning the pan by +theta moves the end effector on
    # a circle of radius 0.1585 - 0.0388 = 0.1197 m at constant height, to
    # y = -0.1197 sin(theta). A box with y in [-0.05, 0.05] is left at
    # theta = asin(0.05 / 0.1197) = 0.431.
    low, high = np.array([0.10, -0.05, 0.02]), np.array([0.25, 0.05, 0.10])
    tight = SafeRobot(safe.robot, SafetyLimits(workspace_min_m=tuple(low), workspace_max_m=tuple(high)))
    tight.connect()
    goal = HOME_Q_RAD + [0.6, 0, 0, 0, 0, 0]  # FK y = -0.1197 sin(0.6) = -0.0676: outside
    assert box_violation(tight.kinematics.ee_position(goal), low, high) == pytest.approx(0.0176, abs=1e-4)
    sent = [tick(tight, goal) for _ in range(10)]
    ee = [tight.kinematics.ee_position(s) for s in sent]
    # ticks 1..4: pan 0.1, 0.2, 0.3, 0.4 (y -0.012, -0.024, -0.035, -0.047) stay inside;
    # tick 5 would reach 0.5 (y -0.057) and is bisected back to the boundary.
    assert [s[PAN] for s in sent[:4]] == pytest.approx([0.1, 0.2, 0.3, 0.4], abs=1e-12)
    for p in ee:
        assert box_violation(p, low, high) == 0.0
    # 12 bisections of a 0.1 rad step: 0.1 / 2**12 = 2.4e-5 rad, times the 0.1197 m
    # radius is 2.9e-6 m: the end effector ends within 4 um (so within 1 mm) of y = -0.05.
    assert ee[-1][1] - low[1] < 4e-6
    assert ee[-1][1] - low[1] < 1e-3
    assert sent[-1][PAN] == pytest.approx(0.431, abs=1e-3)
    # ticks 5..10 were each clamped to the box (6); every tick was step clamped (10)
    assert tight.stats.workspace_clamps == 6
    assert tight.stats.step_clamps == 10
    np.testing.assert_array_equal(sent[-1], sent[-2])


# -- watchdog ------------------------------------------------------------------------------


def test_watchdog_holds_after_500_ms_without_commands(so101_sim):
    robot = SafeRobot(so101_sim, SafetyLimits(watchdog_ms=500))
    robot.connect()
    clock = so101_sim.clock
    robot.command(HOME_Q_RAD + [0.05, 0, 0, 0, 0, 0])  # at t = 0
    clock.advance(0.25)
    robot.read()
    clock.advance(0.25)
    robot.read()  # t = 0.5 s: (0.5 - 0) * 1000 = 500 ms, not more than 500: no hold
    assert not robot.holding and robot.stats.watchdog_holds == 0
    clock.advance(0.1)
    state = robot.read()  # t = 0.6 s: 600 ms > 500 ms: hold
    assert robot.holding
    assert robot.stats.watchdog_holds == 1
    # The servo target is now the measured position. A position servo (kp 50 Nm/rad)
    # under gravity settles a few mrad below its target (elbow ~7.5 mrad at home), so
    # "holds" allows 0.02 rad.
    held = so101_sim.data.ctrl[actuator_ids(so101_sim)].copy()
    np.testing.assert_allclose(held, state.q_rad, atol=0.02)
    # holding: more silence neither re-triggers nor moves the arm
    clock.advance(1.0)
    later = robot.read()
    assert robot.stats.watchdog_holds == 1
    np.testing.assert_array_equal(so101_sim.data.ctrl[actuator_ids(so101_sim)], held)
    np.testing.assert_allclose(later.q_rad, state.q_rad, atol=0.02)
    # a command clears the hold and restarts the 500 ms
    robot.command(later.q_rad)
    assert not robot.holding
    clock.advance(0.4)
    robot.read()
    assert not robot.holding and robot.stats.watchdog_holds == 1


def test_watchdog_zero_disables_it(so101_sim):
    robot = SafeRobot(so101_sim, SafetyLimits(watchdog_ms=0))
    robot.connect()
    so101_sim.clock.advance(10.0)
    robot.read()
    assert not robot.holding and robot.stats.watchdog_holds == 0


# -- e-stop --------------------------------------------------------------------------------


def test_estop_latches_until_reset(safe):
    sim, act = safe.robot, actuator_ids(safe.robot)
    tick(safe, HOME_Q_RAD + [0.1, 0, 0, 0, 0, 0])
    safe.estop("test")
    assert safe.estopped and safe.holding and safe.stats.estop_trips == 1
    np.testing.assert_array_equal(sim.data.ctrl[act], sim.q_true_rad)  # told to hold here
    held = sim.data.ctrl[act].copy()
    with pytest.raises(SafetyTrip, match="reset_estop"):
        safe.command(HOME_Q_RAD)
    safe.clock.advance(5.0)
    safe.read()
    with pytest.raises(SafetyTrip):
        safe.command(HOME_Q_RAD)
    # still holding, at the first hold target: a latched e-stop never re-targets
    np.testing.assert_array_equal(sim.data.ctrl[act], held)
    safe.estop("pressed again")  # latched already: not a new trip
    assert safe.stats.estop_trips == 1
    safe.reset_estop()
    assert not safe.estopped
    measured = safe.read().q_rad
    sent = safe.command(measured + [1.0, 0, 0, 0, 0, 0])
    # the step reference is the measured position after the reset: one 0.1 rad step
    np.testing.assert_allclose(sent, measured + [0.1, 0, 0, 0, 0, 0], atol=1e-12)
    assert not safe.holding


def test_estopped_arm_stays_put_while_the_loop_keeps_commanding(safe):
    sim = safe.robot
    for _ in range(30):  # settle at home
        tick(safe, HOME_Q_RAD)
    q_estop = sim.q_true_rad
    safe.estop("test")
    for _ in range(60):  # a control loop that keeps running for 2 s, catching the trip
        with pytest.raises(SafetyTrip):
            safe.command(HOME_Q_RAD)
        safe.clock.advance(DT_S)
        safe.read()
    # a held arm stays within its servo droop (< 0.02 rad) of where the e-stop caught it
    assert np.abs(sim.q_true_rad - q_estop).max() < 0.02


# -- absurd commands -----------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    "absurd",
    [
        [1e6] * 6,
        [-1e6] * 6,
        [NAN] * 6,
        [INF] * 6,
        [-INF] * 6,
        [NAN, INF, -INF, 1e6, -1e6, NAN],
    ],
    ids=["1e6", "-1e6", "nan", "inf", "-inf", "mixed"],
)
def test_absurd_command_never_reaches_the_arm(safe, absurd):
    previous = tick(safe, HOME_Q_RAD)
    sent = safe.command(np.array(absurd))
    ctrl = safe.robot.data.ctrl[actuator_ids(safe.robot)]
    np.testing.assert_array_equal(ctrl, sent)  # the arm got exactly `sent`
    assert np.all(np.isfinite(sent))
    assert np.all(np.abs(sent - previous) <= safe._max_step + 1e-12)
    assert np.all(sent >= safe.spec.lower_rad + 0.02) and np.all(sent <= safe.spec.upper_rad - 0.02)
    finite = np.isfinite(absurd)
    # non-finite joints keep the previous target; +-1e6 moves exactly one step that way
    np.testing.assert_array_equal(sent[~finite], previous[~finite])
    # previous = HOME = [0, -1.2, 1.1, 1.3, 0, 0]; one step = [0.1 x5, 5/30]. Only the
    # gripper going down hits the margin first: 0 - 0.1667 < -0.174533 + 0.02 = -0.154533.
    step = np.array([0.1, 0.1, 0.1, 0.1, 0.1, 5.0 / 30.0])
    expected = np.clip(previous + np.sign(absurd) * step, safe.spec.lower_rad + 0.02, safe.spec.upper_rad - 0.02)
    np.testing.assert_allclose(sent[finite], expected[finite], rtol=0, atol=1e-12)
    assert safe.stats.nan_rejections == (0 if finite.all() else 1)


def test_wrong_shape_raises_after_holding(safe):
    with pytest.raises(ValueError, match=r"\(6,\)"):
        safe.command(np.zeros(5))
    assert safe.holding


# -- pure functions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target, margin, expected",
    [
        # limits lower = [-1, -1], upper = [1, 2]
        ([0.0, 0.0], 0.1, [0.0, 0.0]),  # inside: unchanged
        ([5.0, 5.0], 0.1, [0.9, 1.9]),  # 1 - 0.1, 2 - 0.1
        ([-5.0, -5.0], 0.1, [-0.9, -0.9]),  # -1 + 0.1
        ([0.95, -0.95], 0.1, [0.9, -0.9]),  # inside the URDF limits but inside the margin
        ([5.0, -5.0], 0.0, [1.0, -1.0]),  # no margin: the URDF limits
    ],
)
def test_clamp_to_limits_table(target, margin, expected):
    out = clamp_to_limits(np.array(target), np.array([-1.0, -1.0]), np.array([1.0, 2.0]), margin)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    "previous, target, max_step, expected",
    [
        ([0.0, 0.0], [1.0, -1.0], [0.1, 0.5], [0.1, -0.5]),  # both clamped: +0.1, -0.5
        ([0.0, 0.0], [0.05, -0.2], [0.1, 0.5], [0.05, -0.2]),  # both within the step
        ([1.0, 1.0], [1.0, 1.0], [0.1, 0.1], [1.0, 1.0]),  # no move
        ([1.0, -1.0], [-3.0, 3.0], [0.25, 0.25], [0.75, -0.75]),  # 1 - 0.25, -1 + 0.25
        ([0.0, 0.0], [0.3, 0.3], [0.0, 0.3], [0.0, 0.3]),  # zero step: frozen joint
    ],
)
def test_clamp_step_table(previous, target, max_step, expected):
    out = clamp_step(np.array(previous), np.array(target), np.array(max_step))
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-15)


UNIT_LOW, UNIT_HIGH = np.zeros(3), np.ones(3)


@pytest.mark.parametrize(
    "point, expected",
    [
        ([0.5, 0.5, 0.5], 0.0),  # inside
        ([1.0, 0.0, 0.5], 0.0),  # on the boundary counts as inside
        ([1.3, 0.5, 0.5], 0.3),  # one face: 1.3 - 1
        ([-2.0, 0.5, 0.5], 2.0),  # 0 - (-2)
        ([1.3, 1.4, 0.5], 0.5),  # edge: sqrt(0.3^2 + 0.4^2) = 0.5
        ([2.0, 2.0, 2.0], np.sqrt(3)),  # corner: sqrt(1 + 1 + 1)
        ([-1.0, 2.0, 0.5], np.sqrt(2)),  # mixed sides: sqrt(1^2 + 1^2)
    ],
)
def test_box_violation_table(point, expected):
    assert box_violation(np.array(point), UNIT_LOW, UNIT_HIGH) == pytest.approx(expected, abs=1e-15)


def identity(q: np.ndarray) -> np.ndarray:
    """A 3-joint 'arm' whose end effector is its joint vector (a pure function, no robot)."""
    return np.asarray(q, dtype=np.float64)


@pytest.mark.parametrize(
    "previous, target, expected",
    [
        # target inside: unchanged
        ([0.5, 0.5, 0.5], [0.9, 0.1, 0.5], [0.9, 0.1, 0.5]),
        # leaving through x = 1: bisection of the fraction in [0, 1]; the first midpoint 0.5
        # gives x = 0.5 + 0.5 * 1.0 = 1.0 (on the boundary, inside) and every later one is
        # outside, so the fraction stays exactly 0.5 -> (1.0, 0.5, 0.5)
        ([0.5, 0.5, 0.5], [1.5, 0.5, 0.5], [1.0, 0.5, 0.5]),
        # from outside (violation 1.0): a target with violation 0.5 < 1.0 is accepted
        ([2.0, 0.5, 0.5], [1.5, 0.5, 0.5], [1.5, 0.5, 0.5]),
        # from outside: a target further out (1.5 > 1.0) keeps the previous target
        ([2.0, 0.5, 0.5], [2.5, 0.5, 0.5], [2.0, 0.5, 0.5]),
        # from outside into the box: inside, accepted as is
        ([2.0, 0.5, 0.5], [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]),
    ],
)
def test_clamp_to_workspace_table(previous, target, expected):
    out = clamp_to_workspace(np.array(previous), np.array(target), identity, UNIT_LOW, UNIT_HIGH)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-15)


def test_clamp_to_workspace_resolution():
    # Leaving through x = 1 at the irrational fraction f = 1 / 3 of a step of length 1.5
    # (from x = 0.5 to x = 2.0): 12 bisections leave the answer within 1.5 / 2**12 =
    # 3.7e-4 of x = 1, on the inside.
    out = clamp_to_workspace(np.array([0.5, 0.5, 0.5]), np.array([2.0, 0.5, 0.5]), identity, UNIT_LOW, UNIT_HIGH)
    assert 1.0 - 1.5 / 2**12 <= out[0] <= 1.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"limit_margin_rad": -0.01},
        {"velocity_scale": 0.0},
        {"velocity_scale": -0.5},
        {"velocity_scale": 1.5},
        {"workspace_min_m": (0.0, 0.0, 0.0), "workspace_max_m": (1.0, 1.0, 0.0)},  # z: 0 >= 0
        {"workspace_min_m": (0.5, -0.5, 0.0), "workspace_max_m": (0.4, 0.5, 0.5)},  # x: 0.5 >= 0.4
        {"watchdog_ms": -1.0},
    ],
    ids=["margin<0", "scale=0", "scale<0", "scale>1", "flat-box", "inverted-box", "watchdog<0"],
)
def test_safety_limits_reject_bad_values(kwargs):
    with pytest.raises(ConfigError):
        SafetyLimits(**kwargs)


def test_safety_limits_edge_values_are_fine():
    SafetyLimits(limit_margin_rad=0.0, velocity_scale=1.0, watchdog_ms=0.0)
    assert issubclass(ConfigError, ValueError)
