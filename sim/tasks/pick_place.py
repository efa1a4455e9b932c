"""`pick_place`: coloured cubes on the table; the instruction names the one that goes
into the bin, so language matters. Real contact physics: the jaws grip by friction.
"""

from __future__ import annotations

import mujoco
import numpy as np

from robotrl.hardware.kinematics import Kinematics
from robotrl.hardware.sim_arm.robot import SimRobot
from robotrl.sim.experts import CartesianMover
from robotrl.sim.tasks.base import Evaluation, sim_data

COLORS = {"red": (0.85, 0.12, 0.1, 1), "green": (0.1, 0.7, 0.2, 1), "blue": (0.12, 0.3, 0.9, 1)}
CUBE_HALF_M = 0.015
CUBE_MASS_KG = 0.03
CUBE_LOW_M = np.array([0.15, -0.12])
CUBE_HIGH_M = np.array([0.28, 0.12])
CUBE_SPACING_M = 0.065
BIN_INNER_HALF_M = 0.045
BIN_WALL_M = 0.005
BIN_HEIGHT_M = 0.03
BIN_X_RANGE_M = (0.13, 0.23)
BIN_Y_ABS_M = 0.21
GRIPPER_OPEN_RAD = 0.9
GRIPPER_CLOSED_RAD = -0.15
GRASP_OFFSET_M = 0.012
"""The fixed finger sits off the end-effector axis: centre the cube between the fingers
by moving the end effector this far along its x (jaw closing) axis."""
GRIPPING_RAD = -0.04
"""Measured gripper angle below which the jaws hold the cube (a 3 cm cube stops them near
-0.07 rad): the grasp is done and the lift starts."""
RELEASED_RAD = 0.5
"""Measured gripper angle above which the cube is let go."""
CARRY_HEIGHT_M = 0.075
"""End-effector height of the lift and the carry: the cube's bottom clears the bin wall and
the other cubes. Higher waypoints were out of reach (pointing down, the SO-101 reaches
about 8 cm at 16-24 cm out) and the expert stalled short of them."""
GRASPING_PHASES = ("above_cube", "descend", "close")
"""Expert phases with the fingers pointing straight down (the grasp needs it)."""
HOLDING_PHASES = ("lift", "carry", "lower")
LOST_M = 0.05
"""In a holding phase, a cube farther than this from the end effector (about 1.5 cm while
held) was missed or has slipped out: the expert opens and grasps it again where it lies,
as a person would. In the shifted scenario (friction x0.6) that happens."""
REACHED_M = 0.006
SETTLED_M = 0.02
"""A waypoint the arm stopped short of, but within this distance, counts as reached."""
SETTLE_TICKS = 4
"""Ticks without progress (distance to the waypoint down by PROGRESS_M, jaws nearer their
target by PROGRESS_RAD) after which the arm (or the jaws) has settled. A soft or loaded
servo settles short of its target: in the shifted scenario (kp x0.7, mass x1.3) the arm
sags about 1 cm under the carry waypoint and the jaws stop on the cube near +0.06 rad
instead of -0.07."""
PROGRESS_M = 0.001
PROGRESS_RAD = 0.01
STALL_TICKS = 30
"""Move on to the next phase this long after the reference arrived, reached or not."""


