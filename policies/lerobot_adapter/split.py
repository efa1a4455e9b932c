"""pi0 and SmolVLA in two pathways: `SlowFastPolicy`, `BatchedSlowPolicy` and `BatchedPolicy`
(docs/algorithms.md section 2), so the server keeps one vision-language prefix per robot and
ages it.

- slow, `encode_slow(obs)`: images + instruction through the VLM once, kept as its KV cache
  (`VlaPrefix`, on the model's device) - the prefix lerobot's `sample_actions` computes once
  per call anyway; `encode_slow_batch(observations)` prefills many robots in one forward and
  hands each its own prefix (a copy of its row of the batch's cache, its padding masked),
  which the server stamps with that robot's tick and the weight version;
- fast, `predict_chunks(observations, latents, ages)`: only what depends on the state and the
  noise, on each robot's cached prefix, with the newest (forwarded) state: pi0's action
  expert denoising (its state token is in the expert's suffix), SmolVLA's state token through
  the VLM onto the cache and then the expert (`pathways.py`). The robots' caches are padded
  to one length and stacked, so many robots take one forward.

With a fresh prefix (age 0) and the same noise the fast pathway's chunk is the whole call's
(lerobot's `predict_action_chunk`), within float tolerance. The latent's age in ticks is not
an input of these models (they were not trained with stale prefixes); the server records it
(`PolicyServer.latent_ages`). `predict_chunks(observations)` without latents is lerobot's
whole call (`predict_whole`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from robotrl.core.errors import ConfigError
from robotrl.core.policy import ActionChunk, PolicyObservation
from robotrl.policies.lerobot_adapter.pathways import pathways_for
from robotrl.policies.lerobot_adapter.vla import LerobotVlaPolicy

SPLIT_TYPES = ("pi0", "smolvla")
"""VLAs whose state is outside the cached vision-language prefix. pi0.5 is served whole:
its state is written into the prompt, so a cached prefix would hold a stale state."""


@dataclass(frozen=True)
class VlaPrefix:
    """The slow pathway's output: the vision-language prefix as the VLM's KV cache."""

    cache: Any
    """transformers `DynamicCache`: per layer keys and values (B, kv_heads, L, head_dim)."""
    pad_masks: torch.Tensor
    """(B, L) bool, True for the prefix's real tokens (padding is never attended)."""

    @property
    def length(self) -> int:
        return int(self.pad_masks.shape[1])


def stack_prefixes(prefixes: list[VlaPrefix]) -> VlaPrefix:
    """One batch of prefixes: each right-padded to the longest (masked) and concatenated."""
    if len(prefixes) == 1:
        return prefixes[0]
    from transformers import DynamicCache

    length = max(p.length for p in prefixes)
    layers = []
    for layer in zip(*(list(p.cache) for p in prefixes)):
        keys = torch.cat([F.pad(k, (0, 0, 0, length - k.shape[2])) for k, _, _ in layer])
        values = torch.cat([F.pad(v, (0, 0, 0, length - v.shape[2])) for _, v, _ in layer])
        layers.append((keys, values, layer[0][2]))
    masks = torch.cat([F.pad(p.pad_masks, (0, length - p.length)) for p in prefixes])
    return VlaPrefix(DynamicCache(tuple(layers)), masks)


def unstack_prefix(prefix: VlaPrefix) -> list[VlaPrefix]:
    """Each robot's prefix of a batched one: its row of every layer's keys and values
    ((1, kv_heads, L, head_dim), copied by `DynamicCache`, so robots' prefixes are freed
    independently) and of the (1, L) pad mask."""
    from transformers import DynamicCache

    layers = list(prefix.cache)
    return [
        VlaPrefix(
            DynamicCache(tuple((k[i : i + 1], v[i : i + 1], window) for k, v, window in layers)),
            prefix.pad_masks[i : i + 1].clone(),
        )
        for i in range(prefix.pad_masks.shape[0])
    ]


def adapter_class(policy_type: str) -> type[LerobotVlaPolicy]:
    """The class that serves lerobot VLA `policy_type`: split where the model allows."""
    return LerobotSplitVlaPolicy if policy_type in SPLIT_TYPES else LerobotVlaPolicy


class LerobotSplitVlaPolicy(LerobotVlaPolicy):
    """pi0 / SmolVLA with a slow (prefix) and a fast (expert) pathway; see the module docstring."""

    @classmethod
    def _offline_overrides(cls, config, path) -> dict:
        if config.type not in SPLIT_TYPES:
            raise ConfigError(f"{path}: lerobot {config.type} has no fast/slow split; load it with load_policy")
        return super()._offline_overrides(config, path)

    def __init__(self, policy, preprocessor, postprocessor, **kwargs) -> None:
        super().__init__(policy, preprocessor, postprocessor, **kwargs)
        self.pathways = pathways_for(self.policy)

    def encode_slow(self, obs: PolicyObservation) -> VlaPrefix:
        """The prefix of `obs.images` and `obs.instruction` (its state is not in it)."""
        return self.encode_slow_batch([obs])[0]

    @torch.no_grad()
    def encode_slow_batch(self, observations: list[PolicyObservation]) -> list[VlaPrefix]:
        """Each observation's prefix, in order, from one forward of the VLM over all of them."""
        if not observations:
            return []
        with self._pipeline_lock:
            batch = self.preprocessor(self._batch(observations))
        cache, masks = self.pathways.prefix(batch)
        prefix = VlaPrefix(cache, masks)
        return [prefix] if len(observations) == 1 else unstack_prefix(prefix)

    def predict_chunk(
        self, obs: PolicyObservation, latent: VlaPrefix | None = None, latent_age_ticks: int = 0
    ) -> ActionChunk:
        """The fast pathway for one robot from `latent` (encoded now when None)."""
        return self.predict_chunks([obs], [latent], [latent_age_ticks])[0]

    @torch.no_grad()
    def predict_chunks(
        self,
        observations: list[PolicyObservation],
        latents: Sequence[VlaPrefix | None] | None = None,
        latent_ages_ticks: Sequence[int] | None = None,
    ) -> list[ActionChunk]:
        """The fast pathway for many robots in one forward per RTC prefix length, each from
        its own cached prefix (those given as None encoded now, in one forward); without
        `latents`, the whole call. The robots' caches are padded to the longest and stacked
        (`stack_prefixes`)."""
        if latents is None:
            return self._grouped(observations, None)
        if len(latents) != len(observations) or any(a < 0 for a in latent_ages_ticks or ()):
            raise ValueError("give one latent and one latent age >= 0 per observation")
        uncached = [o for o, p in zip(observations, latents) if p is None]
        encoded = iter(self.encode_slow_batch(uncached) if uncached else [])
        ready = [next(encoded) if p is None else p for p in latents]
        for prefix in ready:
            if not isinstance(prefix, VlaPrefix) or prefix.pad_masks.shape[0] != 1:
                raise ValueError("a latent must be one robot's VlaPrefix from this policy's encode_slow")
        return self._grouped(observations, ready)

    def _fast(self, batch: dict, latents: list, noise: torch.Tensor, rtc: dict) -> torch.Tensor:
        prefix = stack_prefixes(latents)
        return self.pathways.actions(prefix.cache, prefix.pad_masks, batch, noise, rtc)
