"""`robotrl bench learner`: SAC updates/s, robotrl vs lerobot 0.6.1's SACAlgorithm, on CPU.

"Equal networks": both sides use the same layout and sizes (lerobot's gaussian_actor
defaults): per input a Linear/LayerNorm/Tanh encoder to 256, images through 4 stride-2
convs with 32 channels + 8 learned spatial embeddings, actor and 2 critic heads with
hidden (256, 256) Linear/LayerNorm/SiLU, shared encoder trained by the critic, utd 2
(two critic steps + one actor + one temperature step per update), batch 256, same
synthetic data, 1 torch thread. Differences that remain: robotrl stores images as uint8
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


def _data(batch: int, image: int | None, rng: np.random.Generator) -> TransitionSample:
    imgs = {"front": rng.integers(0, 255, (batch, image, image, 3), dtype=np.uint8)} if image else {}
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


def _robotrl(batch: int, image: int | None, updates: int) -> tuple[float, int]:
    from robotrl.learn.registry import make_algorithm
    from robotrl.learn.sac import Sac

    spec = TransitionSpec(S, A, {"front": (image, image)} if image else {}, E)
    algo = make_algorithm("sac", spec, preset="default", overrides={"batch_size": batch, "utd_ratio": 2})
    assert isinstance(algo, Sac)  # make_algorithm("sac", ...) builds a Sac
    buffer, rng = _FixedBuffer(_data(batch, image, np.random.default_rng(0))), np.random.default_rng(0)
    algo.update(buffer, 0, rng)  # warm-up
    start = time.perf_counter()
    for _ in range(updates):
        algo.update(buffer, 0, rng)
    params = sum(p.numel() for m in (algo.actor, algo.critic) for p in m.parameters())
    return updates / (time.perf_counter() - start), params


def _lerobot(batch: int, image: int | None, updates: int) -> tuple[float, int]:
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.gaussian_actor.configuration_gaussian_actor import GaussianActorConfig
    from lerobot.policies.gaussian_actor.modeling_gaussian_actor import GaussianActorPolicy
    from lerobot.rl.algorithms.sac.configuration_sac import SACAlgorithmConfig
    from lerobot.rl.algorithms.sac.sac_algorithm import SACAlgorithm

    features = {
        "observation.state": PolicyFeature(FeatureType.STATE, (S,)),
        "observation.environment_state": PolicyFeature(FeatureType.ENV, (E,)),
    }
    if image:
        features["observation.images.front"] = PolicyFeature(FeatureType.VISUAL, (3, image, image))
    cfg = GaussianActorConfig(
        input_features=features,
        output_features={"action": PolicyFeature(FeatureType.ACTION, (A,))},
        device="cpu",
        freeze_vision_encoder=False,
        shared_encoder=True,
    )
    policy = GaussianActorPolicy(cfg)
    algo_cfg = SACAlgorithmConfig.from_policy_config(cfg)
    algo_cfg.utd_ratio = 2
    algo = SACAlgorithm(policy, algo_cfg)
    algo.make_optimizers_and_scheduler()
    d = _data(batch, image, np.random.default_rng(0))

    def obs(state, env, imgs):
        o = {"observation.state": torch.from_numpy(state), "observation.environment_state": torch.from_numpy(env)}
        if image:
            o["observation.images.front"] = torch.from_numpy(imgs["front"]).permute(0, 3, 1, 2).float() / 255.0
        return o

    fixed = {
        "state": obs(d.state, d.env_state, d.images),
        "next_state": obs(d.next_state, d.next_env_state, d.next_images),
        "action": torch.from_numpy(np.clip((d.action - d.state) / 0.05, -1, 1)),
        "reward": torch.from_numpy(d.reward),
        "done": torch.zeros(batch),
    }

    def batches():
        while True:
            yield fixed

    it = batches()
    algo.update(it)  # warm-up
    start = time.perf_counter()
    for _ in range(updates):
        algo.update(it)
    params = sum(p.numel() for m in (policy.actor, algo.critic_ensemble) for p in m.parameters())
    params -= sum(p.numel() for p in policy.actor.encoder.parameters())  # the shared encoder counted once
    return updates / (time.perf_counter() - start), params


def run(batch: int = 256, updates: int = 20, image_px: int = 64) -> dict:
    """updates/s of both implementations, state-only and with one image camera."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows = []
    try:
        for image in (None, image_px):
            for name, fn in (("robotrl", _robotrl), ("lerobot 0.6.1", _lerobot)):
                rate, params = fn(batch, image, updates)
                rows.append(
                    {
                        "implementation": name,
                        "inputs": f"state+env+{image}px image" if image else "state+env",
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
        "device": "cpu",
        "torch_threads": 1,
        "rows": rows,
        "equal_networks": __doc__.split("\n\n")[1].replace("\n", " "),
    }
