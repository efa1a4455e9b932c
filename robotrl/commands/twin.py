"""`robotrl twin`: the MuJoCo SO-101 behind a simulated Feetech bus (the follower), a
second bus driven by the task's scripted expert (the leader) and lerobot ZMQ cameras, so
the real-arm commands run unchanged against it:

    HF_LEROBOT_CALIBRATION=<calibration> robotrl record --robot so101 --port <follower bus> \\
        --teleop leader --leader-port <leader bus> --cameras '<cameras>' --task ... --root ...
    HF_LEROBOT_CALIBRATION=<calibration> robotrl deploy --robot so101 --port <follower bus> \\
        --cameras '<cameras>' --policy ...

Runs until Ctrl-C or SIGTERM (exit 0); SIGUSR1 starts a new scene. Each scene's outcome (solved
or not, scored by the task) is logged when it ends. Details: `robotrl.sim.twin.twin`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import tempfile
import threading
from pathlib import Path

from robotrl.commands.flags import add_field
from robotrl.core.config import field_default
from robotrl.core.errors import UserError
from robotrl.fsutil import HeartbeatFile
from robotrl.sim.twin.calibration import FOLLOWER_FOLDER
from robotrl.sim.twin.twin import Twin, TwinConfig, TwinInfo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_field(parser, "--task", TwinConfig, "task scene and scripted expert: reach, pick_place, track or calibrate")
    add_field(parser, "--seed", TwinConfig, "seed of the first scene; each reset takes the next")
    add_field(parser, "--rate-hz", TwinConfig, "control ticks per second (bus registers, expert, physics targets)")
    add_field(parser, "--fps", TwinConfig, "camera frames per second (at most --rate-hz)")
    size = f"{field_default(TwinConfig, 'camera_width_px')}x{field_default(TwinConfig, 'camera_height_px')}"
    parser.add_argument(
        "--camera-size", default=size, help="camera frame WIDTHxHEIGHT in pixels (default: %(default)s)"
    )
    parser.add_argument(
        "--camera-names",
        default=",".join(field_default(TwinConfig, "cameras")),
        help="comma-separated scene cameras to publish, '' for none (default: %(default)s)",
    )
    add_field(parser, "--robot-id", TwinConfig, "lerobot id of the follower (record/deploy --robot-id)")
    add_field(parser, "--leader-id", TwinConfig, "lerobot id of the leader (record --leader-id)")
    parser.add_argument(
        "--calibration-dir",
        type=Path,
        help="where to write the calibration files (HF_LEROBOT_CALIBRATION for the commands); "
        "default: a temporary folder, removed at exit",
    )
    add_field(parser, "--reset-every-s", TwinConfig, "new scene this often in seconds; 0: at start and on SIGUSR1")
    add_field(
        parser,
        "--instruction",
        TwinConfig,
        "only scenes whose instruction is this (what `deploy --task` tells the policy); '' for every scene",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object (ports, ids, calibration, cameras)")
    parser.add_argument(
        "--info",
        type=Path,
        help="keep this JSON file up to date while the twin runs: the --json object, its pid and a heartbeat "
        "(monotonic_s, rewritten every 0.5 s by the control loop); removed at exit (`robotrl up` reads it)",
    )


def twin_config(args: argparse.Namespace) -> TwinConfig:
    """The `TwinConfig` of the options; `UserError` / `ConfigError` (one line) for bad ones."""
    try:
        width, height = (int(v) for v in args.camera_size.lower().split("x"))
    except ValueError:
        raise UserError(f"--camera-size must be WIDTHxHEIGHT, e.g. 64x48; got {args.camera_size!r}") from None
    cameras = tuple(name.strip() for name in args.camera_names.split(",") if name.strip())
    return TwinConfig(
        task=args.task,
        seed=args.seed,
        rate_hz=args.rate_hz,
        fps=args.fps,
        camera_width_px=width,
        camera_height_px=height,
        cameras=cameras,
        robot_id=args.robot_id,
        leader_id=args.leader_id,
        reset_every_s=args.reset_every_s,
        instruction=args.instruction,
    )


def run(args: argparse.Namespace) -> int:
    config = twin_config(args)  # bad options fail before anything starts
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    own_dir = args.calibration_dir is None
    calibration_dir = Path(tempfile.mkdtemp(prefix="robotrl-twin-")) if own_dir else args.calibration_dir
    twin = None
    try:
        twin = Twin(config, calibration_dir)
        reset = twin.request_reset
        previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, lambda *_: reset())
        _announce(twin.info, args.json)
        twin.run(stop, None if args.info is None else InfoFile(args.info, twin))
    finally:
        if args.info is not None:
            args.info.unlink(missing_ok=True)
        if twin is not None:
            twin.close()
        if own_dir:
            shutil.rmtree(calibration_dir, ignore_errors=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


class InfoFile:
    """`--info PATH`: the twin's `TwinInfo`, the folder of the follower's calibration file (a
    `LerobotArm` calibration_dir), pid, scene seed and `monotonic_s` (CLOCK_MONOTONIC,
    one clock for every process of the machine), rewritten atomically by the control loop at
    most every `every_s` seconds: a reader tells a stalled twin by the age of `monotonic_s`."""

    def __init__(self, path: Path, twin: Twin, every_s: float = 0.5) -> None:
        self.twin, self.file = twin, HeartbeatFile(path, every_s)
        info = twin.info
        follower = Path(info.calibration_dir) / FOLLOWER_FOLDER
        self.info = {**info.as_dict(), "follower_calibration_dir": str(follower)}
        self()

    def __call__(self) -> None:
        if self.file.due():
            self.file.write({**self.info, "seed": self.twin.seed})


def _announce(info: TwinInfo, as_json: bool) -> None:
    """The twin's resources on stdout, flushed (a parent process reads them)."""
    if as_json:
        print(json.dumps(info.as_dict()), flush=True)
        return
    print(f"follower bus: {info.follower_port} (robot id {info.robot_id})")
    print(f"leader bus: {info.leader_port} (leader id {info.leader_id})")
    print(f"calibration: {info.calibration_dir}")
    print(f"cameras: {info.cameras or '(none)'}")
    cameras = f" --cameras '{info.cameras}'" if info.cameras else ""
    print(
        f"try: HF_LEROBOT_CALIBRATION={info.calibration_dir} robotrl record --robot so101 --port {info.follower_port} "
        f"--robot-id {info.robot_id} --teleop leader --leader-port {info.leader_port} --leader-id {info.leader_id}"
        f"{cameras} --task TASK --root DATASET"
    )
    print("Ctrl-C or SIGTERM stops the twin, SIGUSR1 starts a new scene", flush=True)
