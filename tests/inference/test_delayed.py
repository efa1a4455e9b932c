"""Injected inference delay on the deploy path: the server's `ReplyHold` and `robotrl
deploy/serve --delay-ticks`."""

from __future__ import annotations

import time

import numpy as np
import pytest
from server_doubles import request

from robotrl.core.config import load_config, save_config
from robotrl.core.policy import ActionChunk, PolicyMetadata, PolicyObservation
from robotrl.inference import server as server_module
from robotrl.inference.delayed import DelaySpec, ReplyHold
from robotrl.inference.server import PolicyServer, ServeJob, ServerConfig, _Pending
from robotrl.wire.client import ClientSocket


class FakeClock:
    """Stands in for the server module's `time`: `sleep` moves the clock on."""

    def __init__(self) -> None:
        self.now_ns = 10**12

    def perf_counter_ns(self) -> int:
        return self.now_ns

    def sleep(self, seconds: float) -> None:
        self.now_ns += round(seconds * 1e9)

    monotonic, monotonic_ns = staticmethod(time.monotonic), staticmethod(time.monotonic_ns)


class Batched:
    """Answers a batch in one call, recording each call's size; the call takes `compute_s`
    on the fake clock."""

    metadata = PolicyMetadata("echo", 1, 6, 30.0, 6)

    def __init__(self, clock: FakeClock, compute_s: float) -> None:
        self.clock, self.compute_s = clock, compute_s
        self.batches: list[int] = []

    def predict_chunks(self, observations: list[PolicyObservation]) -> list[ActionChunk]:
        self.batches.append(len(observations))
        self.clock.sleep(self.compute_s)
        return [ActionChunk(obs.state_rad[None], obs.tick) for obs in observations]

    def reset(self) -> None:
        pass


@pytest.mark.parametrize("compute_s", [0.02, 0.5])
def test_each_reply_goes_out_d_ticks_after_its_own_request_arrived(compute_s, monkeypatch):
    """Three robots' requests in one batch: one model call, one d for all, each reply held
    to (d - 1/2) ticks after its own request's arrival (the model's time counts toward it);
    a model slower than that answers when it is done."""
    clock = FakeClock()
    monkeypatch.setattr(server_module, "time", clock)
    policy = Batched(clock, compute_s)
    server = PolicyServer(policy, ServerConfig(), hold=ReplyHold(DelaySpec(4, 4), dt_s=0.1, seed=0))
    sent: list[tuple[int, int]] = []
    server._reply = lambda identity, reply: sent.append((reply.request_id, clock.now_ns))
    arrived = {i: clock.now_ns - age_ms * 1_000_000 for i, age_ms in ((1, 10), (2, 5), (3, 0))}
    server._answer_valid([_Pending(b"", request(f"arm{i}", i, np.zeros(6)), arrived[i]) for i in (3, 1, 2)])
    assert policy.batches == [3]
    done_ns = arrived[3] + round(compute_s * 1e9)
    assert sent == [(i, max(arrived[i] + 350_000_000, done_ns)) for i in (1, 2, 3)]


def test_a_jittered_delay_is_drawn_per_model_call_from_its_range():
    hold = ReplyHold(DelaySpec(2, 6), dt_s=1.0, seed=3)
    ticks = np.asarray([hold.draw_ns() for _ in range(200)]) / 1e9 + 0.5
    assert set(ticks) == {2, 3, 4, 5, 6}
    assert abs(ticks.mean() - 4.0) < 0.3 and hold.mean_s == 3.5


class SlowEncoder:
    """A fast/slow policy trained on fresh latents (every request encodes its frame): the
    encoding takes 150 ms, the fast pathway nothing."""

    metadata = PolicyMetadata("slow-encoder", 1, 6, 10.0, 6, ("front",), 4, max_latent_age_ticks=0)

    def encode_slow(self, obs: PolicyObservation) -> float:
        time.sleep(0.15)
        return 0.0

    def predict_chunk(self, obs: PolicyObservation, latent=None, latent_age_ticks: int = 0) -> ActionChunk:
        return ActionChunk(obs.state_rad[None], obs.tick + obs.delay_ticks)

    def reset(self) -> None:
        pass


def test_a_slow_pathway_encoding_counts_toward_the_held_delay():
    """Over real sockets: d = 4 at 10 Hz is a reply 350 ms after the request, the 150 ms
    encoding included (held from the model call's start instead, it took 500 ms); the hello
    tells the robot as much, so its first estimate of d is already 4."""
    config = ServerConfig(endpoint="tcp://127.0.0.1:*", warmup_calls=0)
    with PolicyServer(SlowEncoder(), config, hold=ReplyHold(DelaySpec(4, 4), dt_s=0.1, seed=0)) as server:
        with ClientSocket(server.endpoint, robot_id="arm") as client:
            info = client.connect(timeout_s=5)
            round_trips = []
            for i in range(3):
                req = request("arm", i, np.zeros(6), tick=10 * i)
                req.images = {"front": np.zeros((4, 4, 3), np.uint8)}
                start = time.perf_counter()
                client.request(req, 5)
                round_trips.append(time.perf_counter() - start)
    assert info["model_ms"] == pytest.approx(350.0)
    assert all(0.349 < rtt < 0.45 for rtt in round_trips), round_trips


def test_a_serve_job_keeps_its_delay_through_its_config_file(tmp_path):
    """With new weights from a learner too (the held server taking them:
    tests/wire/test_weights.py)."""
    job = ServeJob(tmp_path / "ckpt", ServerConfig(weights_from="tcp://127.0.0.1:5561"), delay=DelaySpec(6, 10))
    assert load_config(ServeJob, save_config(job, tmp_path / "serve.json")) == job
    assert load_config(ServeJob, save_config(ServeJob(tmp_path), tmp_path / "plain.json")).delay is None


def test_deploy_with_a_delay_runs_the_arm_with_its_replies_that_many_ticks_late(tmp_path, tiny_flow, capsys):
    """The local server holds each reply to 3 ticks: the arm's own meter says 3 (the tiny
    policy answers within a tick without it)."""
    from robotrl.cli import main

    checkpoint = tmp_path / "ck"
    tiny_flow().save(checkpoint)
    args = ["deploy", "--robot", "sim", "--task", "reach", "--policy", str(checkpoint), "--episodes", "1"]
    args += ["--max-seconds", "2", "--mode", "vlash"]
    delays = {}
    for held in (None, "3"):
        assert main(args if held is None else [*args, "--delay-ticks", held]) == 0
        out = capsys.readouterr().out
        line = next(line for line in out.splitlines() if line.startswith("inference delay (ticks)"))
        delays[held] = float(line.split()[4])  # "inference delay (ticks): p50 3  p95 3  max 4"
    assert delays[None] <= 1 and delays["3"] == 3
