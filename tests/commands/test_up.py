"""`robotrl up`: the bring-up fields of a fleet file (errors that name the field), the
restart backoff, and the example fleet of two simulated arms brought up for real (learner,
server and two stepped actors as processes on loopback): every role up, an actor killed
with SIGKILL and restarted while the other arm keeps running, a frozen actor marked down,
SIGTERM stopping everything with exit 0 and no process left."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from robotrl.bringup.plan import plan_bringup
from robotrl.bringup.supervisor import backoff_s
from robotrl.core.errors import ConfigError
from robotrl.fleet import ALGORITHMS, load_fleet, parse_fleet

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SIM = '[robots.a]\nmodel = "so101"\ndriver = "sim"\nroles = ["deploy_client"]\n'
REAL = '[robots.a]\nmodel = "so101"\ndriver = "lerobot"\nport = "/dev/ttyACM0"\nroles = ["deploy_client"]\n'
SERVE = '[serve]\npolicy = "ckpt"\n'
LEARN = SERVE + "[learn]\n"
ACTOR = SIM.replace('"deploy_client"', '"actor"')

BAD_BRINGUP = [
    (SIM + 'task = "fly"\n', "robots.a.task: 'fly' is not a simulated task (reach, pick_place, track, calibrate"),
    (SIM + "task = 3\n", "robots.a.task: expected a task name or an instruction, got 3"),
    (REAL + 'scenario = "nominal"\n', "robots.a.scenario: only for driver 'sim'"),
    (SIM + 'scenario = "windy"\n', "robots.a.scenario: 'windy' is not a scenario (nominal, shifted, camera_lag)"),
    (SIM + 'mode = "fast"\n', "robots.a.mode: 'fast' is not one of sync,"),
    (SIM + "episodes = 0\n", "robots.a.episodes: must be at least 1, got 0"),
    (SIM + "max_seconds = -1.5\n", "robots.a.max_seconds: must be above 0, got -1.5"),
    (SIM + 'max_seconds = "3"\n', "robots.a.max_seconds: expected a number, got '3'"),
    (REAL + "stepped_delay = 2\n", "robots.a.stepped_delay: only for driver 'sim'"),
    (SIM + "stepped_delay = 1.5\n", "robots.a.stepped_delay: expected an integer, got 1.5"),
    (REAL + 'intervene = "scripted"\n', "robots.a.intervene: 'scripted' (the task's expert) is for driver 'sim'"),
    (SIM + 'intervene = "robot"\n', "robots.a.intervene: 'robot' is not one of none, scripted"),
    (REAL + 'intervene = "leader"\n', "robots.a.intervene: 'leader' takes the terminal's keys, and `robotrl up`"),
    (SIM + "seed = -1\n", "robots.a.seed: must be at least 0, got -1"),
    (SIM + "budget_ticks = -5\n", "robots.a.budget_ticks: must be at least 0, got -5"),
    (SIM + 'intervene = "none"\ntaper_episodes = 30\n', "robots.a.taper_episodes: only for intervene 'scripted'"),
    (REAL + "budget_ticks = 50\n", "robots.a.budget_ticks: only for intervene 'scripted' on driver 'sim'"),
    (LEARN + "online_ratio = 1.5\n", "learn.online_ratio: expected a number in [0, 1], got 1.5"),
    (SIM + 'curve_keys = ""\n', "robots.a.curve_keys: must not be empty"),
    (SIM + 'learner_keys = "k"\n' + LEARN, "robots.a.learner_keys: only for a robot with the 'actor' role"),
    (
        SIM.replace('["deploy_client"]', '["deploy_client", "actor"]') + LEARN,
        "robots.a.roles[1]: 'deploy_client' and 'actor' both run the arm: give one of them",
    ),
    (ACTOR, "robots.a.roles[0]: 'actor' streams to the learner: add a [learn] section"),
    ("[learn]\n", "learn: needs a [serve] section"),
    ("[serve]\nport = 5555\n", "serve.policy: missing"),
    ('[serve]\npolicy = ""\n', "serve.policy: must not be empty"),
    (SERVE + "port = 70000\n", "serve.port: a TCP port is at most 65535, got 70000"),
    (SERVE + "port = true\n", "serve.port: expected an integer, got True"),
    (SERVE + 'device = "tpu"\n', "serve.device: device 'tpu' is not one of"),
    (SERVE + 'bind = "tcp://*:5555"\n', "serve.bind: unknown key (known: policy, port, device"),
    ("serve = 3\n", "serve: expected a table [serve], got 3"),
    (LEARN + 'algo = "ppo"\n', "learn.algo: 'ppo' is not an algorithm (sac, hil-flow, dsrl)"),
    (LEARN + "overrides = 3\n", "learn.overrides: expected a table"),
    (LEARN + 'demo_datasets = "d"\n', "learn.demo_datasets: expected an array of folders"),
    (LEARN + "demo_datasets = [1]\n", "learn.demo_datasets[0]: expected a folder, got 1"),
    (LEARN + "publish_every = 0\n", "learn.publish_every: must be at least 1, got 0"),
    (LEARN + 'fsync = "yes"\n', "learn.fsync: expected true or false, got 'yes'"),
    (LEARN + "weights_port = 65535\n", "learn.weights_port: the latest-weights socket takes the next port"),
    (
        LEARN.replace('"ckpt"\n', '"ckpt"\nport = 5562\n') + "weights_port = 5561\n",
        "learn.weights_port: port 5562 is already taken by serve.port",
    ),
    (LEARN + "transitions_port = 5560\nweights_port = 5560\n", "learn.weights_port: port 5560 is already taken"),
]


@pytest.mark.parametrize(
    "text, message", BAD_BRINGUP, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(BAD_BRINGUP)]
)
def test_bad_bringup_field_is_named(text, message):
    names_the_field(text, message)


def names_the_field(text: str, message: str) -> None:
    """Parsing the fleet file `text` fails with one line naming the file and `message`."""
    with pytest.raises(ConfigError) as info:
        parse_fleet(tomllib.loads(text), "f.toml")
    assert str(info.value).startswith("f.toml: ")
    assert message in str(info.value)


def _plan(tmp_path: Path, text: str):
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    return plan_bringup(load_fleet(path), tmp_path / "run")


def test_what_up_cannot_run_here_is_named(tmp_path):
    # the checks `up` makes before it starts anything, each naming the field
    with pytest.raises(ConfigError, match=r"serve: missing; robots.a is a deploy_client"):
        _plan(tmp_path, SIM)
    with pytest.raises(ConfigError, match=r"serve.policy: ckpt is not a checkpoint folder"):
        _plan(tmp_path, SIM + SERVE)
    remote = SIM + SERVE + '[gpus.box]\nhost = "gpu-box"\nroles = ["inference_server"]\n'
    with pytest.raises(ConfigError, match=r"gpus.box.host: 'gpu-box' is another machine"):
        _plan(tmp_path, remote)
    with pytest.raises(ConfigError, match=r"robots.a.curve_keys: .*client.key_secret does not exist"):
        _plan(tmp_path, SIM + 'curve_keys = "nokeys"\n' + SERVE)
    with pytest.raises(ConfigError, match=r"learn.preset: 'huge' is not a preset of hil-flow \(default"):
        _plan(tmp_path, ACTOR + LEARN + 'preset = "huge"\n')
    with pytest.raises(ConfigError, match=r"learn.overrides.batch: not a field of hil-flow's preset"):
        _plan(tmp_path, ACTOR + LEARN + "overrides = {batch = 3}\n")


def test_plan_wires_every_role_from_the_fleet_file(tmp_path, tiny_flow):
    tiny_flow(cameras=()).save(tmp_path / "ckpt")
    text = REAL.replace("[robots.a]", "[robots.arm]") + 'id = "f1"\ntask = "stack the cups"\nepisodes = 5\n'
    text += '[cameras.front]\nindex = 3\nrobot = "arm"\n' + ACTOR.replace("[robots.a]", "[robots.sim1]")
    text += "budget_ticks = 90\ntaper_episodes = 12\n"
    text += f'[serve]\npolicy = "{tmp_path / "ckpt"}"\n[learn]\nalgo = "sac"\nonline_ratio = 0.25\n'
    text += '[gpus.box]\nindex = 2\nroles = ["inference_server"]\n'
    bringup = _plan(tmp_path, text)
    assert [r.name for r in bringup.roles] == ["learn", "serve", "robots.arm", "robots.sim1"]
    learn, serve, arm, sim = bringup.roles
    assert (serve.after, arm.after, sim.after) == (("learn",), ("serve",), ("serve", "learn"))
    assert serve.info["device"] == "cuda:2"  # the fleet's inference_server GPU on this machine
    assert serve.info["policy"] == str(tmp_path / "run" / "learner" / "served")  # the learner's copy
    ports = {name: int(endpoint.rsplit(":", 1)[1]) for name, endpoint in bringup.endpoints.items()}
    assert len({ports["serve"], ports["transitions"], ports["weights"], ports["weights"] + 1}) == 4
    job = json.loads(Path(arm.launch.command(0)[-1]).read_text())  # robotrl actor --config FILE
    assert job["arm"]["robot"] == "so101" and job["arm"]["port"] == "/dev/ttyACM0" and job["arm"]["robot_id"] == "f1"
    assert json.loads(job["arm"]["cameras"])["front"]["index_or_path"] == 3  # through Fleet.arm
    assert (job["arm"]["task"], job["episodes"], job["transitions"]) == ("stack the cups", 5, None)  # deploy client
    assert job["server"] == bringup.endpoints["serve"] and job["intervention"]["who"] == "none"
    job = json.loads(Path(sim.launch.command(0)[-1]).read_text())
    assert job["transitions"] == bringup.endpoints["transitions"] and job["intervention"]["who"] == "scripted"
    assert (job["intervention"]["budget_ticks"], job["intervention"]["taper_episodes"]) == (90, 12)
    assert job["arm"]["robot_id"] == "sim1" and job["seed"] == 100_000  # the second arm's seeds
    assert job["log"].endswith("robots/sim1/episodes.0.csv")
    served = tmp_path / "run" / "learner" / "served" / "config.json"
    served.parent.mkdir(parents=True)
    served.write_text("{}")
    learner = json.loads(Path(learn.launch.command(1)[-1]).read_text())
    assert learner["resume"] is True and learner["algo"] == "sac" and not served.exists()  # a restart resumes
    assert learner["online_ratio"] == 0.25
    for role in bringup.roles:
        role.probe.close()


def test_up_help_and_a_bad_fleet_file(tmp_path, capsys):
    from robotrl.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["up", "--help"])
    assert exc.value.code == 0
    options = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("--")]
    assert options and all(len(line.split()) >= 2 for line in options)
    bad = tmp_path / "bad.toml"
    bad.write_text(SIM + "episodes = 0\n" + SERVE)
    assert main(["up", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("robotrl up: error: ") and "robots.a.episodes: must be at least 1" in err
    assert len(err.strip().splitlines()) == 1


def test_algorithm_names_match_the_registry():
    from robotrl.learn.registry import ALGORITHMS as REGISTERED

    assert ALGORITHMS == REGISTERED


def test_example_fleets_parse():
    sim = load_fleet(EXAMPLES / "fleet-sim.toml")
    assert [(r.name, r.arm_role, r.stepped_delay) for r in sim.robots] == [("left", "actor", 2), ("right", "actor", 2)]
    assert sim.serve is not None and sim.serve.policy == "outputs/demo/policy_weak"
    assert sim.learn is not None and sim.learn.algo == "hil-flow"
    real = load_fleet(EXAMPLES / "fleet.toml")
    assert real.serve is not None and real.serve.port == 5555 and real.learn is None
    assert [r.arm_role for r in real.robots] == ["deploy_client", "deploy_client"]


def test_backoff_doubles_to_its_cap():
    # 0.5 * 2 ** (n - 1) s, capped at 4 s
    assert [backoff_s(n) for n in (1, 2, 3, 4, 5, 6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


# -- the example fleet, brought up for real ---------------------------------------------------


def _status(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _wait(path: Path, proc: subprocess.Popen, ok, timeout_s: float, what: str) -> dict:
    """The first status for which `ok(status)` holds; fails after `timeout_s` or if `up` exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"robotrl up exited with {proc.returncode} while waiting for {what}"
        status = _status(path)
        if status.get("roles") and ok(status):
            return status
        time.sleep(0.1)
    raise AssertionError(f"no {what} within {timeout_s} s; last status: {json.dumps(_status(path), indent=1)}")


