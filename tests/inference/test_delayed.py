"""Injected inference delay on the deploy path: `robotrl.inference.delayed` and
`robotrl deploy/serve --delay-ticks`."""

from __future__ import annotations

import numpy as np
import pytest

from robotrl.core.config import load_config, save_config
from robotrl.core.policy import ActionChunk, PolicyMetadata, PolicyObservation
from robotrl.inference import delayed as delayed_module
from robotrl.inference.delayed import DelaySpec, delayed
from robotrl.inference.server import ServeJob, ServerConfig


def observation(tick: int) -> PolicyObservation:
    return PolicyObservation(state_rad=np.zeros(6), images={}, instruction="", tick=tick, delay_ticks=0)


class Batched:
    """Answers a batch in one call (rows: the state), recording each call's batch size."""

    metadata = PolicyMetadata("echo", 1, 6, 30.0, 6)

    def __init__(self) -> None:
        self.batches: list[int] = []

    def predict_chunks(self, observations: list[PolicyObservation]) -> list[ActionChunk]:
        self.batches.append(len(observations))
        return [ActionChunk(obs.state_rad[None], obs.tick) for obs in observations]

    def reset(self) -> None:
        pass


class OneByOne(Batched):
    """The same without a batched call: the wrapper calls it once per observation."""

    predict_chunks = None  # type: ignore[assignment]

    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
        return Batched.predict_chunks(self, [obs])[0]


@pytest.mark.parametrize("inner", [Batched, OneByOne])
def test_a_batch_of_several_robots_requests_is_held_once(inner, monkeypatch):
    """Three robots' requests in one batch wait d ticks together, not 3 d: one sleep of
    (d - 1/2) ticks less the model's own time, whether the policy batches or not."""
    slept: list[float] = []
    monkeypatch.setattr(delayed_module.time, "sleep", slept.append)
    policy = inner()
    wrapped = delayed(policy, DelaySpec(4, 4), dt_s=0.1, seed=0)
    chunks = wrapped.predict_chunks([observation(t) for t in (10, 11, 12)])
    assert [c.start_tick for c in chunks] == [10, 11, 12]
    assert policy.batches == ([3] if inner is Batched else [1, 1, 1])
    assert len(slept) == 1 and 0.3 < slept[0] <= 0.35  # 3.5 ticks of 0.1 s, less the model's microseconds
    assert wrapped.predict_chunk(observation(20)).start_tick == 20 and len(slept) == 2


def test_a_jittered_delay_is_drawn_per_call_from_its_range(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(delayed_module.time, "sleep", slept.append)
    wrapped = delayed(Batched(), DelaySpec(2, 6), dt_s=1.0, seed=3)
    for tick in range(200):
        wrapped.predict_chunk(observation(tick))
    ticks = np.round(np.asarray(slept) + 0.5).astype(int)  # each sleep is d - 1/2 s less microseconds
    assert set(ticks) == {2, 3, 4, 5, 6}
    assert abs(ticks.mean() - 4.0) < 0.3


def test_a_serve_job_keeps_its_delay_through_its_config_file(tmp_path):
    job = ServeJob(tmp_path / "ckpt", ServerConfig(), delay=DelaySpec(6, 10))
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
