"""Package layout: the subsystem folders are importable only as `robotrl.<folder>`, and
the robot-side modules stay free of torch and mujoco (they run on the robot computer)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    """The venv's python on `code`, from `cwd`, without this repo on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("name", ["hardware", "sim", "policies", "inference"])
def test_bare_subsystem_names_do_not_import(name, tmp_path):
    result = run_python(f"import {name}", tmp_path)
    assert result.returncode != 0
    assert "ModuleNotFoundError" in result.stderr and f"'{name}'" in result.stderr


def test_subsystems_import_under_robotrl(tmp_path):
    code = ("import robotrl.hardware, robotrl.sim, robotrl.policies, robotrl.inference\n"
            "for m in (robotrl.hardware, robotrl.sim, robotrl.policies, robotrl.inference):\n"
            "    print(m.__name__, m.__file__)\n")
    result = run_python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    found = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    for folder in ("hardware", "sim", "policies", "inference"):
        assert Path(found[f"robotrl.{folder}"]) == REPO / folder / "__init__.py"


def test_robot_side_modules_import_neither_torch_nor_mujoco(tmp_path):
    code = ("import robotrl.hardware.safety, robotrl.core.robot, robotrl.core.clock\n"
            "import robotrl.hardware.kinematics, robotrl.hardware.models, robotrl.core.errors\n"
            "import sys\n"
            "heavy = sorted(m for m in ('torch', 'mujoco') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    result = run_python(code, tmp_path)
    assert result.returncode == 0, result.stderr
