"""GPU-only checks (skipped without CUDA): the same chunks on a GPU as on the CPU, bf16
autocast's difference, checkpoints across devices, training and learning on the GPU.

`scripts/gpu-bench` runs these first on a GPU machine. `ROBOTRL_GPU_TEST_DEVICE=cpu` runs
them on the CPU instead: a dry run of the test code itself, where every comparison is
trivially met."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from robotrl.core.policy import PolicyObservation
from robotrl.policies.device import autocast, torch_device
from robotrl.policies.loading import load_policy

DEVICE = os.environ.get("ROBOTRL_GPU_TEST_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(DEVICE.startswith("cuda") and not torch.cuda.is_available(), reason="needs a CUDA GPU")
CHUNK_ATOL_RAD = 1e-4
"""fp32 on a GPU against the CPU: kernels sum in other orders (TF32 switched off here)."""
HOME = np.array([0.0, -1.2, 1.1, 1.3, 0.0, 0.0])


def _obs(tick: int = 5, cameras=("front", "wrist"), size: int = 64, prefix: bool = False) -> PolicyObservation:
    rng = np.random.default_rng(tick)
    return PolicyObservation(
        state_rad=HOME + rng.normal(0, 0.05, 6),
        tick=tick,
        instruction="reach",
        images={cam: rng.integers(0, 255, (size, size, 3), dtype=np.uint8) for cam in cameras},
        delay_ticks=2,
        prefix_rad=np.tile(HOME, (6, 1)) if prefix else None,
    )


def _report(name: str, value: float) -> None:
    print(f"[gpu] {name}: {value:.3g}", file=sys.stderr)


@pytest.fixture(autouse=True)
def fp32_kernels():
    """Full fp32 matmuls and convolutions (cuDNN would use TF32), so the comparisons with
    the CPU measure the device path, not TF32's rounding."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _perturbed(policy):
    """The policy with every weight shifted by seeded noise: an untrained model's zero-
    initialised output layers would make its chunk independent of the network."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return policy


@pytest.fixture
def flow(tiny_flow):
    return _perturbed(tiny_flow(cameras=("front", "wrist"), horizon=8, image_size_px=32))


def test_auto_picks_a_gpu_and_says_its_memory():
    from robotrl.policies.device import select_device

    choice = select_device("auto")
    if DEVICE.startswith("cuda"):
        assert choice.device.startswith("cuda:") and "GiB free" in choice.line()
    print(choice.line(), file=sys.stderr)


def test_gpu_health_reports_memory_used_and_total():
    from robotrl.policies.device import gpu_health

    before = gpu_health(DEVICE)
    block = torch.empty(256 * 2**20, dtype=torch.uint8, device=DEVICE)  # 256 MiB more in use
    after = gpu_health(DEVICE)
    print(f"gpu health {before} -> {after}", file=sys.stderr)
    if not DEVICE.startswith("cuda"):
        assert after == {"device": "cpu", "memory_used_mb": None, "memory_total_mb": None, "utilization_pct": None}
        return
    assert after["device"].startswith("cuda:") and 0 < after["memory_used_mb"] < after["memory_total_mb"]
    assert after["memory_used_mb"] - before["memory_used_mb"] >= 200  # the whole GPU: this process's 256 MiB at least
    assert after["utilization_pct"] is None or 0 <= after["utilization_pct"] <= 100
    del block


def test_fastslow_chunks_on_the_gpu_equal_the_cpus(flow, tiny_flow):
    cpu = [flow.predict_chunk(_obs(t, prefix=t % 2 == 1)).actions_rad for t in range(4)]
    untrained = tiny_flow(cameras=("front", "wrist"), horizon=8, image_size_px=32).predict_chunk(_obs(0))
    assert np.abs(untrained.actions_rad - cpu[0]).max() > 1e-3  # the chunk depends on the network
    gpu_policy = flow.to(DEVICE)
    assert gpu_policy.device.type == torch_device(DEVICE).type
    worst = 0.0
    for t in range(4):
        chunk = gpu_policy.predict_chunk(_obs(t, prefix=t % 2 == 1))  # t odd: RTC guidance on the device
        assert isinstance(chunk.actions_rad, np.ndarray)
        worst = max(worst, float(np.abs(chunk.actions_rad - cpu[t]).max()))
    _report("fastslow fp32 GPU vs CPU max |diff| rad", worst)
    assert worst < CHUNK_ATOL_RAD
    observations = [_obs(t) for t in range(4)]
    latents = [gpu_policy.encode_slow(o) for o in observations]
    assert latents[0].device.type == torch_device(DEVICE).type  # latents stay on the device
    batched = gpu_policy.predict_chunks(observations, latents, [0, 1, 2, 3])
    alone = [gpu_policy.predict_chunk(o, lat, age) for o, lat, age in zip(observations, latents, range(4))]
    for b, a in zip(batched, alone):
        np.testing.assert_allclose(b.actions_rad, a.actions_rad, atol=CHUNK_ATOL_RAD)


def test_bf16_autocast_difference_of_a_chunk(flow):
    """Measured, reported, and bounded loosely: bf16 keeps ~3 significant digits."""
    gpu_policy = flow.to(DEVICE)
    device = torch_device(DEVICE)
    worst = 0.0
    for t in range(4):
        fp32 = gpu_policy.predict_chunk(_obs(t)).actions_rad
        with autocast(device, True):
            bf16 = gpu_policy.predict_chunk(_obs(t)).actions_rad
        worst = max(worst, float(np.abs(bf16 - fp32).max()))
    _report("fastslow bf16 autocast vs fp32 max |diff| rad", worst)
    assert np.isfinite(worst) and worst < 0.05


def test_sac_chunks_on_the_gpu_equal_the_cpus():
    from robotrl.buffer.spec import TransitionSpec
    from robotrl.learn.registry import make_algorithm

    spec = TransitionSpec(6, 6, {"front": (64, 64)}, 3)
    policy = make_algorithm("sac", spec, preset="default", overrides={"latent_dim": 64}).served_policy()
    obs = PolicyObservation(HOME, 9, "", {"front": np.full((64, 64, 3), 90, np.uint8)}, env_state=np.zeros(3))
    cpu = policy.predict_chunk(obs).actions_rad  # sampled: the noise comes from a CPU generator on both
    gpu = policy.to(DEVICE).predict_chunk(obs).actions_rad
    _report("sac GPU vs CPU max |diff| rad", float(np.abs(gpu - cpu).max()))
    np.testing.assert_allclose(gpu, cpu, atol=CHUNK_ATOL_RAD)


def _act(device: str):
    sys.path.insert(0, str(Path(__file__).parents[1] / "policies"))
    from test_policies_lerobot import build

    policy = build("act")
    return policy.to(device)


def test_lerobot_act_on_the_gpu_batched_and_across_devices(tmp_path):
    policy = _act("cpu")
    observations = [_obs(t, cameras=("front",), size=48) for t in range(5)]
    cpu = [policy.predict_chunk(o).actions_rad for o in observations]
    policy.to(DEVICE)
    batched = policy.predict_chunks(observations)  # one forward pass on the device
    worst = max(float(np.abs(b.actions_rad - c).max()) for b, c in zip(batched, cpu))
    _report("lerobot ACT batched GPU vs CPU one by one max |diff| rad", worst)
    assert worst < CHUNK_ATOL_RAD
    # saved on the GPU (its JSON then says so), loaded and served on the CPU, and back
    folder = tmp_path / "pretrained_model"
    policy.policy.save_pretrained(folder)
    policy.preprocessor.save_pretrained(folder)
    policy.postprocessor.save_pretrained(folder)
    steps = json.loads((folder / "policy_preprocessor.json").read_text())["steps"]
    print(f"[gpu] saved device step: {[s['config'] for s in steps if s['registry_name'] == 'device_processor']}")
    on_cpu = load_policy(folder, device="cpu")
    np.testing.assert_allclose(on_cpu.predict_chunk(observations[0]).actions_rad, cpu[0], atol=CHUNK_ATOL_RAD)
    on_gpu = load_policy(folder, device=DEVICE)
    np.testing.assert_allclose(on_gpu.predict_chunk(observations[0]).actions_rad, cpu[0], atol=CHUNK_ATOL_RAD)


def test_a_robotrl_checkpoint_saved_on_the_gpu_loads_on_the_cpu(flow, tmp_path):
    expected = flow.predict_chunk(_obs()).actions_rad
    flow.to(DEVICE).save(tmp_path / "ckpt")
    loaded = load_policy(tmp_path / "ckpt", device="cpu")
    assert loaded.device == torch.device("cpu")  # type: ignore[attr-defined]
    np.testing.assert_array_equal(loaded.predict_chunk(_obs()).actions_rad, expected)  # both on the CPU


def test_live_weights_land_on_the_gpu_model(tiny_flow):
    served = tiny_flow().to(DEVICE)
    trained = _perturbed(tiny_flow())
    served.load_weights(trained.weights_bytes())  # bytes from a CPU learner
    assert all(p.device.type == torch_device(DEVICE).type for p in served.model.parameters())
    np.testing.assert_allclose(
        served.predict_chunk(_obs(cameras=())).actions_rad,
        trained.predict_chunk(_obs(cameras=())).actions_rad,
        atol=CHUNK_ATOL_RAD,
    )


def test_training_and_learning_steps_on_the_gpu_match_the_cpu(tmp_path, monkeypatch):
    sys.path.insert(0, str(Path(__file__).parents[1] / "train"))
    from test_train import TINY, write_toy_dataset

    from robotrl.record.dataset import load_frames
    from robotrl.train.trainer import TrainConfig, Trainer

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    write_toy_dataset(tmp_path / "ds")
    frames = load_frames(tmp_path / "ds", image_size_px=32, progress=False)
    common = dict(
        dataset=tmp_path / "ds", steps=6, batch_size=8, warmup_steps=1, shift_px=2, save_every=100, policy=TINY
    )
    losses = {}
    for name, device, bf16 in (("cpu", "cpu", False), ("gpu", DEVICE, False), ("gpu bf16", DEVICE, True)):
        cfg = TrainConfig(out=tmp_path / name.replace(" ", "_"), device=device, bf16=bf16, **common)
        trainer = Trainer(cfg, frames, progress=False)
        trainer.train()  # on a GPU with the next batch prefetched
        losses[name] = trainer.losses[0][1]
    _report("train step-1 loss GPU - CPU", losses["gpu"] - losses["cpu"])
    _report("train step-1 loss bf16 - fp32", losses["gpu bf16"] - losses["gpu"])
    assert abs(losses["gpu"] - losses["cpu"]) < 1e-3 and abs(losses["gpu bf16"] - losses["gpu"]) < 0.05

    from robotrl.bench.learner import _data, _FixedBuffer
    from robotrl.buffer.spec import TransitionSpec
    from robotrl.learn.registry import make_algorithm

    spec = TransitionSpec(6, 6, {"front": (64, 64)}, 3)
    metrics = {}
    for device in ("cpu", DEVICE):
        algo = make_algorithm("sac", spec, preset="default", overrides={"batch_size": 32}, device=device)
        buffer = _FixedBuffer(_data(32, 64, 1, np.random.default_rng(0)))
        metrics[device] = algo.update(buffer, 0, np.random.default_rng(0))
    _report("sac first critic loss GPU - CPU", metrics[DEVICE]["loss_critic"] - metrics["cpu"]["loss_critic"])
    assert abs(metrics[DEVICE]["loss_critic"] - metrics["cpu"]["loss_critic"]) < 1e-3 * (
        1 + metrics["cpu"]["loss_critic"]
    )