class PickPlaceTask:
    name = "pick_place"
    instruction = None
    """None: each scene names its own cube (`reset` returns it)."""
    max_ticks = 300
    env_state_dim = 3 * len(COLORS) + 3

    def __init__(self) -> None:
        self.target_color = "red"
        self.bin_m = np.zeros(3)
        self._kin: Kinematics | None = None

    def build(self, spec: mujoco.MjSpec) -> None:
        for color, rgba in COLORS.items():
            cube = spec.worldbody.add_body(name=f"cube_{color}", pos=[0.2, 0, CUBE_HALF_M])
            cube.add_freejoint(name=f"cube_{color}")
            cube.add_geom(
                type=mujoco.mjtGeom.mjGEOM_BOX,
                size=[CUBE_HALF_M] * 3,
                rgba=rgba,
                mass=CUBE_MASS_KG,
                friction=[1.2, 0.01, 0.001],
            )
        tray = spec.worldbody.add_body(name="bin", mocap=True, pos=[0.18, BIN_Y_ABS_M, 0])
        outer = BIN_INNER_HALF_M + BIN_WALL_M
        for sx, sy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            half = [BIN_WALL_M, outer, BIN_HEIGHT_M / 2] if sx else [outer, BIN_WALL_M, BIN_HEIGHT_M / 2]
            pos = [sx * (BIN_INNER_HALF_M + BIN_WALL_M / 2), sy * (BIN_INNER_HALF_M + BIN_WALL_M / 2), BIN_HEIGHT_M / 2]
            tray.add_geom(type=mujoco.mjtGeom.mjGEOM_BOX, pos=pos, size=half, rgba=[0.35, 0.3, 0.25, 1])

    def reset(self, robot: SimRobot, rng: np.random.Generator) -> str:
        self._kin = self._kin or Kinematics(robot.arm)
        side = rng.choice([-1.0, 1.0])
        self.bin_m = np.array([rng.uniform(*BIN_X_RANGE_M), side * BIN_Y_ABS_M, 0.0])
        data = sim_data(robot)
        data.mocap_pos[robot.model.body("bin").mocapid[0]] = self.bin_m
        placed: list[np.ndarray] = []
        for color in COLORS:
            while True:
                xy = rng.uniform(CUBE_LOW_M, CUBE_HIGH_M)
                if all(np.linalg.norm(xy - p) >= CUBE_SPACING_M for p in placed):
                    break
            placed.append(xy)
            yaw = rng.uniform(-np.pi / 4, np.pi / 4)
            adr = robot.model.joint(f"cube_{color}").qposadr[0]
            data.qpos[adr : adr + 7] = [*xy, CUBE_HALF_M, np.cos(yaw / 2), 0, 0, np.sin(yaw / 2)]
        mujoco.mj_forward(robot.model, data)
        self.target_color = str(rng.choice(list(COLORS)))
        return f"put the {self.target_color} cube in the bin"

    def on_tick(self, robot: SimRobot, tick: int) -> None:
        pass

    def cube_pose(self, robot: SimRobot, color: str) -> tuple[np.ndarray, float]:
        """Cube centre (3,) in metres and its yaw in radians."""
        adr = robot.model.joint(f"cube_{color}").qposadr[0]
        qpos = sim_data(robot).qpos
        pos = qpos[adr : adr + 3].copy()
        w, x, y, z = qpos[adr + 3 : adr + 7]
        return pos, float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))

    def evaluate(self, robot: SimRobot) -> Evaluation:
        assert self._kin is not None
        cube, _ = self.cube_pose(robot, self.target_color)
        inside = bool(np.all(np.abs(cube[:2] - self.bin_m[:2]) < BIN_INNER_HALF_M) and cube[2] < 0.04)
        released = bool(np.linalg.norm(self._kin.ee_position(robot.q_true_rad) - cube) > 0.04)
        success = inside and released
        ee = self._kin.ee_position(robot.q_true_rad)
        shaping = -np.linalg.norm(ee - cube) - np.linalg.norm(cube[:2] - self.bin_m[:2])
        return Evaluation(
            reward=float(shaping) + (1.0 if success else 0.0), success=success, info={"cube_in_bin": inside}
        )

    def env_state(self, robot: SimRobot) -> np.ndarray:
        cubes = [self.cube_pose(robot, c)[0] for c in COLORS]
        return np.concatenate([*cubes, self.bin_m]).astype(np.float32)

    def make_expert(self, robot: SimRobot, noise_m: float = 0.0) -> PickPlaceExpert:
        return PickPlaceExpert(self, robot, Kinematics(robot.arm), noise_m)


