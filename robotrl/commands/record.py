"""`robotrl record`: teleoperate an arm (simulated or real) into a LeRobotDataset."""

from __future__ import annotations

import argparse
import signal
import threading
from functools import partial
from pathlib import Path

from robotrl.commands.flags import SCENARIO_HELP, add_field, add_fleet_arguments, apply_fleet
from robotrl.core.errors import UserError
from robotrl.record.run import RecordConfig
from robotrl.record.teleop import TELEOPS, StopOnSignal, TeleopConfig, make_teleop


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--robot", default="sim", help="sim (MuJoCo SO-101), so101 or so100 (real arm through lerobot)")
    parser.add_argument(
        "--task",
        default="pick_place",
        help="sim: task name (reach, pick_place, track, calibrate); real arm: the instruction stored with every frame",
    )
    parser.add_argument("--teleop", default="expert", help=f"teleop device: {', '.join(TELEOPS)} (expert: sim only)")
    add_field(parser, "--episodes", RecordConfig, "episodes to save")
    parser.add_argument(
        "--root", type=Path, help="dataset folder (must not exist unless --resume); default $HF_LEROBOT_HOME/REPO_ID"
    )
    parser.add_argument("--repo-id", help="the dataset's hub id, user/name (default: local/<folder name>)")
    parser.add_argument("--push-to-hub", action="store_true", help="upload the dataset to --repo-id when done")
    parser.add_argument("--private", action="store_true", help="--push-to-hub: make the hub repository private")
    parser.add_argument("--resume", action="store_true", help="append to the dataset at --root")
    parser.add_argument("--fps", type=int, default=30, help="control and recording rate in Hz (default: 30)")
    add_field(parser, "--seed", RecordConfig, "sim: seed of the first episode")
    parser.add_argument(
        "--episode-time-s",
        "--max-seconds",
        dest="max_seconds",
        type=float,
        default=20.0,
        help="longest episode in seconds (sim tasks end earlier; default: 20)",
    )
    parser.add_argument(
        "--reset-time-s",
        type=float,
        default=0.0,
        help="seconds between episodes to reset the scene, the teleop still driving the arm (default: 0)",
    )
    parser.add_argument("--keep-failed", action="store_true", help="also store episodes that did not succeed")
    parser.add_argument(
        "--beacon",
        type=Path,
        metavar="PATH",
        help="keep this JSON file up to date while recording (pid, episodes saved, frames, seed, control rate; "
        "what `robotrl up` watches)",
    )
    _add_real_arm_arguments(parser)
    add_fleet_arguments(parser)
    _add_sim_arguments(parser)
    add_device_arguments(parser)


def _add_real_arm_arguments(parser: argparse.ArgumentParser) -> None:
    """The follower's port and id, or the twin that gives them."""
    parser.add_argument("--port", help="real arm: serial port of the follower, e.g. /dev/ttyACM0")
    parser.add_argument("--robot-id", default="follower", help="real arm: lerobot calibration id")
    parser.add_argument(
        "--twin",
        type=Path,
        metavar="INFO",
        help="so101: the running `robotrl twin --info INFO` gives the follower's bus, cameras and calibration "
        "(instead of --port and --cameras) and the leader of --teleop leader; each episode starts on its next "
        "scene, and its camera calibration is stored with the dataset (for `train --ball-target`)",
    )


def _add_sim_arguments(parser: argparse.ArgumentParser) -> None:
    """The simulated arm's scene and cameras, and the scripted expert's noise."""
    parser.add_argument("--scenario", default="nominal", help=SCENARIO_HELP)
    parser.add_argument("--realtime", action="store_true", help="sim: pace on the wall clock (real arms always are)")
    parser.add_argument("--image-size", type=int, default=224, help="sim: camera height and width in pixels")
    parser.add_argument(
        "--cameras",
        help="sim: comma-separated cameras to record, '' for none (default: front,wrist); real arm: "
        "lerobot's --robot.cameras map, e.g. \"{front: {type: opencv, index_or_path: 0, width: 640, "
        'height: 480, fps: 30}}"',
    )
    add_field(parser, "--noise", TeleopConfig, "expert: std of end-effector noise per tick, metres", field="noise_m")
    parser.add_argument(
        "--perturb",
        type=float,
        default=0.0,
        metavar="STD_RAD",
        help="DART: add a slowly varying offset (this std, radians) to every arm joint's target; "
        "teleop.action keeps the clean target (default: 0 = off)",
    )
    parser.add_argument(
        "--perturb-ticks",
        type=float,
        default=10.0,
        help="correlation time of the --perturb offset in ticks (default: 10)",
    )


