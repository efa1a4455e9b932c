"""Pinocchio kinematics of an arm: forward kinematics of the end-effector frame,
damped-least-squares inverse kinematics, joint limits.

Joint vectors are (J,) radians in `ArmModel.joint_names` order; positions are metres in
the robot base frame; rotations are (3, 3) matrices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from robotrl.core.errors import ConfigError
from robotrl.hardware.models import ArmModel, urdf_path


@dataclass(frozen=True)
class IKResult:
    q_rad: np.ndarray
    """(J,) solution, inside the joint limits."""
    position_error_m: float
    """Remaining distance between the end effector and the target."""
    converged: bool


class Kinematics:
    """Kinematic model of one arm built from its URDF."""

    def __init__(self, arm: ArmModel) -> None:
        self.arm = arm
        self.model = pin.buildModelFromUrdf(str(urdf_path(arm)))
        self.data = self.model.createData()
        names = tuple(self.model.names)[1:]
        if names != arm.joint_names:
            raise ConfigError(f"{arm.name}: URDF joints {names} differ from {arm.joint_names}")
        if not self.model.existFrame(arm.ee_frame):
            raise ConfigError(f"{arm.name}: URDF has no frame {arm.ee_frame!r}")
        self.ee_frame_id = self.model.getFrameId(arm.ee_frame)
        self.lower_rad = np.array(self.model.lowerPositionLimit, dtype=np.float64)
        self.upper_rad = np.array(self.model.upperPositionLimit, dtype=np.float64)

    def forward(self, q_rad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """End-effector (position (3,) m, rotation (3, 3)) for joint vector (J,)."""
        pin.forwardKinematics(self.model, self.data, np.asarray(q_rad, dtype=np.float64))
        placement = pin.updateFramePlacement(self.model, self.data, self.ee_frame_id)
        return placement.translation.copy(), placement.rotation.copy()

    def ee_position(self, q_rad: np.ndarray) -> np.ndarray:
        """(3,) end-effector position in metres."""
        return self.forward(q_rad)[0]

    def jacobian(self, q_rad: np.ndarray) -> np.ndarray:
        """(6, J) end-effector Jacobian in the world-aligned frame (linear rows first)."""
        q = np.asarray(q_rad, dtype=np.float64)
        pin.computeJointJacobians(self.model, self.data, q)
        pin.framesForwardKinematics(self.model, self.data, q)
        return pin.getFrameJacobian(self.model, self.data, self.ee_frame_id, pin.ReferenceFrame.LOCAL_WORLD_ALIGNED)

    def ik(
        self,
        target_m: np.ndarray,
        q0_rad: np.ndarray,
        *,
        approach_axis: np.ndarray | None = None,
        axis_weight: float = 0.3,
        damping: float = 1e-3,
        tol_m: float = 1e-3,
        max_iters: int = 100,
        joints: slice = slice(0, 5),
        max_step_rad: float = 0.1,
        limit_margin_rad: float = 0.03,
    ) -> IKResult:
        """Damped least squares for an end-effector position, optionally pointing the
        frame's z axis along `approach_axis` (unit (3,) vector, e.g. straight down).

        Only `joints` move (default: the five arm joints, not the gripper); each iteration
        moves a joint by at most `max_step_rad` (so the solution stays on the branch of
        `q0_rad`) and is clipped to the joint limits shrunk by `limit_margin_rad` (keep it
        above `SafetyLimits.limit_margin_rad` so the safety layer never has to clamp).
        """
        lower, upper = self.lower_rad + limit_margin_rad, self.upper_rad - limit_margin_rad
        q = np.clip(np.asarray(q0_rad, dtype=np.float64), lower, upper)
        target = np.asarray(target_m, dtype=np.float64)
        err = np.inf
        for _ in range(max_iters):
            pos, rot = self.forward(q)
            residual = [target - pos]
            jac = self.jacobian(q)[:, joints]
            rows = [jac[:3]]
            if approach_axis is not None:
                z = rot[:, 2]
                residual.append(axis_weight * np.cross(z, approach_axis))
                rows.append(axis_weight * jac[3:])
            err = float(np.linalg.norm(residual[0]))
            if err < tol_m and (approach_axis is None or np.linalg.norm(residual[1]) < axis_weight * 1e-2):
                break
            r = np.concatenate(residual)
            j = np.vstack(rows)
            step = j.T @ np.linalg.solve(j @ j.T + damping * np.eye(len(r)), r)
            q[joints] += step * min(1.0, max_step_rad / max(float(np.abs(step).max()), 1e-12))
            q = np.clip(q, lower, upper)
        err = float(np.linalg.norm(target - self.ee_position(q)))
        return IKResult(q, err, err < tol_m * 5)
