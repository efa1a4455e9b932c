"""`calibrate` and `calibrate_lens`: show a chessboard to the cameras, the rehearsal of a
camera calibration recording (`robotrl calibrate-cameras`).

`calibrate_lens` (the optional first episode): a person holds the board up to the fixed
front camera at `LENS_VIEWS` seeded poses while the arm stays still, for that camera's lens.
`calibrate` (the pose episode): the board (`BOARD`: inner corners, square size) lies on
the table at a seeded place where the front camera sees it; the expert holds the gripper
still at `VIEWS` seeded joint configurations from which the gripper camera sees the whole
board above the jaws, at different distances and angles, moving between them in joint
space. Success: every view held. The squares inside the corners at the board's local
origin and at (0, rows - 1) are black, those at the other two white
(`hardware.board_calibration`).
"""

from __future__ import annotations

import mujoco
import numpy as np

from robotrl.core.robot import CameraSpec
from robotrl.hardware.board_calibration import Board
from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.sim_arm.render import camera_rig
from robotrl.hardware.sim_arm.robot import SimRobot
from robotrl.sim.experts import JointMover
from robotrl.sim.tasks.base import Evaluation, place_mocap, sim_data

BOARD = Board(cols=7, rows=4, square_m=0.015)
BOARD_THICKNESS_M = 0.0025
BOARD_LOW = np.array([0.18, -0.06, -0.25])
BOARD_HIGH = np.array([0.24, 0.0, 0.25])
"""Seeded board pose: first inner corner x, y (metres) and yaw (radians)."""
BOARD_OUTLINE_M = (
    np.array([[-1, -1, 0], [BOARD.cols, -1, 0], [-1, BOARD.rows, 0], [BOARD.cols, BOARD.rows, 0]], float)
    * BOARD.square_m
)
"""(4, 3) the board's outer corners (one square beyond the inner ones), board frame."""
VIEWS = 10
HOLD_TICKS = 12
"""Ticks the gripper stays still at each view once it has arrived."""
LENS_VIEWS = 20
LENS_HOLD_TICKS = 15
"""Ticks the board is held still at each pose of `calibrate_lens`."""
LENS_RANGE_M = (0.15, 0.3)
"""Distance of the held board from the camera: near enough to fill much of the image."""
ARRIVED_RAD = 0.01
JOINT_STEP_RAD = 0.04
"""Joint target change per tick between views (1.2 rad/s at 30 Hz)."""
VIEW_LOW_RAD = np.array([-0.7, -1.7, -0.2, 0.6])
VIEW_HIGH_RAD = np.array([0.7, -0.5, 1.4, 1.6])
"""Where views are drawn: shoulder pan, shoulder lift, elbow and wrist flex (the wrist
roll spans its limits, the gripper stays at 0)."""
MIN_VIEW_COS = 0.35
"""Largest angle between the optical axis and the board's normal: acos 0.35 = 70 deg."""
MIN_CLEARANCE_M = 0.03
"""Lowest end effector and camera height on the way, metres."""
MIN_VIEW_SPACING_M = 0.03


