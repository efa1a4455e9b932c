"""CLI smoke tests: `main([...])` in-process with tiny budgets."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from robotrl.cli import main


def test_help_is_fast_and_lists_every_command():
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "robotrl.cli", "--help"], capture_output=True, text=True, check=True)
    assert time.perf_counter() - start < 5.0  # lazy imports: no torch, mujoco or lerobot
    for command in (
        "devices",
        "sim",
        "record",
        "train",
        "serve",
        "deploy",
        "actor",
        "learner",
        "learn",
        "bench",
        "keys",
        "demo",
    ):
        assert command in out.stdout


BENCHES = ["sim", "record", "transport", "serve", "policy", "buffer", "learner", "latency", "sim2sim"]


@pytest.mark.parametrize(
    "command",
    [
        "sim",
        "record",
        "train",
        "serve",
        "deploy",
        "actor",
        "learner",
        "learn",
        "keys",
        "demo",
        "devices",
        *(f"bench {name}" for name in BENCHES),
    ],
)
def test_every_option_has_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*command.split(), "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    options = [line for line in text.splitlines() if line.strip().startswith("--")]
    assert options, text
    for line in options:  # "--flag VALUE   help text" or the help on the next line
        assert len(line.split()) >= 2 or line.strip().endswith("]"), f"{command}: {line!r} has no help"


def test_sim_expert_runs_and_reports(capsys):
    assert main(["sim", "--task", "reach", "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "success 2/2" in out


def test_sim_writes_video_and_png(tmp_path):
    video, pngs = tmp_path / "run.mp4", tmp_path / "png"
    assert (
        main(
            [
                "sim",
                "--task",
                "reach",
                "--episodes",
                "1",
                "--image-size",
                "48",
                "--video",
                str(video),
                "--png",
                str(pngs),
            ]
        )
        == 0
    )
    assert video.stat().st_size > 1000
    png = next(pngs.glob("*.png"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["sim", "--task", "juggle"], "unknown task 'juggle'"),
        (["sim", "--policy", "oracle"], "unknown policy 'oracle'"),
        (["sim", "--arm", "ur5"], "unknown robot model 'ur5'"),
        (["deploy", "--task", "reach"], "give --policy CKPT"),
        (["deploy", "--policy", "/nonexistent/ckpt"], "does not exist"),
        (["deploy", "--robot", "so101", "--server", "tcp://127.0.0.1:1"], "needs --port"),
        (["deploy", "--mode", "telepathic", "--server", "tcp://127.0.0.1:1"], "unknown mode"),
        (
            [
                "actor",
                "--robot",
                "so101",
                "--port",
                "/dev/null",
                "--intervene",
                "scripted",
                "--server",
                "tcp://127.0.0.1:1",
            ],
            "scripted interventions and --stepped-delay are for simulated arms",
        ),
        (["learn", "--task", "reach"], "needs --policy CKPT"),
        (["learner", "--algo", "sac"], "give --buffer and --out"),
        (["learner", "--config", "/nonexistent/learner.json"], "cannot read the config file"),
        (["record", "--robot", "so101", "--root", "/tmp/never-created-robotrl"], "needs --port"),
        (["record", "--twin", "/tmp/twin.json", "--root", "/tmp/never-created-robotrl"], "--twin is an so101"),
        (
            ["record", "--robot", "so101", "--twin", "/tmp/twin.json", "--port", "/dev/null", "--root", "/tmp/r"],
            "come from its info file: give none",
        ),
        (
            ["record", "--robot", "so101", "--twin", "/nonexistent/twin.json", "--root", "/tmp/never-created-robotrl"],
            "no running twin's info file there",
        ),
    ],
)
def test_bad_input_is_one_clear_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_deploy_to_a_missing_server_times_out_clearly(capsys):
    # nothing listens on port 1: the client gives up after its connect timeout (3 s)
    start = time.perf_counter()
    assert main(["deploy", "--server", "tcp://127.0.0.1:1", "--task", "reach"]) == 2
    assert "no hello from a server" in capsys.readouterr().err
    assert time.perf_counter() - start < 5.0


def test_bench_sim_writes_results(tmp_path, capsys):
    assert main(["bench", "sim", "--repeats", "1", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "sim" / "results.json").read_text())
    assert results["raw_mj_step_per_s"] > 1000 and results["control_steps_per_s"] > 100
    assert results["render_fps_224"] > 1


@pytest.mark.slow
def test_demo_runs_every_stage_with_tiny_budgets(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    out = tmp_path / "demo"
    assert (
        main(
            [
                "demo",
                "--out",
                str(out),
                "--episodes",
                "1",
                "--record-episodes",
                "3",
                "--train-minutes",
                "0.2",
                "--deploy-episodes",
                "1",
                "--latency-episodes",
                "1",
                "--online-episodes",
                "2",
                "--eval-episodes",
                "1",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    for stage in range(1, 7):
        assert f"stage {stage}/6" in text
    assert (out / "dataset" / "meta" / "info.json").is_file()
    assert (out / "policy" / "model.safetensors").is_file()
    assert (out / "bench" / "latency" / "report.md").is_file()
    assert "inference delay (ticks)" in text  # the deploy stage ran over the local server
    assert len((out / "online" / "actors.csv").read_text().splitlines()) == 3  # header + 2 online episodes
    assert (out / "online" / "learner" / "checkpoint" / "meta.json").is_file()  # the learner stopped cleanly
    assert "unassisted success in the shifted scenario on 1 evaluation seeds" in text  # before and after
    assert "MISSED" not in text and "target (" not in text  # targets belong to `robotrl bench`


@pytest.mark.parametrize(
    "flags, problem",
    [(["--eval-episodes", "0"], "--eval-episodes must be at least 1"), (["--train-minutes", "0"], "--train-minutes")],
)
def test_demo_rejects_empty_budgets_before_any_stage(tmp_path, capsys, flags, problem):
    assert main(["demo", "--out", str(tmp_path / "demo"), *flags]) == 2
    err = capsys.readouterr().err
    assert problem in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "demo").exists()


def test_each_benchmark_has_only_its_own_options(capsys):
    def options(name: str) -> set[str]:
        with pytest.raises(SystemExit):
            main(["bench", name, "--help"])
        return {word.strip(",") for word in capsys.readouterr().out.split() if word.startswith("--")}

    assert options("transport") == {"--help", "--out", "--repeats"}
    assert "--jitter" in options("latency") and "--jitter" not in options("sim2sim")
    assert "--slow-every" in options("policy") and "--delays" not in options("policy")


def test_bench_policy_needs_a_checkpoint(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "policy"])
    assert exc.value.code == 2 and "--policy" in capsys.readouterr().err


def test_a_truncated_checkpoint_is_one_clear_line(tmp_path, capsys, tiny_flow):
    ckpt = tmp_path / "ckpt"
    tiny_flow().save(ckpt)
    weights = ckpt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    assert main(["serve", "--policy", str(ckpt), "--bind", "tcp://127.0.0.1:*"]) == 2
    err = capsys.readouterr().err
    assert "cannot load the checkpoint" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_serve_refuses_a_taken_or_malformed_endpoint_before_loading_the_model(tmp_path, capsys):
    import zmq

    sock = zmq.Context.instance().socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    try:
        for endpoint in (f"tcp://127.0.0.1:{port}", "tcp://nowhere-at-all"):
            start = time.perf_counter()
            # the checkpoint does not even exist: the endpoint is checked first
            assert main(["serve", "--policy", str(tmp_path / "none"), "--bind", endpoint]) == 2
            err = capsys.readouterr().err
            assert f"cannot bind {endpoint}" in err and "Traceback" not in err
            assert time.perf_counter() - start < 2.0
    finally:
        sock.close(linger=0)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["deploy", "--episodes", "-1", "--server", "tcp://127.0.0.1:1"], "--episodes must be >= 1"),
        (["deploy", "--task", "juggle", "--policy", "/nonexistent/ckpt"], "unknown task 'juggle'"),
        (["deploy", "--scenario", "lunar", "--server", "tcp://127.0.0.1:1"], "unknown scenario 'lunar'"),
        (["deploy", "--in-flight", "0", "--server", "tcp://127.0.0.1:1"], "--in-flight must be >= 1, got 0"),
        (["deploy", "--threshold", "1.5", "--server", "tcp://127.0.0.1:1"], "threshold must be in [0, 1], got 1.5"),
        (["deploy", "--mode", "sync", "--in-flight", "2", "--server", "tcp://127.0.0.1:1"], "1 in the sync modes"),
        (["serve", "--policy", "/nonexistent/ckpt", "--workers", "0"], "--workers must be >= 1, got 0"),
        (["deploy", "--delay-ticks", "4", "--server", "tcp://127.0.0.1:1"], "give them to the `robotrl serve` at"),
        (["deploy", "--noise-scale", "0", "--server", "tcp://127.0.0.1:1"], "give them to the `robotrl serve` at"),
        (["deploy", "--noise-scale", "-1", "--policy", "/nonexistent/ckpt"], "--noise-scale must be >= 0, got -1.0"),
        (["serve", "--policy", "/nonexistent/ckpt", "--noise-scale", "-0.5"], "--noise-scale must be >= 0, got -0.5"),
        (["deploy", "--delay-ticks", "soon", "--policy", "/nonexistent/ckpt"], "--delay-ticks 'soon': give ticks"),
        (["serve", "--policy", "/nonexistent/ckpt", "--delay-ticks", "9-3"], "needs 0 <= low <= high ticks, got 9..3"),
        (["bench", "latency", "--in-flight", "0"], "--in-flight must be at least 1"),
        (["bench", "latency", "--noise-scale", "-1"], "--noise-scale must be >= 0, got -1.0"),
    ],
)
def test_deploy_serve_and_bench_check_their_options_before_starting_anything(argv, message, capsys):
    start = time.perf_counter()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert time.perf_counter() - start < 2.0  # no server started, no connection attempted


@pytest.mark.parametrize("trouble", ["dead thread", "learner refused"])
def test_serve_exits_non_zero_when_a_server_thread_has_died_or_the_learner_is_refused(monkeypatch, capsys, trouble):
    from robotrl.commands import serve
    from robotrl.inference.latency import LatencyStats

    class Troubled:  # what PolicyServer.health() says once its model thread is gone, or weights were refused
        stats, version = LatencyStats(), 3

        def health(self) -> dict:
            dead = trouble == "dead thread"
            return {
                "threads_alive": {"robotrl-server-io": True, "robotrl-server-model": not dead},
                "errors": {"model thread": 1} if dead else {},
                "last_error": "model thread: boom" if dead else "",
                "queued_requests": 0,
                "refused": 0,
                "learner": None if dead else {"connected": False, "failure": "protocol version mismatch: ..."},
            }

    monkeypatch.setattr(serve, "STATUS_EVERY_S", 0.01)
    assert serve._report_until_stopped(Troubled()) == 1
    captured = capsys.readouterr()
    if trouble == "dead thread":
        assert "threads 1/2" in captured.out
        assert "robotrl-server-model stopped (model thread: boom)" in captured.err
    else:
        assert "threads 2/2" in captured.out and "learner LOST" in captured.out
        assert "error: weights: protocol version mismatch" in captured.err


def test_a_crash_in_native_code_leaves_the_python_stack_on_stderr():
    """A command's process that segfaults (here: a read of address 0, as a driver or
    renderer bug would) prints where every thread was before it dies."""
    crash = "import ctypes; from robotrl.cli import report_crashes; report_crashes(); ctypes.string_at(0)"
    done = subprocess.run([sys.executable, "-c", crash], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGSEGV
    assert "Segmentation fault" in done.stderr and 'File "<string>", line 1' in done.stderr
