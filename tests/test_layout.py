"""Package layout: the subsystem folders are importable only as `robotrl.<folder>`, and
the robot-side modules stay free of torch and mujoco (they run on the robot computer)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    """The venv's python on `code`, from `cwd`, without this repo on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", ["hardware", "sim", "policies", "inference"])
def test_bare_subsystem_names_do_not_import(name, tmp_path):
    result = run_python(f"import {name}", tmp_path)
    assert result.returncode != 0
    assert "ModuleNotFoundError" in result.stderr and f"'{name}'" in result.stderr


def test_subsystems_import_under_robotrl(tmp_path):
    code = (
        "import robotrl.hardware, robotrl.sim, robotrl.policies, robotrl.inference\n"
        "for m in (robotrl.hardware, robotrl.sim, robotrl.policies, robotrl.inference):\n"
        "    print(m.__name__, m.__file__)\n"
    )
    result = run_python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    found = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    for folder in ("hardware", "sim", "policies", "inference"):
        assert Path(found[f"robotrl.{folder}"]) == REPO / folder / "__init__.py"


HEAVY = ("torch", "mujoco", "lerobot")
ROBOT_SIDE = {
    **dict.fromkeys(
        (
            "robotrl.core.errors",
            "robotrl.core.robot",
            "robotrl.core.clock",
            "robotrl.core.policy",
            "robotrl.core.task",
            "robotrl.core.config",
            "robotrl.hardware.safety",
            "robotrl.hardware.kinematics",
            "robotrl.hardware.models",
            "robotrl.hardware.lerobot_arm.units",
            "robotrl.inference.chunking",
            "robotrl.inference.executor",
            "robotrl.inference.runner",
            "robotrl.inference.remote",
            "robotrl.inference.transitions",
            "robotrl.learn.beacon",
        ),
        HEAVY,
    ),
    **dict.fromkeys(
        (
            "robotrl.wire.codec",
            "robotrl.wire.transport",
            "robotrl.wire.client",
            "robotrl.wire.keys",
            "robotrl.wire.weights",
        ),
        (*HEAVY, "cv2"),
    ),
    **dict.fromkeys(
        (
            "robotrl.hardware.teleop.keyboard",
            "robotrl.hardware.teleop.gamepad",
            "robotrl.hardware.teleop.leader",
            "robotrl.hardware.teleop.replay",
        ),
        (*HEAVY, "pygame"),
    ),
}
"""What a robot computer imports, and what none of it may pull in."""


@pytest.mark.parametrize("module", sorted(ROBOT_SIDE))
def test_robot_side_modules_stay_light(module, tmp_path):
    heavy = ROBOT_SIDE[module]
    code = f"import sys, {module}\nheavy = sorted(m for m in {heavy!r} if m in sys.modules)\nassert not heavy, heavy\n"
    result = run_python(code, tmp_path)
    assert result.returncode == 0, result.stderr


# -- dependencies ---------------------------------------------------------------------------
LAYERS = {
    "robotrl": 0,
    "robotrl.core": 0,
    "robotrl.fsutil": 0,
    "robotrl.report": 0,
    "robotrl.wire": 1,
    "robotrl.hardware": 1,
    "robotrl.policies": 2,
    "robotrl.sim": 2,
    "robotrl.record": 3,
    "robotrl.buffer": 3,
    "robotrl.inference": 4,
    "robotrl.train": 5,
    "robotrl.learn": 5,
    "robotrl.bench": 6,
    "robotrl.fleet": 6,
    "robotrl.bringup": 6,
    "robotrl.commands": 7,
    "robotrl.cli": 7,
}
"""A module imports only from its own layer or below (core -> wire, hardware -> policies,
sim -> record, buffer -> inference -> train, learn -> bench, fleet -> commands)."""
FOLDERS = {
    "robotrl": "robotrl",
    "robotrl.hardware": "hardware",
    "robotrl.policies": "policies",
    "robotrl.inference": "inference",
    "robotrl.sim": "sim",
}


def _modules() -> dict[str, Path]:
    mods = {}
    for package, folder in FOLDERS.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join([package, *parts])] = path
    return mods


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, lazy ones included, except those under `if TYPE_CHECKING:`."""
    skip = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
        for n in ast.walk(node)
    }
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in skip]


def import_graph() -> dict[str, set[str]]:
    """Module -> the robotrl modules it imports (`from pkg import sub` counts as pkg.sub)."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in _runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
            elif node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in mods]
                deps.update(subs)
                if len(subs) < len(node.names):
                    deps.add(node.module)
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def folder_of(module: str) -> str:
    """The LAYERS key a module belongs to (its longest matching prefix)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in LAYERS:
            return ".".join(parts[:n])
    raise KeyError(f"{module} belongs to no layer: add its folder to LAYERS")


def test_no_import_cycle_between_modules():
    assert cycles(import_graph()) == []


def test_no_import_cycle_between_folders():
    folders: dict[str, set[str]] = {f: set() for f in LAYERS}
    for module, deps in import_graph().items():
        folders[folder_of(module)] |= {folder_of(d) for d in deps} - {folder_of(module)}
    assert cycles(folders) == []


def test_dependencies_point_down_the_layers():
    upward = sorted(
        f"{m} -> {d}" for m, deps in import_graph().items() for d in deps if LAYERS[folder_of(d)] > LAYERS[folder_of(m)]
    )
    assert upward == []


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


COMMAND_FUNCTION_LINES = 45
"""A command module's functions stay about 40 lines: parse, build configs, call a library."""


def test_command_functions_stay_short():
    long = []
    for path in sorted((REPO / "robotrl" / "commands").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > COMMAND_FUNCTION_LINES:
                long.append(f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert long == []
