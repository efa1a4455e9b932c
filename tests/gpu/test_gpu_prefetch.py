"""GPU-only checks of the learner's device path (skipped without CUDA): pinned uint8 images
from the sampler, prefetched batches copied on a side stream equal to the CPU's, a GPU
learner prefetching by default, weights staged onto the GPU off the serving thread, and
`robotrl devices` measuring each GPU. `ROBOTRL_GPU_TEST_DEVICE=cpu` is a dry run of the
test code (the pinned-memory checks are then skipped: pinning needs CUDA)."""

from __future__ import annotations

import json
import os
import sys
import threading

import numpy as np
import pytest
import torch

from robotrl.buffer.online import OnlineBuffer
from robotrl.buffer.spec import TransitionSpec
from robotrl.learn.prefetch import Prefetcher, pinned_images

DEVICE = os.environ.get("ROBOTRL_GPU_TEST_DEVICE", "cuda")
CUDA = DEVICE.startswith("cuda")
pytestmark = pytest.mark.skipif(CUDA and not torch.cuda.is_available(), reason="needs a CUDA GPU")
SPEC = TransitionSpec(6, 6, {"front": (64, 64), "wrist": (64, 64)}, 3)


def _report(name: str, value: float) -> None:
    print(f"[gpu] {name}: {value:.3g}", file=sys.stderr)


def _filled(root) -> OnlineBuffer:
    from robotrl.bench.learner_loop import filled_buffer

    return filled_buffer(root, SPEC)


def test_the_sampler_hands_over_pinned_uint8_images(tmp_path):
    if not CUDA:
        pytest.skip("pinned memory needs CUDA")
    buffer = _filled(tmp_path / "buf")
    plain = buffer.sample_transitions(32, 0, np.random.default_rng(0))
    buffer.image_alloc = pinned_images
    pinned = buffer.sample_transitions(32, 0, np.random.default_rng(0))
    for name in ("images", "next_images"):
        for cam, img in getattr(pinned, name).items():
            assert isinstance(img, torch.Tensor) and img.dtype == torch.uint8 and img.is_pinned()
            assert np.array_equal(img.numpy(), getattr(plain, name)[cam])


def test_prefetched_gpu_batches_equal_the_cpus_in_order(tmp_path):
    cpu, gpu = _filled(tmp_path / "cpu"), _filled(tmp_path / "gpu")
    if CUDA:
        gpu.image_alloc = pinned_images
    device = torch.device(DEVICE)
    prefetcher = Prefetcher(gpu, device, generation=lambda: (gpu.committed_episodes, len(gpu)))
    cpu_rng, gpu_rng = np.random.default_rng(3), np.random.default_rng(3)
    try:
        for version in (0, 0, 0, 1, 1):
            expected = cpu.sample_transitions(64, version, cpu_rng)
            got = prefetcher.sample_transitions(64, version, gpu_rng)
            for name in ("images", "next_images"):
                for cam, img in getattr(got, name).items():
                    if CUDA:
                        assert isinstance(img, torch.Tensor) and img.device.type == "cuda" and img.dtype == torch.uint8
                    assert np.array_equal(torch.as_tensor(img).cpu().numpy(), getattr(expected, name)[cam])
            assert np.array_equal(got.state, expected.state) and np.array_equal(got.action, expected.action)
    finally:
        prefetcher.close()
    assert cpu_rng.bit_generator.state == gpu_rng.bit_generator.state
    assert (prefetcher.hits, prefetcher.misses) == (3, 2)  # misses: the first draw, version 0 -> 1


def test_a_gpu_learner_prefetches_by_default_and_learns_as_on_the_cpu(tmp_path):
    from robotrl.learn.learner import Learner, LearnerConfig
    from robotrl.learn.metrics import read_csv
    from robotrl.learn.registry import make_algorithm

    losses, counts = {}, {}
    for name, device in (("cpu", "cpu"), ("gpu", DEVICE)):
        buffer = _filled(tmp_path / f"{name}-buf")
        algo = make_algorithm("sac", SPEC, preset="default", overrides={"batch_size": 32}, device=device, seed=1)

        class Publisher:
            def publish(self, version: int, data: bytes) -> None:
                pass

        cfg = LearnerConfig(
            out=tmp_path / name, transitions_endpoint="tcp://127.0.0.1:*", min_transitions=1, max_updates=6, log_every=1
        )
        with Learner(algo, buffer, Publisher(), cfg, device=str(torch.device(device))) as learner:
            learner.run()
            counts[name] = learner.prefetch_counts
        losses[name] = float(read_csv(tmp_path / name / "updates.csv")[0]["loss_critic"])
    _report("learner first critic loss GPU - CPU (prefetched, pinned)", losses["gpu"] - losses["cpu"])
    assert abs(losses["gpu"] - losses["cpu"]) < 1e-3 * (1 + abs(losses["cpu"]))
    assert counts["cpu"] is None
    if CUDA:
        assert counts["gpu"] is not None and counts["gpu"]["hits"] >= 8


def test_weights_staged_off_the_serving_thread_land_on_the_gpu():
    from robotrl.core.policy import PolicyObservation
    from robotrl.policies.sac.config import SacNetConfig
    from robotrl.policies.sac.networks import SacActor
    from robotrl.policies.sac.policy import SacChunkPolicy

    config = SacNetConfig(6, 6, 0, {"front": (64, 64)}, 64, (64,), 8, max_step_rad=0.05, horizon=2)
    torch.manual_seed(0)
    served, trained = (SacChunkPolicy(SacActor(config), deterministic=True) for _ in range(2))
    served.to(DEVICE)
    staged = {}
    thread = threading.Thread(target=lambda: staged.update(served.stage_weights(trained.weights_bytes())))
    thread.start()
    thread.join()
    assert all(t.device.type == torch.device(DEVICE).type for t in staged.values())
    served.swap_weights(staged)
    rng = np.random.default_rng(0)
    obs = PolicyObservation(np.full(6, 0.1), 3, images={"front": rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)})
    diff = float(np.abs(served.predict_chunk(obs).actions_rad - trained.predict_chunk(obs).actions_rad).max())
    _report("sac staged weights GPU vs CPU max |diff| rad", diff)
    assert diff < 1e-4


def test_devices_measures_each_gpu(capsys):
    if not CUDA:
        pytest.skip("no GPU to measure")
    from robotrl.cli import main

    assert main(["devices", "--json", "--max-cameras", "0"]) == 0
    usage = json.loads(capsys.readouterr().out)["gpu_usage"]
    assert len(usage) == torch.cuda.device_count()
    for gpu in usage:
        assert gpu["memory_used_mb"] > 0 and gpu["memory_total_mb"] > gpu["memory_used_mb"]
        print(f"[gpu] devices: {gpu}", file=sys.stderr)
