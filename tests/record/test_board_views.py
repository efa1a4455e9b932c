"""`robotrl calibrate-cameras` on a recording of the simulated `calibrate_lens` and
`calibrate` tasks: the fitted calibration against the scene's exact one, pauses found,
bad input one line."""

from __future__ import annotations

import numpy as np
import pytest

from robotrl.cli import main
from robotrl.hardware.camera_geometry import load_rig
from robotrl.record import board_views
from robotrl.record.board_views import still_frames
from robotrl.record.features import CAMERA_CALIBRATION


def _angle_deg(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.degrees(np.arccos(np.clip((np.trace(a.T @ b) - 1) / 2, -1, 1))))


def test_pauses_are_runs_of_still_arm_joints_whatever_the_gripper_does():
    moving = np.linspace(0, 0.5, 10)[:, None] * np.ones((1, 6))
    held = np.ones((7, 6)) + [0, 0.002, 0, 0, -0.004, 0]  # within STILL_RAD of its first
    short = np.full((3, 6), 2.0)
    states = np.concatenate([moving, held, short, np.linspace(3, 4, 5)[:, None] * np.ones((1, 6))])
    states[10:17, -1] = np.linspace(0, 1, 7)  # the gripper may move during a pause
    assert still_frames(states).tolist() == [13]


def test_the_calibration_of_a_chessboard_recording_matches_the_scene(tmp_path, capsys, monkeypatch):
    """A `calibrate_lens` then a `calibrate` episode at 480 px: the wrist camera within
    3 mm and 0.3 deg of its place on the hand, the front camera within 1 cm and 1 deg
    of its place on the table, both focal lengths within 2%."""
    monkeypatch.setattr(board_views, "FRAMES_PER_EPISODE", 24)
    root, out = tmp_path / "ds", tmp_path / "cams.json"
    record = ["record", "--episodes", "1", "--root", str(root), "--image-size", "480", "--seed", "3"]
    assert main([*record, "--task", "calibrate_lens"]) == 0
    assert main([*record, "--task", "calibrate", "--resume"]) == 0
    assert main(["calibrate-cameras", "--dataset", str(root), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "wrist: 480x480" in printed and "on the gripper" in printed and "front: 480x480" in printed
    fitted, exact = load_rig(out), load_rig(root / CAMERA_CALIBRATION)
    assert fitted.object_diameter_m == pytest.approx(0.03)
    for name, mount, metres, degrees in (("wrist", "ee", 3e-3, 0.3), ("front", "base", 0.01, 1.0)):
        cam, true = fitted.cameras[name], exact.cameras[name]
        assert cam.mount == mount and abs(cam.fx / true.fx - 1) < 0.02
        assert np.linalg.norm(cam.position_m - true.position_m) < metres
        assert _angle_deg(cam.rotation, true.rotation) < degrees
    assert "front: 480x480, " in printed and "lens: focal, centre, k1, k2" in printed.split("front:")[1]

    def fails(*extra: str) -> str:
        assert main(["calibrate-cameras", "--dataset", str(root), "--out", str(tmp_path / "x.json"), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err
        return err

    assert "odd" in fails("--board", "7x5")
    assert "COLSxROWS" in fails("--board", "seven")
    assert "no camera 'hand'" in fails("--gripper-camera", "hand")
    assert "no pose episode 3" in fails("--pose-episode", "3")
    assert "never saw the whole board" in fails("--board", "9x6")
    assert main(["calibrate-cameras", "--dataset", str(tmp_path / "none"), "--out", str(out)]) == 2
    assert not (tmp_path / "x.json").exists()