def _stop(up: subprocess.Popen, log) -> None:
    """Kill what is left of a `robotrl up` started in its own session, close its log."""
    if up.poll() is None:
        os.killpg(up.pid, signal.SIGKILL)
        up.wait()
    log.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")


def _check_health(status: dict) -> None:
    """Runtime health in the status file: each arm's loop and command age (stepped
    simulated arms: no motor bus, no cameras for a state-only policy), the server's
    queue, batches and chunk latency, the learner's buffer, all on the CPU here."""
    for name in ("robots.left", "robots.right"):
        arm = status["roles"][name]["report"]
        assert arm["arm_state"] == "up" and 0.0 <= arm["command_age_s"] < 2.0
        assert arm["control_rate_hz"] >= 0 and arm["missed_ticks"] == 0  # a simulated clock never overruns
        assert (arm["bus_errors"], arm["temperature_c_max"], arm["cameras"]) == (None, None, {})
    serve, learn = status["roles"]["serve"]["report"], status["roles"]["learn"]["report"]
    assert 0.0 < serve["chunk_ms_p50"] <= serve["chunk_ms_p99"] and serve["batch_size"] >= 1.0
    assert serve["queued_requests"] >= 0 and serve["gpu"]["device"] == learn["gpu"]["device"] == "cpu"
    assert learn["buffer_samplable"] is not None and "intervention_rate" in learn