class CalibrateTask:
    name = "calibrate"
    instruction = "show the chessboard to the cameras"
    """The instruction of every scene."""
    max_ticks = 900
    env_state_dim = 3
    """The board's first inner corner x, y (m) and yaw (rad), base frame."""

    def __init__(self) -> None:
        self.board_pose = np.zeros(3)
        self.views_rad: list[np.ndarray] = []
        self.views_done = 0
        self._held = 0
        self._mocap = -1
        self._kin: Kinematics | None = None

    def build(self, spec: mujoco.MjSpec) -> None:
        add_board(spec)

    def reset(self, robot: SimRobot, rng: np.random.Generator) -> str:
        self._mocap = robot.model.body("chessboard").mocapid[0]
        self.board_pose = rng.uniform(BOARD_LOW, BOARD_HIGH)
        x, y, yaw = self.board_pose
        sim_data(robot).mocap_quat[self._mocap] = [np.cos(yaw / 2), 0, 0, np.sin(yaw / 2)]
        place_mocap(robot, self._mocap, np.array([x, y, BOARD_THICKNESS_M]))
        self._kin = self._kin or Kinematics(robot.arm)
        self.views_rad = plan_views(
            self._kin,
            scene_camera(robot, "wrist"),
            self.board_outline_m(),
            robot.q_true_rad,
            rng,
        )
        self.views_done = self._held = 0
        return self.instruction

    def board_outline_m(self) -> np.ndarray:
        """(4, 3) the board's outer corners (one square beyond the inner ones), base frame."""
        x, y, yaw = self.board_pose
        rot = np.array([[np.cos(yaw), -np.sin(yaw), 0], [np.sin(yaw), np.cos(yaw), 0], [0, 0, 1]])
        return BOARD_OUTLINE_M @ rot.T + [x, y, BOARD_THICKNESS_M]

    def on_tick(self, robot: SimRobot, tick: int) -> None:
        pass

    def evaluate(self, robot: SimRobot) -> Evaluation:
        """A view counts once the arm has been within `ARRIVED_RAD` of it `HOLD_TICKS`."""
        if self.views_done < len(self.views_rad):
            arrived = np.abs(robot.q_true_rad[:-1] - self.views_rad[self.views_done][:-1]).max() < ARRIVED_RAD
            self._held = self._held + 1 if arrived else 0
            if self._held >= HOLD_TICKS:
                self.views_done, self._held = self.views_done + 1, 0
        done = self.views_done / max(len(self.views_rad), 1)
        return Evaluation(reward=done, success=done >= 1.0, info={"views_held": self.views_done})

    def env_state(self, robot: SimRobot) -> np.ndarray:
        return self.board_pose.astype(np.float32)

    def make_expert(self, robot: SimRobot, noise_m: float = 0.0) -> CalibrateExpert:
        return CalibrateExpert(self, Kinematics(robot.arm))


def scene_camera(robot: SimRobot, name: str) -> tuple[np.ndarray, np.ndarray, float]:
    """Camera `name` of the scene: (3,) optical centre and (3, 3) axes as columns in its
    mount's frame (`camera_rig`), and tan of half its vertical field of view."""
    cam = camera_rig(robot.model, robot.arm.ee_frame, (CameraSpec(name, 2, 2),), 1.0).cameras[name]
    return cam.position_m, cam.rotation, 1.0 / cam.fy  # 2 px high: fy = 1 / tan(fovy / 2)


def add_board(spec: mujoco.MjSpec) -> None:
    """`BOARD` on mocap body "chessboard" whose frame is the board-local one (first
    inner corner, z out of the printed face), lying on the table."""
    body = spec.worldbody.add_body(name="chessboard", mocap=True, pos=[0.2, -0.03, BOARD_THICKNESS_M])
    s, cols, rows = BOARD.square_m, BOARD.cols, BOARD.rows
    white_half = [(cols + 2) * s / 2, (rows + 2) * s / 2, (BOARD_THICKNESS_M - 0.0005) / 2]
    body.add_geom(
        type=mujoco.mjtGeom.mjGEOM_BOX,
        pos=[(cols - 1) * s / 2, (rows - 1) * s / 2, -0.0005 - white_half[2]],
        size=white_half,
        rgba=[1, 1, 1, 1],
        contype=0,
        conaffinity=0,
    )
    for i in range(cols + 1):
        for j in range(rows + 1):
            if (i + j) % 2 == 0:  # square (0, 0) outside the first corner, (1, 1) inside it: black
                body.add_geom(
                    type=mujoco.mjtGeom.mjGEOM_BOX,
                    pos=[(i - 0.5) * s, (j - 0.5) * s, -0.00025],
                    size=[s / 2, s / 2, 0.00025],
                    rgba=[0, 0, 0, 1],
                    contype=0,
                    conaffinity=0,
                )