def add_device_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the leader and replay devices."""
    parser.add_argument("--leader-port", help="leader teleop: serial port of the leader arm")
    parser.add_argument("--leader-id", default="leader", help="leader teleop: lerobot calibration id")
    parser.add_argument("--replay-root", type=Path, help="replay teleop: dataset whose actions are replayed")
    parser.add_argument("--replay-episode", type=int, default=0, help="replay teleop: episode index")


def teleop_config(name: str, args: argparse.Namespace) -> TeleopConfig:
    """The `TeleopConfig` of device `name` from the options of `add_device_arguments` (the
    leader of a twin: its bus, id and calibration from the twin's info file)."""
    if name == "leader" and args.twin is not None:
        from robotrl.inference.arm import twin_leader

        return twin_leader(args.twin)
    return TeleopConfig(
        name,
        args.leader_port,
        args.leader_id,
        replay_root=args.replay_root,
        replay_episode=args.replay_episode,
        noise_m=args.noise,
    )


def run(args: argparse.Namespace) -> int:
    _resolve(args)
    from robotrl.inference.arm import twin_camera_rig
    from robotrl.sim.env import TaskEnv

    rig = None if args.twin is None else twin_camera_rig(args.twin)  # read first: the twin may end before us
    session = _make_session(args)
    if isinstance(session, TaskEnv) and session.spec.cameras:
        rig = session.camera_rig()
    try:
        summary, before, after, writer = _record(args, session)
    finally:
        session.close()
    from robotrl.hardware.camera_geometry import save_rig
    from robotrl.record.commit import commit
    from robotrl.record.features import CAMERA_CALIBRATION
    from robotrl.record.pack import pack

    files = pack(args.root) if after > before else None
    if rig is not None and (args.root / "meta").is_dir():  # exact cameras, for `train --ball-target`
        save_rig(rig, args.root / CAMERA_CALIBRATION)
        commit(args.root)  # part of the dataset's last good state, so `--resume` keeps it as it is
    _report(args, summary, before, after, files)
    if args.push_to_hub:
        url = writer.push_to_hub(private=args.private)
        print(f"pushed to {url}")
    return 0


def _resolve(args: argparse.Namespace) -> None:
    """Check the options (one line each) and fill in the dataset folder and a fleet's arm."""
    if args.teleop not in TELEOPS:
        raise UserError(f"unknown teleop device {args.teleop!r}; choose from {', '.join(TELEOPS)}")
    if args.episodes < 1:
        raise UserError("--episodes must be at least 1")
    if args.perturb < 0 or args.perturb_ticks <= 0:
        raise UserError("--perturb must be >= 0 and --perturb-ticks > 0")
    args.root = dataset_root(args.root, args.repo_id, args.push_to_hub)
    apply_fleet(args)
    if args.twin is not None and (args.robot != "so101" or args.port or args.cameras or args.leader_port):
        raise UserError("--twin is an so101 (--robot so101) whose buses and cameras come from its info file: give none")


def dataset_root(root: Path | None, repo_id: str | None, push: bool) -> Path:
    """--root, or lerobot's default folder of --repo-id; one line when neither is usable."""
    if repo_id is not None and (repo_id.count("/") != 1 or not all(repo_id.split("/"))):
        raise UserError(f"--repo-id must look like user/name, got {repo_id!r}")
    if push and repo_id is None:
        raise UserError("--push-to-hub needs --repo-id user/name")
    if root is not None:
        return root
    if repo_id is None:
        raise UserError("give --root FOLDER or --repo-id user/name")
    from lerobot.utils.constants import HF_LEROBOT_HOME

    return HF_LEROBOT_HOME / repo_id


def _record(args: argparse.Namespace, session) -> tuple:
    """Record the episodes; (summary, episodes before, episodes after)."""
    from tqdm import tqdm

    from robotrl.hardware.lerobot_arm.convention import LEROBOT, RADIANS, JointConvention
    from robotrl.record.beacon import RecordBeacon
    from robotrl.record.features import dataset_features
    from robotrl.record.run import RecordConfig, record_dataset
    from robotrl.record.writer import DatasetWriter

    disturbance = None
    if args.perturb > 0:
        from robotrl.record.disturbance import Disturbance

        disturbance = Disturbance(args.perturb, len(session.spec.joint_names), args.perturb_ticks)
    joints = JointConvention(RADIANS if args.robot == "sim" else LEROBOT, session.spec.name)
    features = dataset_features(session.spec, joints, session.env_state_dim)
    writer = DatasetWriter(args.root, features, args.fps, joints, resume=args.resume, repo_id=args.repo_id)
    stop = threading.Event()  # Ctrl-C / SIGTERM: end the episode in progress as a stop key does, then exit
    teleop = StopOnSignal(make_teleop(teleop_config(args.teleop, args), session), stop)
    teleop.connect()
    before = writer.num_episodes
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with tqdm(total=args.episodes, desc="recording", unit="ep") as bar:
            config = RecordConfig(
                args.episodes,
                args.seed,
                int(args.max_seconds * args.fps),
                args.keep_failed or args.robot != "sim",
                reset_ticks=round(args.reset_time_s * args.fps),
            )
            beacon = None if args.beacon is None else RecordBeacon(args.beacon)
            summary = record_dataset(
                session, teleop, writer, config, progress=bar, disturbance=disturbance, observer=beacon
            )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        writer.close()
        teleop.disconnect()
    return summary, before, writer.num_episodes, writer


def _report(args: argparse.Namespace, s, before: int, after: int, files: tuple[int, int] | None) -> None:
    from robotrl.report.table import format_table

    realtime_ratio = s.encode_s / s.recorded_s if s.recorded_s else 0.0
    print(
        format_table(
            ("metric", "value"),
            [
                ("dataset", f"{args.root} ({before} -> {after} episodes)"),
                ("episodes saved", s.episodes_saved),
                ("frames", s.frames),
                ("dropped frames", s.dropped_frames),
                ("loop overruns", s.overruns),
                ("failed episodes discarded", s.discarded_failures),
                ("re-recorded", s.rerecorded),
                ("recorded time (s)", round(s.recorded_s, 2)),
                ("loop wall time (s)", round(s.loop_wall_s, 2)),
                ("save/encode time (s)", round(s.encode_s, 2)),
                ("save time / episode time", round(realtime_ratio, 3)),
                ("data and video files", "-" if files is None else f"{files[0]} -> {files[1]} (packed like lerobot)"),
            ],
        )
    )


def _make_session(args: argparse.Namespace):
    from robotrl.core.clock import WallClock

    if args.robot == "sim":
        return _sim_session(args)
    if args.robot not in ("so101", "so100"):
        raise UserError(f"unknown robot {args.robot!r}; choose sim, so101 or so100")
    if not args.port and args.twin is None:
        raise UserError(f"--robot {args.robot} needs --port (see `robotrl devices`)")
    from robotrl.hardware.lerobot_arm.cameras import parse_cameras
    from robotrl.hardware.lerobot_arm.robot import LerobotArm
    from robotrl.hardware.safety import SafeRobot
    from robotrl.inference.arm import new_twin_scene, twin_resources
    from robotrl.record.session import RobotSession

    port, camera_map, calibration_dir, twin_pid = args.port, args.cameras, None, None
    if args.twin is not None:
        port, camera_map, calibration_dir, twin_pid = twin_resources(args.twin)
    cameras = parse_cameras(camera_map)
    if not cameras:
        print("record: no --cameras given: recording joints only (an image policy needs cameras)", flush=True)
    clock = WallClock()
    arm = LerobotArm(
        args.robot,
        port=port,
        robot_id=args.robot_id,
        cameras=cameras,
        control_rate_hz=args.fps,
        calibration_dir=calibration_dir,
    )
    robot = SafeRobot(arm, clock=clock)
    robot.connect(watchdog_thread=True)
    on_reset = None if twin_pid is None else partial(new_twin_scene, robot, clock, twin_pid)
    return RobotSession(robot, args.task, clock, on_reset)


def _sim_session(args: argparse.Namespace):
    """The simulated arm's `TaskEnv` with the cameras asked for."""
    from robotrl.core.clock import WallClock
    from robotrl.core.robot import CameraSpec
    from robotrl.sim.env import TaskEnv

    size = args.image_size
    names = "front,wrist" if args.cameras is None else args.cameras
    cameras = tuple(CameraSpec(name, size, size) for name in names.split(",") if name)
    env = TaskEnv(args.task, args.scenario, cameras=cameras, clock=WallClock() if args.realtime else None)
    if abs(env.spec.control_rate_hz - args.fps) > 1e-9:
        env.close()
        raise UserError(
            f"the simulated arm runs at {env.spec.control_rate_hz:g} Hz; use --fps {env.spec.control_rate_hz:g}"
        )
    return env
