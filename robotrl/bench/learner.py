"""`robotrl bench learner`: SAC updates/s, robotrl vs lerobot 0.6.1's SACAlgorithm, on one
device (the CPU with 1 torch thread, or a GPU), state-only and with `cameras` image inputs.

"Equal networks": both sides use the same layout and sizes (lerobot's gaussian_actor
defaults): per input a Linear/LayerNorm/Tanh encoder to 256, images through 4 stride-2
convs with 32 channels + 8 learned spatial embeddings, actor and 2 critic heads with
hidden (256, 256) Linear/LayerNorm/SiLU, shared encoder trained by the critic, utd 2
(two critic steps + one actor + one temperature step per update), batch 256, same
synthetic data, the same device (1 torch thread on the CPU). Differences that remain: robotrl stores images as uint8
and converts inside the encoder, applies a random-shift augmentation (counted in its
time), and lerobot's encoder adds a dropout layer after the spatial embeddings.
Sampling time is excluded on both sides (batches pre-built).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from robotrl.buffer.sampler import ChunkSample, TransitionSample
from robotrl.buffer.spec import TransitionSpec

S, A, E = 6, 6, 3


CAMERAS = ("front", "wrist", "side", "top")
"""Names of the benchmark's image inputs, as many as asked for."""


def _data(batch: int, image: int | None, cameras: int, rng: np.random.Generator) -> TransitionSample:
    size, n = (image, cameras) if image else (0, 0)
    imgs = {cam: rng.integers(0, 255, (batch, size, size, 3), dtype=np.uint8) for cam in CAMERAS[:n]}
    state = rng.normal(0, 0.5, (batch, S)).astype(np.float32)
    return TransitionSample(
        state,
        rng.normal(0, 1, (batch, E)).astype(np.float32),
        imgs,
        state + rng.uniform(-0.05, 0.05, (batch, A)).astype(np.float32),
        rng.normal(0, 1, batch).astype(np.float32),
        np.zeros(batch, bool),
        state,
        rng.normal(0, 1, (batch, E)).astype(np.float32),
        imgs,
        np.zeros(batch, bool),
        np.zeros(batch, np.int64),
        np.zeros(batch, np.int64),
        np.zeros(batch, bool),
    )


class _FixedBuffer:
    """A `Sampler` that hands SAC the same batch every update (updates/s without sampling)."""

    def __init__(self, sample: TransitionSample) -> None:
        self.sample = sample

    def sample_transitions(self, batch_size: int, learner_version: int, rng: np.random.Generator) -> TransitionSample:
        return self.sample

    def sample_chunks(
        self, batch_size: int, horizon: int, learner_version: int, rng: np.random.Generator
    ) -> ChunkSample:
        raise TypeError("the SAC benchmark samples transitions, not chunks")


def _timed(update, updates: int, device: torch.device) -> float:
    """updates/s of `update()` after one warm-up call (the GPU's queue drained at both ends)."""
    update()
    _sync(device)
    start = time.perf_counter()
    for _ in range(updates):
        update()
    _sync(device)
    return updates / (time.perf_counter() - start)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _robotrl(batch: int, image: int | None, cameras: int, updates: int, device: torch.device) -> tuple[float, int]:
    from robotrl.learn.registry import make_algorithm
    from robotrl.learn.sac import Sac

    spec = TransitionSpec(S, A, {cam: (image, image) for cam in CAMERAS[:cameras]} if image else {}, E)
    overrides = {"batch_size": batch, "utd_ratio": 2}
    algo = make_algorithm("sac", spec, preset="default", overrides=overrides, device=device)
    assert isinstance(algo, Sac)  # make_algorithm("sac", ...) builds a Sac
    data = _data(batch, image, cameras, np.random.default_rng(0))
    buffer, rng = _FixedBuffer(data), np.random.default_rng(0)
    rate = _timed(lambda: algo.update(buffer, 0, rng), updates, device)
    params = sum(p.numel() for m in (algo.actor, algo.critic) for p in m.parameters())
    return rate, params


