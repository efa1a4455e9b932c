"""`--device` on every command that runs a model: one clear line and exit 2 for a value of
no known form or a GPU this machine lacks (before anything heavy starts), and the chosen
device printed at the start."""

from __future__ import annotations

import json

import pytest
import torch

from robotrl.cli import main

NO_GPU = not torch.cuda.is_available()
BAD = [
    ("tpu", "'tpu' is not one of auto, cpu, cuda or cuda:N"),
    ("cuda:99", "--device cuda:99: this machine has"),
]


def _commands(tmp_path) -> dict[str, list[str]]:
    ckpt = str(tmp_path / "ckpt")
    return {
        "serve": ["serve", "--policy", ckpt, "--bind", "tcp://127.0.0.1:*"],
        "train": ["train", "--dataset", str(tmp_path / "no_dataset"), "--out", str(tmp_path / "out")],
        "learner": ["learner", "--algo", "sac", "--buffer", str(tmp_path / "buf"), "--out", str(tmp_path / "run")],
        "bench serve": ["bench", "serve", "--policy", ckpt, "--out", str(tmp_path / "bench")],
        "bench policy": ["bench", "policy", "--policy", ckpt, "--out", str(tmp_path / "bench")],
        "bench learner": ["bench", "learner", "--out", str(tmp_path / "bench")],
        "bench latency": ["bench", "latency", "--policy", ckpt, "--out", str(tmp_path / "bench")],
    }


@pytest.mark.parametrize("value, message", BAD)
@pytest.mark.parametrize("command", ["serve", "train", "learner", "bench serve", "bench policy", "bench learner"])
def test_a_bad_device_is_one_clear_line(command, value, message, tmp_path, capsys, tiny_flow):
    tiny_flow().save(tmp_path / "ckpt")
    assert main([*_commands(tmp_path)[command], "--device", value]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists() and not (tmp_path / "bench").exists()  # nothing started


def test_bench_latency_resolves_the_device_of_its_checkpoint(tmp_path, capsys, tiny_flow):
    tiny_flow().save(tmp_path / "ckpt")
    assert main([*_commands(tmp_path)["bench latency"], "--device", "tpu"]) == 2
    assert "not one of auto, cpu, cuda or cuda:N" in capsys.readouterr().err


@pytest.mark.skipif(not NO_GPU, reason="checks the CPU-only machine")
def test_cuda_without_a_gpu_says_so(tmp_path, capsys, tiny_flow):
    tiny_flow().save(tmp_path / "ckpt")
    assert main([*_commands(tmp_path)["serve"], "--device", "cuda"]) == 2
    assert "--device cuda: this machine has no CUDA GPU; use --device auto or cpu" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["serve", "learner"])
def test_a_child_config_with_a_bad_device_is_one_clear_line(kind, tmp_path, capsys):
    """The launcher's JSON job configs carry the device; a bad one is refused on reading."""
    from robotrl.core.config import save_config
    from robotrl.inference.server import ServeJob
    from robotrl.learn.job import LearnerJob
    from robotrl.learn.learner import LearnerConfig

    job = (
        ServeJob(tmp_path / "ckpt")
        if kind == "serve"
        else LearnerJob("sac", tmp_path / "buf", LearnerConfig(out=tmp_path / "run"))
    )
    path = save_config(job, tmp_path / f"{kind}.json")
    doc = json.loads(path.read_text())
    assert doc["device"] == "auto"
    doc["device"] = "tpu"
    path.write_text(json.dumps(doc))
    assert main([kind, "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "device 'tpu' is not one of auto, cpu, cuda or cuda:N" in err and "Traceback" not in err


def test_serve_prints_the_device_it_chose(tmp_path, capsys, tiny_flow, monkeypatch):
    """`serve --device cpu`: the start line, then the server (stopped by its first status)."""
    from robotrl.commands import serve

    tiny_flow().save(tmp_path / "ckpt")
    monkeypatch.setattr(serve, "_report_until_stopped", lambda server: 0)
    assert main([*_commands(tmp_path)["serve"], "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "device for the inference_server: cpu (asked for)" in out and "serving fastslow_flow" in out
