"""`robotrl calibrate-cameras`: the camera calibration file of `train --ball-target` from a
recording of a chessboard (`robotrl.record.board_views`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from robotrl.core.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", type=Path, required=True, help="the recording's LeRobot dataset folder")
    parser.add_argument("--out", type=Path, required=True, help="the calibration file to write (JSON)")
    parser.add_argument(
        "--board", default="7x4", help="inner corners COLSxROWS, an odd sum, e.g. 9x6 (default: %(default)s)"
    )
    parser.add_argument("--square-mm", type=float, default=15.0, help="the board's square side (default: %(default)s)")
    parser.add_argument(
        "--gripper-camera",
        default="wrist",
        help="the camera on the gripper; the others are fixed (default: %(default)s)",
    )
    parser.add_argument(
        "--pose-episode",
        type=int,
        default=-1,
        help="the episode in which the board lies still while the arm moves (default: the last)",
    )
    parser.add_argument(
        "--ball-diameter-mm",
        type=float,
        default=30.0,
        help="the tracked ball's diameter, kept in the file (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    from robotrl.hardware.board_calibration import Board
    from robotrl.hardware.camera_geometry import save_rig
    from robotrl.record.board_views import calibrate_from_recording

    try:
        cols, rows = (int(v) for v in args.board.lower().split("x"))
    except ValueError:
        raise UserError(f"--board must be COLSxROWS inner corners, e.g. 9x6; got {args.board!r}") from None
    if args.ball_diameter_mm <= 0:
        raise UserError("--ball-diameter-mm must be positive")
    board = Board(cols, rows, args.square_mm / 1000)
    rig, reports = calibrate_from_recording(
        args.dataset, board, args.gripper_camera, args.ball_diameter_mm / 1000, args.pose_episode
    )
    for name, cam in rig.cameras.items():
        rep = reports[name]
        lens = "focal, centre, k1, k2" if rep.intrinsics.full_model else "focal only (few distinct views)"
        print(
            f"{name}: {cam.width_px}x{cam.height_px}, {rep.views} views ({rep.intrinsics.views} distinct fit the lens, "
            f"{rep.pose_views} pauses of the pose episode fit the pose); lens: {lens}, fx {cam.fx:.1f} px, "
            f"{rep.intrinsics.rms_px:.2f} px rms; on the "
            f"{'gripper' if cam.mount == 'ee' else 'table'} at {[round(float(v), 4) for v in cam.position_m]} m, "
            f"{rep.pose_rms_px:.2f} px rms"
        )
    save_rig(rig, args.out)
    print(f"wrote {args.out}")
    return 0