def test_up_runs_the_sim_fleet_restarts_a_killed_actor_and_stops_cleanly(tmp_path, tiny_flow):
    # the example's policy (cwd-relative), untrained and state-only: nothing to render
    tiny_flow(cameras=()).save(tmp_path / "outputs" / "demo" / "policy_weak")
    text = (EXAMPLES / "fleet-sim.toml").read_text()
    assert len(re.findall(r"^episodes = \d+", text, flags=re.M)) == 2
    fleet = tmp_path / "fleet-sim.toml"  # the example, with arms that run until stopped
    fleet.write_text(re.sub(r"^episodes = \d+", "episodes = 100000", text, flags=re.M))
    status_file = tmp_path / "status.json"
    log = (tmp_path / "up.log").open("w")
    up = subprocess.Popen(
        [sys.executable, "-m", "robotrl.cli", "up", str(fleet), "--out", "run", "--status", str(status_file)],
        cwd=tmp_path,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    pids: set[int] = set()
    try:
        started = time.monotonic()

        def running(s: dict) -> bool:
            roles = s["roles"]
            pids.update(r["pid"] for r in roles.values() if r["pid"])
            arms = [roles["robots.left"], roles["robots.right"]]
            served = roles["serve"]["report"].get("chunk_ms_p50") is not None  # the probe's report lags up to 1.5 s
            all_up = all(r["state"] == "up" for r in roles.values())
            return all_up and served and all(a["report"]["episodes"] >= 2 for a in arms)

        status = _wait(status_file, up, running, 90, "every role up with episodes")
        assert set(status["roles"]) == {"learn", "serve", "robots.left", "robots.right"}
        assert status["first_chunk_s"] is not None and status["first_chunk_s"] < time.monotonic() - started
        left, right = status["roles"]["robots.left"], status["roles"]["robots.right"]
        assert left["restarts"] == right["restarts"] == 0
        _check_health(status)

        os.kill(left["pid"], signal.SIGKILL)  # the arm's process dies; its role must come back
        killed = time.monotonic()

        def left_back(s: dict) -> bool:
            pids.update(r["pid"] for r in s["roles"].values() if r["pid"])
            new = s["roles"]["robots.left"]
            return new["restarts"] == 1 and new["state"] == "up" and new["pid"] != left["pid"]

        status = _wait(status_file, up, left_back, 30, "the killed actor restarted and up")
        back_s = time.monotonic() - killed
        exit_info = status["roles"]["robots.left"]["last_exit"]
        assert exit_info["code"] == -signal.SIGKILL
        assert 0.5 <= exit_info["restarted_at_s"] - exit_info["at_s"] < 1.0  # the first backoff, 0.5 s
        other = status["roles"]["robots.right"]
        assert other["pid"] == right["pid"] and other["restarts"] == 0 and other["state"] == "up"
        assert other["report"]["episodes"] > right["report"]["episodes"]  # the other arm kept running
        print(f"killed actor back up after {back_s:.2f} s: {exit_info}")

        os.kill(other["pid"], signal.SIGSTOP)  # alive but quiet: marked down
        frozen = time.monotonic()
        try:
            _wait(status_file, up, lambda s: s["roles"]["robots.right"]["state"] == "down", 4.5, "a quiet arm down")
            down_s = time.monotonic() - frozen  # <= 2 s quiet + one status period
        finally:
            os.kill(other["pid"], signal.SIGCONT)
        _wait(status_file, up, lambda s: s["roles"]["robots.right"]["state"] == "up", 10, "the arm up again")
        print(f"quiet arm marked down after {down_s:.2f} s; first chunk {status['first_chunk_s']} s after start")

        up.send_signal(signal.SIGTERM)
        stopping = time.monotonic()
        assert up.wait(timeout=60) == 0
        stop_s = time.monotonic() - stopping
    finally:
        _stop(up, log)
    print(f"stopped in {stop_s:.2f} s")
    assert stop_s < 30
    final = _status(status_file)
    assert final["phase"] == "stopped"
    assert {name: r["state"] for name, r in final["roles"].items()} == dict.fromkeys(final["roles"], "stopped")
    assert len(pids) >= 5 and not [pid for pid in pids if _alive(pid)]  # nothing left behind
    learner = tmp_path / "run" / "learner"
    assert (learner / "checkpoint" / "meta.json").is_file()  # the learner stopped with its checkpoint
    assert (tmp_path / "run" / "robots" / "left" / "episodes.1.csv").is_file()  # the restart's own log