def plan_views(
    kin: Kinematics,
    wrist: tuple[np.ndarray, np.ndarray, float],
    outline_m: np.ndarray,
    q_start_rad: np.ndarray,
    rng: np.random.Generator,
    count: int = VIEWS,
    tries: int = 40000,
) -> list[np.ndarray]:
    """Up to `count` (J,) joint configurations, each reachable from the one before (from
    `q_start_rad` first) on a straight joint path that keeps `MIN_CLEARANCE_M` above the
    table, from which the gripper camera (`wrist`: position and (3, 3) axes in the
    end-effector frame, tan of half its field of view) sees the board's `outline_m`
    (4, 3) in the upper half of its image (the jaws fill the lower), facing it within
    `MIN_VIEW_COS`, from camera positions `MIN_VIEW_SPACING_M` apart."""
    cam_pos, cam_rot, tan_half = wrist
    normal = np.cross(outline_m[1] - outline_m[0], outline_m[2] - outline_m[0])
    normal /= np.linalg.norm(normal)
    views: list[np.ndarray] = []
    seen: list[np.ndarray] = []
    q_prev = np.asarray(q_start_rad, float)
    for _ in range(tries):
        if len(views) == count:
            break
        q = np.zeros_like(q_prev)
        q[:4] = rng.uniform(VIEW_LOW_RAD, VIEW_HIGH_RAD)
        q[4] = rng.uniform(kin.lower_rad[4] + 0.05, kin.upper_rad[4] - 0.05)
        pos, rot = kin.forward(q)
        eye, axes = pos + rot @ cam_pos, rot @ cam_rot
        local = (outline_m - eye) @ axes  # (4, 3) in the camera frame
        if eye[2] < MIN_CLEARANCE_M or (local[:, 2] < 0.05).any():
            continue
        xy = local[:, :2] / local[:, 2:]
        in_view = (np.abs(xy[:, 0]) < 0.92 * tan_half).all() and (xy[:, 1] > -0.92 * tan_half).all()
        if not in_view or (xy[:, 1] > -0.04 * tan_half).any() or -axes[:, 2] @ normal < MIN_VIEW_COS:
            continue
        if any(np.linalg.norm(eye - other) < MIN_VIEW_SPACING_M for other in seen):
            continue
        path = q_prev + np.linspace(0, 1, 8)[:, None] * (q - q_prev)
        if min(kin.ee_position(p)[2] for p in path) < MIN_CLEARANCE_M:
            continue
        views.append(q)
        seen.append(eye)
        q_prev = q
    return views


class CalibrateExpert:
    """Goes to the task's next view at `JOINT_STEP_RAD` a tick (the task counts a view
    held once the arm has stayed there), then stays at the last."""

    def __init__(self, task: CalibrateTask | CalibrateLensTask, kinematics: Kinematics) -> None:
        self.task = task
        self.mover = JointMover(kinematics, JOINT_STEP_RAD)

    def reset(self, rng: np.random.Generator) -> None:
        self.mover.forget()

    def act(self, q_rad: np.ndarray) -> np.ndarray:
        views = self.task.views_rad
        goal = views[min(self.task.views_done, len(views) - 1)] if views else q_rad
        return self.mover.step(q_rad, goal)


