"""Devices on a CPU-only machine (CI): `--device` values resolve or fail with one line,
robotrl checkpoints load onto the CPU whatever device made them, live weights land on the
model's device, and batched fast/slow chunks come back on the CPU."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from robotrl.core.errors import UserError
from robotrl.core.policy import PolicyObservation
from robotrl.policies.device import module_device, select_device, to_device, torch_device
from robotrl.policies.loading import load_policy

NO_GPU = not torch.cuda.is_available()


def test_cpu_and_auto_resolve_here():
    assert select_device("cpu").device == "cpu"
    assert torch_device("cpu") == torch.device("cpu")
    auto = select_device("auto")
    assert auto.device == ("cpu" if NO_GPU else auto.device) and auto.device.startswith(("cpu", "cuda:"))
    with pytest.raises(UserError, match="--device cuda:99: this machine has"):
        select_device("cuda:99")
    with pytest.raises(UserError, match="not one of auto, cpu, cuda or cuda:N"):
        select_device("tpu")


@pytest.mark.skipif(not NO_GPU, reason="checks the CPU-only machine")
def test_auto_is_the_cpu_and_cuda_is_refused_without_a_gpu():
    assert select_device("auto").line() == "device: cpu (auto: no CUDA GPU)"
    with pytest.raises(UserError, match="--device cuda: this machine has no CUDA GPU"):
        torch_device("cuda")


def test_to_device_keeps_structure_and_leaves():
    tree = {"a": torch.zeros(2), "b": [torch.ones(1), None, "text"], "c": (torch.zeros(1),)}
    moved = to_device(tree, torch.device("cpu"))
    assert moved["a"] is tree["a"] and moved["b"][1:] == [None, "text"] and isinstance(moved["c"], tuple)


def _obs(tick: int = 3, images: dict | None = None) -> PolicyObservation:
    return PolicyObservation(np.array([0.0, -1.2, 1.1, 1.3, 0.0, 0.0]), tick, "reach", images or {}, delay_ticks=1)


def test_a_robotrl_checkpoint_from_a_gpu_run_loads_and_serves_on_the_cpu(tmp_path, tiny_flow):
    """A `train --device cuda` run records its device; the weights file has none (it is
    written from the CPU), and loading maps every tensor to the CPU first."""
    policy = tiny_flow(cameras=("front",))
    folder = tmp_path / "ckpt"
    policy.save(folder, {"step": 7, "train_config": {"device": "cuda:0", "bf16": True}})
    doc = json.loads((folder / "config.json").read_text())
    assert doc["training"]["train_config"]["device"] == "cuda:0"
    image = {"front": np.random.default_rng(0).integers(0, 255, (24, 24, 3), dtype=np.uint8)}
    for device in ("cpu", "auto"):
        loaded = load_policy(folder, device=device)
        assert loaded.device == torch_device(device)  # type: ignore[attr-defined]
        if loaded.device.type == "cpu":  # type: ignore[attr-defined]
            chunk = loaded.predict_chunk(_obs(images=image))
            np.testing.assert_array_equal(chunk.actions_rad, policy.predict_chunk(_obs(images=image)).actions_rad)
            assert isinstance(chunk.actions_rad, np.ndarray)


def test_live_weights_are_copied_onto_the_models_device(tiny_flow):
    policy = tiny_flow()
    other = tiny_flow()
    with torch.no_grad():
        for p in other.model.parameters():
            p.add_(0.5)
    before = [p for p in policy.model.parameters()]
    policy.load_weights(other.weights_bytes())
    assert all(p.device == policy.device for p in policy.model.parameters())
    assert [p for p in policy.model.parameters()] == before  # the same parameters, new values in place
    np.testing.assert_array_equal(policy.predict_chunk(_obs()).actions_rad, other.predict_chunk(_obs()).actions_rad)


def test_learner_checkpoints_hold_cpu_tensors():
    from robotrl.buffer.spec import TransitionSpec
    from robotrl.learn.registry import make_algorithm

    algo = make_algorithm("sac", TransitionSpec(6, 6, {}, 0), preset="tiny", device="cpu")
    state = algo.state_dict()
    assert all(t.device.type == "cpu" for t in state["actor"].values())
    assert all(t.device.type == "cpu" for t in state["optim"]["critic"]["tensors"].values())
    assert module_device(algo.served_policy().actor).type == "cpu"  # type: ignore[attr-defined]
