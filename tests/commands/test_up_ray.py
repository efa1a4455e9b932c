"""`robotrl up --ray`: what each role asks Ray for, the one-line error without Ray, and
the bring-up for real on a two-node Ray cluster started here (`ray start --block`, each
node with its own robot resource, the head with a fake GPU): every arm's role on the node
owning its robot, the server and the learner on the GPU node (on the CPU all the same),
endpoints at the nodes' IP, an actor killed with SIGKILL restarted on its node, and the
run ending with exit 0 and nothing left behind. Skipped when Ray is not installed (CI)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_up import _alive, _status, _stop, _wait  # the one-machine test's status helpers

from robotrl.bringup.host import NodeClockProbe
from robotrl.bringup.ray_cluster import RoleResources, role_resources
from robotrl.fleet import load_fleet, parse_fleet

ARM = 'model = "so101"\ndriver = "sim"\nroles = ["{role}"]\ntask = "reach"\nmax_seconds = 1\nstepped_delay = 2\n'
FLEET = (
    "[robots.left]\n" + ARM.format(role="actor") + "episodes = {left}\n"
    "[robots.right]\n" + ARM.format(role="actor") + "episodes = {right}\n"
    '[gpus.box]\nroles = ["inference_server", "learner"]\n'
    '[serve]\npolicy = "policy"\ndevice = "cpu"\n'
    '[learn]\nmin_transitions = 50\npublish_every = 5\ncheckpoint_every = 20\ndevice = "cpu"\n'
)


def test_each_role_asks_ray_for_its_robot_or_its_share_of_a_gpu():
    fleet = parse_fleet(tomllib.loads(FLEET.format(left=1, right=1)))
    wanted = role_resources(fleet)
    # one GPU entry serving both started GPU roles: half a GPU each, no CPU
    assert wanted["learn"] == wanted["serve"] == RoleResources(0.0, 0.5, {}, "gpus.box")
    assert wanted["robots.left"] == RoleResources(1.0, 0.0, {"robot_left": 1.0}, "robots.left")
    assert wanted["robots.right"].resources == {"robot_right": 1.0}
    # no GPU entry: a CPU each; a deploy client (no learner) asks for its robot alike
    text = "[robots.arm0]\n" + ARM.format(role="deploy_client") + '[serve]\npolicy = "p"\n'
    wanted = role_resources(parse_fleet(tomllib.loads(text)))
    assert wanted == {
        "serve": RoleResources(1.0, source="serve"),
        "robots.arm0": RoleResources(1.0, 0.0, {"robot_arm0": 1.0}, "robots.arm0"),
    }
    text += '[gpus.a]\nroles = ["inference_server"]\n'
    assert role_resources(parse_fleet(tomllib.loads(text)))["serve"].num_gpus == 1.0


def test_the_ray_example_fleet_asks_for_what_its_comments_say():
    fleet = load_fleet(Path(__file__).resolve().parents[2] / "examples" / "fleet-ray.toml")
    assert {name: (r.num_cpus, r.num_gpus, r.resources) for name, r in role_resources(fleet).items()} == {
        "learn": (0.0, 0.5, {}),
        "serve": (0.0, 0.5, {}),
        "robots.left": (1.0, 0.0, {"robot_left": 1.0}),
        "robots.right": (1.0, 0.0, {"robot_right": 1.0}),
    }


class _Stamped:
    """A probe whose role answered at 100.0 s and sent its first chunk at 90.0 s, both on
    its own machine's monotonic clock."""

    def check(self) -> tuple[float | None, dict]:
        return 100.0, {"first_chunk_monotonic_s": 90.0, "episodes": 3}

    def close(self) -> None:
        pass


def test_a_remote_arms_times_are_turned_into_this_machines_clock():
    # a node whose clock is 1000 s ahead of ours: 100 s there is -900 s here
    seen, report = NodeClockProbe(_Stamped(), 1000.0).check()
    assert (seen, report) == (-900.0, {"first_chunk_monotonic_s": -910.0, "episodes": 3})