class CalibrateLensTask:
    """`calibrate_lens`: a person holds the board up to the fixed front camera at
    `LENS_VIEWS` seeded poses, `LENS_HOLD_TICKS` each, while the arm stays where it is: the lens
    episode recorded before `calibrate`'s pose episode."""

    name = "calibrate_lens"
    instruction = "hold the chessboard up to the fixed cameras"
    """The instruction of every scene."""
    max_ticks = LENS_VIEWS * LENS_HOLD_TICKS
    env_state_dim = 3
    """The board's first inner corner (m), base frame."""

    def __init__(self) -> None:
        self.poses: list[tuple[np.ndarray, np.ndarray]] = []
        self.views_rad: list[np.ndarray] = []
        self.views_done = 0
        self.tick = 0
        self._mocap = -1

    def build(self, spec: mujoco.MjSpec) -> None:
        add_board(spec)

    def reset(self, robot: SimRobot, rng: np.random.Generator) -> str:
        self._mocap = robot.model.body("chessboard").mocapid[0]
        self.poses = plan_board_poses(scene_camera(robot, "front"), rng)
        self.views_rad = [robot.q_true_rad.copy()]  # the expert holds the arm there
        self.tick = 0
        self._place(robot)
        return self.instruction

    def on_tick(self, robot: SimRobot, tick: int) -> None:
        self.tick = tick
        self._place(robot)

    def evaluate(self, robot: SimRobot) -> Evaluation:
        shown = min(self.tick // LENS_HOLD_TICKS, len(self.poses))
        return Evaluation(reward=shown / LENS_VIEWS, success=shown >= LENS_VIEWS, info={"views_held": shown})

    def env_state(self, robot: SimRobot) -> np.ndarray:
        return self._pose()[0].astype(np.float32)

    def make_expert(self, robot: SimRobot, noise_m: float = 0.0) -> CalibrateExpert:
        return CalibrateExpert(self, Kinematics(robot.arm))

    def _pose(self) -> tuple[np.ndarray, np.ndarray]:
        """The board's (origin, axes) held now."""
        return self.poses[min(self.tick // LENS_HOLD_TICKS, len(self.poses) - 1)]

    def _place(self, robot: SimRobot) -> None:
        position, rotation = self._pose()
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, rotation.ravel())
        sim_data(robot).mocap_quat[self._mocap] = quat
        place_mocap(robot, self._mocap, position)


def plan_board_poses(
    camera: tuple[np.ndarray, np.ndarray, float], rng: np.random.Generator, count: int = LENS_VIEWS, tries: int = 20000
) -> list[tuple[np.ndarray, np.ndarray]]:
    """`count` board poses ((3,) first inner corner m, (3, 3) board axes as columns) held
    up to a fixed camera (`camera`: optical centre and (3, 3) axes in the base frame, tan
    of half its field of view): `LENS_RANGE_M` away, across the image, turned up to 45 deg
    from facing it, rolled any way, whole in the image and above the table."""
    eye, axes, tan_half = camera
    middle = np.array([BOARD.cols - 1, BOARD.rows - 1, 0.0]) * BOARD.square_m / 2
    poses: list[tuple[np.ndarray, np.ndarray]] = []
    for _ in range(tries):
        if len(poses) == count:
            break
        offset = rng.uniform(-0.6, 0.6, 2) * tan_half
        centre = eye + axes @ (rng.uniform(*LENS_RANGE_M) * np.array([*offset, 1.0]))
        facing = (eye - centre) / np.linalg.norm(eye - centre)
        tilt_axis = np.cross(facing, rng.normal(size=3))
        normal = _rotate(facing, tilt_axis / np.linalg.norm(tilt_axis), rng.uniform(0, np.radians(45)))
        x = _rotate(np.cross(normal, axes[:, 1]), normal, rng.uniform(-np.pi, np.pi))
        x /= np.linalg.norm(x)
        rotation = np.stack([x, np.cross(normal, x), normal], axis=1)
        origin = centre - rotation @ middle
        corners = BOARD_OUTLINE_M @ rotation.T + origin
        local = (corners - eye) @ axes
        in_view = (local[:, 2] > 0.05).all() and (np.abs(local[:, :2] / local[:, 2:]) < 0.9 * tan_half).all()
        if in_view and corners[:, 2].min() > 0.01:
            poses.append((origin, rotation))
    return poses


def _rotate(v: np.ndarray, axis: np.ndarray, angle_rad: float) -> np.ndarray:
    """(3,) `v` turned by `angle_rad` about unit (3,) `axis` (Rodrigues)."""
    return v * np.cos(angle_rad) + np.cross(axis, v) * np.sin(angle_rad) + axis * (axis @ v) * (1 - np.cos(angle_rad))
