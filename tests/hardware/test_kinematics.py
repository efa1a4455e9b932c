"""Pinocchio kinematics against MuJoCo (both built from the same URDF), and IK.

The MuJoCo model keeps the URDF's fixed end-effector link as a body (fusestatic off),
so its world position must equal pinocchio's frame placement: the robot base is at the
world origin in both.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.models import ARMS
from robotrl.hardware.sim_arm.robot import HOME_Q_RAD, SimRobot

ARM_NAMES = list(ARMS)  # "so101" (ee frame "gripper_frame_link"), "so100" (ee frame "jaw")


@pytest.fixture(scope="module", params=ARM_NAMES)
def arm_pair(request):
    """(ArmModel, pinocchio Kinematics, MuJoCo model) of one arm."""
    arm = ARMS[request.param]
    return arm, Kinematics(arm), SimRobot(arm=arm, cameras=()).model


def test_model_joints_and_limits_agree(arm_pair):
    arm, kin, model = arm_pair
    for i, name in enumerate(arm.joint_names):
        lo, hi = model.jnt_range[model.joint(name).id]
        assert (lo, hi) == pytest.approx((kin.lower_rad[i], kin.upper_rad[i]), abs=1e-9)
    assert kin.model.existFrame(arm.ee_frame)
    assert mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, arm.ee_frame) >= 0


def test_pinocchio_and_mujoco_agree_on_the_end_effector(arm_pair):
    arm, kin, model = arm_pair
    data = mujoco.MjData(model)
    body = model.body(arm.ee_frame).id
    qadr = np.array([model.joint(name).qposadr[0] for name in arm.joint_names])
    rng = np.random.default_rng(42)
    pos_err, rot_err = [], []
    for _ in range(100):
        q = rng.uniform(kin.lower_rad, kin.upper_rad)
        data.qpos[qadr] = q
        mujoco.mj_kinematics(model, data)
        pos, rot = kin.forward(q)
        pos_err.append(np.linalg.norm(data.xpos[body] - pos))
        rot_err.append(np.abs(data.xmat[body].reshape(3, 3) - rot).max())
    # same URDF, same chain: agreement to rounding (measured ~5e-16 m), far below 1 mm
    assert max(pos_err) < 1e-3
    assert max(pos_err) < 1e-9
    assert max(rot_err) < 1e-9


def test_forward_is_consistent_with_ee_position_and_jacobian(arm_pair):
    _, kin, _ = arm_pair
    rng = np.random.default_rng(1)
    q = rng.uniform(kin.lower_rad + 0.1, kin.upper_rad - 0.1)
    np.testing.assert_array_equal(kin.ee_position(q), kin.forward(q)[0])
    # linear Jacobian columns by central differences, h = 1e-6 rad
    jac = kin.jacobian(q)
    assert jac.shape == (6, 6)
    for j in range(6):
        dq = np.zeros(6)
        dq[j] = 1e-6
        numeric = (kin.ee_position(q + dq) - kin.ee_position(q - dq)) / 2e-6
        np.testing.assert_allclose(jac[:3, j], numeric, atol=1e-6)


def test_ik_solves_reachable_targets_from_a_nearby_start(arm_pair):
    _, kin, _ = arm_pair
    home = np.clip(HOME_Q_RAD, kin.lower_rad, kin.upper_rad)  # so100: [0, 0, 0, 1.2, 0, 0]
    rng = np.random.default_rng(7)
    errors = []
    for _ in range(50):
        # a joint vector near home (0.3 rad std), kept 0.05 rad inside the limits, whose
        # FK is the target: reachable by construction
        q_goal = np.clip(home + rng.normal(0.0, 0.3, 6), kin.lower_rad + 0.05, kin.upper_rad - 0.05)
        target = kin.ee_position(q_goal)
        q_start = np.clip(q_goal + rng.normal(0.0, 0.15, 6), kin.lower_rad, kin.upper_rad)
        result = kin.ik(target, q_start)
        error = float(np.linalg.norm(kin.ee_position(result.q_rad) - target))  # checked by FK
        errors.append(error)
        assert result.position_error_m == pytest.approx(error, abs=1e-12)
        assert result.converged
        assert np.all(result.q_rad >= kin.lower_rad) and np.all(result.q_rad <= kin.upper_rad)
        # the gripper is not driven, only kept limit_margin_rad = 0.03 inside its limits
        assert result.q_rad[5] == np.clip(q_start[5], kin.lower_rad[5] + 0.03, kin.upper_rad[5] - 0.03)
    # the solver stops at tol_m = 1 mm; measured worst case ~0.99 mm
    assert max(errors) < 2e-3


def test_ik_keeps_the_limit_margin(arm_pair):
    _, kin, _ = arm_pair
    # a target far out of reach drives joints onto their limits: the solution stays
    # limit_margin_rad = 0.03 inside them (above SafetyLimits' 0.02)
    home = np.clip(HOME_Q_RAD, kin.lower_rad, kin.upper_rad)
    result = kin.ik(np.array([2.0, 0.0, 0.1]), home)
    assert not result.converged and result.position_error_m > 1.0
    assert np.all(result.q_rad >= kin.lower_rad + 0.03 - 1e-12)
    assert np.all(result.q_rad <= kin.upper_rad - 0.03 + 1e-12)