def test_ray_flag_without_ray_is_one_line(tmp_path, monkeypatch, capsys):
    from robotrl.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(FLEET.format(left=1, right=1))
    assert main(["up", str(fleet), "--ray", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["robotrl up: error: --ray needs Ray, which is not installed here: pip install 'ray>=2.40,<3'"]
    assert not (tmp_path / "run").exists()


# -- a two-node Ray cluster on this machine -----------------------------------------------

NODES = (
    "import json, sys, ray\n"
    "ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
    "print(json.dumps({n['NodeID']: n['Resources'] for n in ray.nodes() if n['Alive']}))\n"
)


RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0", "RAY_USAGE_STATS_ENABLED": "0"}
"""The test cluster's own settings, whatever ~/.ray holds: no token (a loopback-only test
cluster), no drain wait at SIGTERM, no usage stats."""


@dataclass(frozen=True)
class Cluster:
    address: str
    ip: str
    nodes: dict[str, dict]
    """Ray node id -> its resources, as the cluster's GCS says."""

    def owner(self, resource: str) -> str:
        (node,) = [node for node, resources in self.nodes.items() if resource in resources]
        return node


def _this_ip() -> str:
    """This machine's address on its default route (what Ray would pick), else loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _wait_for_line(log: Path, text: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in (log.read_text() if log.exists() else ""):
        assert proc.poll() is None and time.monotonic() < deadline, f"ray start failed: {log.read_text()[-3000:]}"
        time.sleep(0.2)


def _kill_session(sid: int) -> None:
    """SIGKILL whatever is left in session `sid` (one this test started)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # fields after the name: state, ppid, pgrp, session
            try:
                os.kill(int(stat.parent.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def ray_cluster():
    pytest.importorskip("ray", reason="robotrl up --ray needs the ray extra (pip install 'ray>=2.40,<3')")
    ray_cli = str(Path(sys.executable).with_name("ray"))
    ip, port = _this_ip(), _free_port()
    temp = Path(tempfile.mkdtemp(prefix="rrup", dir="/tmp"))  # short: Ray's socket paths have a length limit
    env = dict(os.environ, **RAY_ENV)
    common = ["--block", "--node-ip-address", ip, "--num-cpus", "1", "--temp-dir", str(temp)]
    common += ["--object-store-memory", str(100 * 2**20), "--disable-usage-stats"]
    head_args = ["--head", "--port", str(port), "--num-gpus", "1", "--resources", json.dumps({"robot_left": 1})]
    head_args += ["--include-dashboard", "false", "--dashboard-port", str(_free_port())]
    worker_args = ["--address", f"{ip}:{port}", "--resources", json.dumps({"robot_right": 1})]
    started: list[subprocess.Popen] = []
    try:
        for name, args in (("head", head_args), ("worker", worker_args)):
            command = [ray_cli, "start", *common, "--dashboard-agent-listen-port", str(_free_port()), *args]
            with open(temp / f"{name}.log", "w") as log:
                proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            started.append(proc)
            _wait_for_line(temp / f"{name}.log", "Ray runtime started", proc, 90)
        deadline, nodes = time.monotonic() + 60, {}
        while len(nodes) < 2 and time.monotonic() < deadline:
            out = subprocess.run([sys.executable, "-c", NODES, f"{ip}:{port}"], capture_output=True, text=True, env=env)
            nodes = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {}
        assert len(nodes) == 2, f"the two Ray nodes did not both join: {nodes}"
        yield Cluster(f"{ip}:{port}", ip, nodes)
    finally:
        for proc in reversed(started):
            proc.send_signal(signal.SIGTERM)  # `ray start --block` stops its node's processes
        for proc in started:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            _kill_session(proc.pid)
        shutil.rmtree(temp, ignore_errors=True)


RIGHT_EPISODES = 150
"""About 10 episodes a second each (1 s episodes on a stepped clock): long enough to kill one."""


@pytest.mark.slow
def test_up_ray_places_roles_by_resource_and_restarts_a_killed_actor(tmp_path, tiny_flow, ray_cluster):
    cluster: Cluster = ray_cluster
    tiny_flow(cameras=()).save(tmp_path / "policy")
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(FLEET.format(left=RIGHT_EPISODES // 2, right=RIGHT_EPISODES))
    status_file, log = tmp_path / "status.json", (tmp_path / "up.log").open("w")
    command = [sys.executable, "-m", "robotrl.cli", "up", str(fleet), "--ray", "--ray-address", cluster.address]
    command += ["--out", "run", "--status", str(status_file), "--quiet"]
    started = time.monotonic()
    env = dict(os.environ, **RAY_ENV)
    up = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    pids: set[int] = set()

    def seen(s: dict) -> dict:
        pids.update(r["pid"] for r in s["roles"].values() if r["pid"])
        return s["roles"]

    try:

        def running(s: dict) -> bool:
            roles = seen(s)
            ups = all(roles[name]["state"] == "up" for name in ("learn", "serve", "robots.right"))
            return (
                ups
                and roles["robots.left"]["state"] in ("up", "done")
                and roles["robots.right"]["report"]["episodes"] >= 3
            )

        status = _wait(status_file, up, running, 120, "every role up, the right arm with episodes")
        up_s = time.monotonic() - started
        roles = status["roles"]
        where = {name: role["node"]["id"] for name, role in roles.items()}
        gpu = cluster.owner("GPU")
        assert where == {
            "learn": gpu,
            "serve": gpu,
            "robots.left": cluster.owner("robot_left"),
            "robots.right": cluster.owner("robot_right"),
        }
        assert where["robots.right"] != gpu  # the worker node: the two arms on two nodes
        assert all(role["node"]["ip"] == cluster.ip for role in roles.values())
        assert all(abs(role["node"]["clock_offset_s"]) < 0.05 for role in roles.values())  # one machine's clock
        assert all(e.startswith(f"tcp://{cluster.ip}:") for e in status["endpoints"].values()), status["endpoints"]

        right = roles["robots.right"]
        os.kill(right["pid"], signal.SIGKILL)  # the arm's process on the worker node dies
        killed = time.monotonic()

        def right_back(s: dict) -> bool:
            new = seen(s)["robots.right"]
            return new["restarts"] == 1 and new["state"] == "up" and new["pid"] != right["pid"]

        status = _wait(status_file, up, right_back, 60, "the killed actor restarted and up")
        back_s = time.monotonic() - killed
        again = status["roles"]["robots.right"]
        assert again["node"]["id"] == where["robots.right"]  # restarted on the node with its robot
        assert again["last_exit"]["code"] == -signal.SIGKILL
        assert 0.5 <= again["last_exit"]["restarted_at_s"] - again["last_exit"]["at_s"] < 1.5  # first backoff

        assert up.wait(timeout=180) == 0  # both arms ran their episodes; the rest stopped
        total_s = time.monotonic() - started
    finally:
        _stop(up, log)
    final = _status(status_file)
    states = {name: r["state"] for name, r in final["roles"].items()}
    assert states == {"learn": "stopped", "serve": "stopped", "robots.left": "done", "robots.right": "done"}
    assert final["roles"]["robots.right"]["restarts"] == 1 and final["roles"]["robots.left"]["restarts"] == 0
    episodes = tmp_path / "run" / "robots" / "right"
    ended = sum(len(p.read_text().splitlines()) - 1 for p in episodes.glob("episodes.*.csv"))
    assert ended == RIGHT_EPISODES and (episodes / "episodes.1.csv").is_file()  # the restart ran the episodes left
    assert (tmp_path / "run" / "learner" / "checkpoint" / "meta.json").is_file()
    assert len(pids) >= 5 and not [pid for pid in pids if _alive(pid)]  # nothing left behind
    print(
        f"\nall roles up after {up_s:.1f} s; placement {where}; killed actor up again after {back_s:.2f} s "
        f"({again['last_exit']}); whole run {total_s:.1f} s"
    )