def _lerobot(batch: int, image: int | None, cameras: int, updates: int, device: torch.device) -> tuple[float, int]:
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.gaussian_actor.configuration_gaussian_actor import GaussianActorConfig
    from lerobot.policies.gaussian_actor.modeling_gaussian_actor import GaussianActorPolicy
    from lerobot.rl.algorithms.sac.configuration_sac import SACAlgorithmConfig
    from lerobot.rl.algorithms.sac.sac_algorithm import SACAlgorithm

    features = {
        "observation.state": PolicyFeature(FeatureType.STATE, (S,)),
        "observation.environment_state": PolicyFeature(FeatureType.ENV, (E,)),
    }
    size, n = (image, cameras) if image else (0, 0)
    for cam in CAMERAS[:n]:
        features[f"observation.images.{cam}"] = PolicyFeature(FeatureType.VISUAL, (3, size, size))
    cfg = GaussianActorConfig(
        input_features=features,
        output_features={"action": PolicyFeature(FeatureType.ACTION, (A,))},
        device=str(device),
        freeze_vision_encoder=False,
        shared_encoder=True,
    )
    policy = GaussianActorPolicy(cfg).to(device)
    algo_cfg = SACAlgorithmConfig.from_policy_config(cfg)
    algo_cfg.utd_ratio = 2
    algo = SACAlgorithm(policy, algo_cfg)
    algo.make_optimizers_and_scheduler()
    d = _data(batch, image, cameras, np.random.default_rng(0))

    def obs(state, env, imgs):
        o = {"observation.state": torch.from_numpy(state), "observation.environment_state": torch.from_numpy(env)}
        for cam in imgs:
            o[f"observation.images.{cam}"] = torch.from_numpy(imgs[cam]).permute(0, 3, 1, 2).float() / 255.0
        return {k: v.to(device) for k, v in o.items()}

    fixed = {
        "state": obs(d.state, d.env_state, d.images),
        "next_state": obs(d.next_state, d.next_env_state, d.next_images),
        "action": torch.from_numpy(np.clip((d.action - d.state) / 0.05, -1, 1)).to(device),
        "reward": torch.from_numpy(d.reward).to(device),
        "done": torch.zeros(batch, device=device),
    }

    def batches():
        while True:
            yield fixed

    it = batches()
    rate = _timed(lambda: algo.update(it), updates, device)
    params = sum(p.numel() for m in (policy.actor, algo.critic_ensemble) for p in m.parameters())
    params -= sum(p.numel() for p in policy.actor.encoder.parameters())  # the shared encoder counted once
    return rate, params


def run(batch: int = 256, updates: int = 20, image_px: int = 64, cameras: int = 1, device: str = "cpu") -> dict:
    """updates/s of both implementations on `device`, state-only and with `cameras` images
    of `image_px` (1 torch thread on the CPU)."""
    dev = torch.device(device)
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if dev.type == "cpu" else threads)
    rows = []
    try:
        for image in (None, image_px):
            for name, fn in (("robotrl", _robotrl), ("lerobot 0.6.1", _lerobot)):
                rate, params = fn(batch, image, cameras, updates, dev)
                rows.append(
                    {
                        "implementation": name,
                        "inputs": f"state+env+{cameras}x{image}px images" if image else "state+env",
                        "updates_per_s": round(rate, 2),
                        "parameters": params,
                    }
                )
    finally:
        torch.set_num_threads(threads)
    assert __doc__ is not None  # the module docstring above
    return {
        "batch_size": batch,
        "utd_ratio": 2,
        "updates": updates,
        "device": str(dev),
        "torch_threads": torch.get_num_threads() if dev.type != "cpu" else 1,
        "rows": rows,
        "equal_networks": __doc__.split("\n\n")[1].replace("\n", " "),
    }
