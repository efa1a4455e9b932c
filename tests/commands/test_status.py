"""`robotrl up`'s status table: one row per role with what it reports (server queue, batch,
chunk latency; learner updates/s, buffer, staleness, intervention rate; an arm's rate,
missed ticks, command age, bus errors, motors), short rows for GPUs and cameras, "-" for
what a role cannot know, and off a terminal a new table when a camera goes down."""

from __future__ import annotations

import io

from robotrl.bringup.probes import health_summary
from robotrl.bringup.status import LiveTable, status_table
from robotrl.bringup.supervisor import QUIET_S
from robotrl.core.health import STALE_S, arm_report, gpu_report

GIB = 2**30


def _role(kind: str, report: dict, state: str = "up") -> dict:
    return {"kind": kind, "state": state, "pid": 42, "restarts": 0, "uptime_s": 12.0, "quiet_s": 0.2, "report": report}


def _status() -> dict:
    server = health_summary(
        {
            "version": 7,
            "batches_per_s": 6.25,
            "queued_requests": 1,
            "batch_size": 1.5,
            "chunk_ms": {"p50": 12.4, "p99": 31.0},
            "threads_alive": {"io": True, "model": True},
            "errors": {},
            "gpu": gpu_report("cuda:0", 60 * GIB, 80 * GIB, 35.0),
            "learner": {"connected": True},
        }
    )
    learner = {
        "updates": 800,
        "updates_per_s": 12.04,
        "version": 7,
        "transitions": 12000,
        "staleness_mean": 0.8,
        "intervention_rate": 0.125,
        "episodes": 9,
        "gpu": gpu_report("cpu"),
    }
    motors = {
        "shoulder_pan": {"temperature_c": 35.0, "voltage_v": 12.0},
        "gripper": {"temperature_c": 41.0, "voltage_v": 11.9},
    }
    real = {
        "last_command_monotonic_s": 99.97,
        "bus_errors": 1,
        "motors": motors,
        "cameras": {
            "front": {"fps": 30.0, "frame_monotonic_s": 99.95},
            "wrist": {"fps": 0.0, "frame_monotonic_s": 97.0},
        },
    }
    arm = {"episodes": 3, "episodes_planned": 10, "successes": 1, "control_rate_hz": 29.8, "missed_ticks": 2}
    sim = {"last_command_monotonic_s": 99.5, "bus_errors": None, "motors": None, "cameras": {}}
    return {
        "phase": "running",
        "uptime_s": 14.2,
        "first_chunk_s": 3.14,
        "roles": {
            "learn": _role("learner", learner),
            "serve": _role("server", server),
            "robots.real": _role("robot", {**arm, "paused_ticks": 4, "version": 7, **arm_report(real, 100.0)}),
            "robots.sim": _role("robot", {**arm, "version": 7, **arm_report(sim, 100.0)}),
        },
    }


def test_the_table_shows_each_roles_health_with_gpu_and_camera_rows():
    lines = status_table(_status()).splitlines()
    assert lines[0] == "robotrl up: running, 14 s; first chunk after 3.1 s"
    labels = [line.strip().split("  ")[0] for line in lines[3:]]
    assert labels == ["learn", "gpu", "serve", "gpu", "robots.real", "camera front", "camera wrist", "robots.sim"]
    rows = dict(zip(labels, lines[3:]))
    learn, serve = lines[3], lines[5]
    assert learn.endswith("updates 800 (12.0/s)  version 7  buffer 12000  staleness 0.8  intervention 12%  episodes 9")
    assert lines[4].startswith("  gpu ") and lines[4].endswith("  cpu (no GPU)")
    assert "version 7  queue 1  batch 1.5  chunk p50 12 ms p99 31 ms  batches/s 6.25  threads 2/2" in serve
    assert serve.endswith("learner up")
    assert lines[6].endswith("cuda:0  memory 20.0/80.0 GiB  util 35%")  # 60 GiB free of 80
    real = rows["robots.real"]
    assert "29.8" not in real and "30 Hz  missed 2  paused 4  command age 0.03 s  bus errors 1" in real
    assert "motors 41 C 11.9 V" in real  # the hottest motor, the lowest voltage
    front, wrist = rows["camera front"], rows["camera wrist"]
    assert front.split()[2] == "up" and front.endswith("  30.0 fps  frame age 0.05 s")
    assert wrist.split()[2] == "down" and wrist.endswith("  0.0 fps  frame age 3.00 s")  # 3 s > 2 s: down
    sim = rows["robots.sim"]
    assert "command age 0.50 s  bus errors -  motors - -" in sim  # nothing to read on a simulated arm
    assert "ARM DOWN" not in status_table(_status())


def test_an_arm_that_stopped_commanding_is_marked_down_in_its_row():
    status = _status()
    report = status["roles"]["robots.sim"]["report"]
    report.update(arm_report({"last_command_monotonic_s": 97.0, "cameras": {}}, 100.0))
    row = next(line for line in status_table(status).splitlines() if line.startswith("robots.sim"))
    assert "ARM DOWN: episodes 3/10" in row and "command age 3.00 s" in row
    status["roles"]["robots.sim"]["state"] = "done"  # its episodes all ran: not down, only quiet
    row = next(line for line in status_table(status).splitlines() if line.startswith("robots.sim"))
    assert "ARM DOWN" not in row and "episodes 3/10" in row and "command age 3.00 s" in row


def test_off_a_terminal_a_camera_going_down_prints_a_new_table():
    assert STALE_S == QUIET_S  # cameras and arms go down when roles do
    out = io.StringIO()
    table = LiveTable(out)
    status = _status()
    table.show(status)
    table.show(status)  # nothing changed: not printed again
    assert out.getvalue().count("robotrl up:") == 1
    cameras = status["roles"]["robots.real"]["report"]["cameras"]
    cameras["front"] = {**cameras["front"], "state": "down"}
    table.show(status)
    assert out.getvalue().count("robotrl up:") == 2