class PickPlaceExpert:
    """Scripted pick and place: above the cube, down, close, lift, over the bin, open.

    Phases end on what the robot's state shows (the gripper reached its waypoint or
    settled near it, the jaws closed on the cube or stopped closing, the jaws opened), not
    on hidden timers, so a policy that sees only the state can tell when the demonstrator
    moved on."""

    def __init__(self, task: PickPlaceTask, robot: SimRobot, kinematics: Kinematics, noise_m: float) -> None:
        self.task = task
        self.robot = robot
        self.kin = kinematics
        self.mover = CartesianMover(kinematics, speed_m_s=0.25, dt_s=robot.spec.dt_s, noise_m=noise_m)

    def reset(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._next_phase("start")

    def _next_phase(self, phase: str) -> None:
        self.phase, self._wait = phase, 0
        self._arm = Settling(PROGRESS_M)
        self._jaws = Settling(PROGRESS_RAD)

    def act(self, q_rad: np.ndarray) -> np.ndarray:
        if self.phase == "start":
            self.mover.reset(self._rng, q_rad)
        if self.phase == "start" or (self.phase in HOLDING_PHASES and self._cube_lost()):
            self._cube, self._yaw = self.task.cube_pose(self.robot, self.task.target_color)
            self._next_phase("above_cube")
        jaw_axis = self.kin.forward(q_rad)[1][:, 0] * [1.0, 1.0, 0.0]
        offset = GRASP_OFFSET_M * jaw_axis / max(float(np.linalg.norm(jaw_axis)), 1e-6)
        above = self._cube + offset + [0, 0, 0.04]
        grasp = np.array([*(self._cube + offset)[:2], 0.008])
        over_bin = self.task.bin_m + [0, 0, CARRY_HEIGHT_M]
        lifted = np.array([*above[:2], CARRY_HEIGHT_M])
        g = q_rad[-1]
        plan = {  # phase: (waypoint, gripper, next phase, has the gripper done its part)
            "above_cube": (above, GRIPPER_OPEN_RAD, "descend", True),
            "descend": (grasp, GRIPPER_OPEN_RAD, "close", True),
            "close": (grasp, GRIPPER_CLOSED_RAD, "lift", g < GRIPPING_RAD or self._jaws.settled),
            "lift": (lifted, GRIPPER_CLOSED_RAD, "carry", True),
            "carry": (over_bin, GRIPPER_CLOSED_RAD, "lower", True),
            "lower": (over_bin - [0, 0, 0.025], GRIPPER_CLOSED_RAD, "release", True),
            "release": (over_bin - [0, 0, 0.025], GRIPPER_OPEN_RAD, "retreat", g > RELEASED_RAD),
            "retreat": (over_bin + [0, 0, 0.01], GRIPPER_OPEN_RAD, "retreat", True),
        }
        waypoint, gripper, next_phase, gripper_done = plan[self.phase]
        # Over the bin (up to 31 cm out) the fingers cannot point straight down at this
        # height: from the carry on only the position is controlled, so the waypoints are
        # reached (the jaws tilt a little) instead of stalling a few cm short.
        target = self.mover.step(waypoint, gripper, yaw_rad=self._yaw, point_down=self.phase in GRASPING_PHASES)
        dist = float(np.linalg.norm(self.kin.ee_position(q_rad) - waypoint))
        if np.linalg.norm(self.mover.reference_m - waypoint) < 1e-4:
            self._wait += 1  # ticks since the reference arrived
            self._arm.update(dist)
        if abs(target[-1] - gripper) < 1e-9:  # the jaws are commanded where this phase wants them
            self._jaws.update(abs(g - gripper))
        reached = dist < REACHED_M or (dist < SETTLED_M and self._arm.settled)
        if (reached and gripper_done and self._wait > 0) or self._wait > STALL_TICKS:
            self._next_phase(next_phase)
        return target

    def _cube_lost(self) -> bool:
        """Is the cube out of the jaws now? Read from the arm and cube as they are (not from
        the state `act` was given: rolled out ahead in a chunk, the plan's lift would
        leave the not yet lifted cube behind)."""
        cube, _ = self.task.cube_pose(self.robot, self.task.target_color)
        return float(np.linalg.norm(self.kin.ee_position(self.robot.q_true_rad) - cube)) > LOST_M


class Settling:
    """Tracks a value that should fall (a distance, a closing angle): `settled` once it has
    not fallen by `progress` for SETTLE_TICKS updates in a row."""

    def __init__(self, progress: float) -> None:
        self.progress = progress
        self.best = np.inf
        self.stuck = 0

    def update(self, value: float) -> None:
        if value < self.best - self.progress:
            self.best, self.stuck = value, 0
        else:
            self.stuck += 1

    @property
    def settled(self) -> bool:
        return self.stuck >= SETTLE_TICKS
