"""lerobot's VLAs (pi0, pi0.5, SmolVLA) behind `ChunkPolicy`, with VLASH and RTC.

Loading (`robotrl.policies.loading.load_policy`, or `from_pretrained` of the class): a
lerobot `pretrained_model` folder of type pi0, pi05 or smolvla loads with no network; its
tokenizer and SmolVLA's VLM come from local folders (`offline.py`), its weights from its
own `model.safetensors` (required: lerobot's pi loaders would fall back to random weights;
a file made for another architecture is refused too).

Where the forwarded state goes (VLASH): `obs.state_rad` (the state at the chunk's first
tick) is normalised by the checkpoint's pre-processor and read where each model reads state:
- pi0: the action expert's state token (`PI0Pytorch.embed_suffix`: `state_proj`), outside
  the vision-language prefix;
- SmolVLA: one state token at the end of the VLM prefix (`VLAFlowMatching.embed_prefix`);
  images and language never attend to it, the action expert attends to it through the KV
  cache;
- pi0.5: no state input of its own: the pre-processor discretises the normalised state into
  256 bins and writes it into the prompt ("Task: ..., State: 12 200 ...;"), so the state is
  language tokens of the prefix.

RTC: `obs.prefix_rad` (the robot's plan for the chunk's own ticks) goes to lerobot's own
guidance (`lerobot.policies.rtc.RTCProcessor`, inside the flow sampler): the prefix is
converted to the checkpoint's units and normalised by the pre-processor like a training
target, `inference_delay` is 0 (the state is already forwarded, no row is frozen) and the
execution horizon is the prefix's length P, so the guidance weights decay over the P rows
and the tail is free. A checkpoint without an `rtc_config` is served with the exponential
schedule and a guidance cap of 5 (docs/algorithms.md, beta = 5); one with an `rtc_config`
keeps its schedule and cap. Robots of one batch with different prefix lengths are answered
in one forward per length.

Noise: every robot's flow starts from its own noise, seeded by (seed, tick) on the CPU, so a
robot's chunk is the same alone and in a batch (within float tolerance) and on every device.

pi0.5 is served whole (this class): its state is in the prompt, so a cached prefix would
carry the state of the frame it saw, never the forwarded one. pi0 and SmolVLA split
(`split.py`).
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from robotrl.core.policy import ActionChunk, PolicyObservation
from robotrl.core.seeds import tick_seed
from robotrl.policies.lerobot_adapter import offline
from robotrl.policies.lerobot_adapter.policy import ACTION_KEY, LerobotChunkPolicy

RTC_MAX_GUIDANCE = 5.0
"""Guidance cap for checkpoints without an `rtc_config` (docs/algorithms.md: beta = 5)."""


def prepare_config(config, path) -> dict:
    """Make the lerobot VLA `config` of checkpoint folder `path` load offline; returns the
    pre-processor overrides that point its tokenizer at a local folder (`offline.py`)."""
    offline.require_weights(path)
    fallback = None
    if config.type == "smolvla":
        fallback = offline.vlm_folder(path, config.vlm_model_name)
        config.vlm_model_name = str(fallback)
        config.load_vlm_weights = False  # model.safetensors holds the VLM's weights too
    return offline.tokenizer_override(path, path / "policy_preprocessor.json", fallback=fallback)


def enable_rtc(config) -> None:
    """Give lerobot's sampler its RTC hook (used only when a request carries a prefix)."""
    from lerobot.configs import RTCAttentionSchedule
    from lerobot.policies.rtc.configuration_rtc import RTCConfig

    if config.rtc_config is None:
        config.rtc_config = RTCConfig(
            prefix_attention_schedule=RTCAttentionSchedule.EXP, max_guidance_weight=RTC_MAX_GUIDANCE
        )
    config.rtc_config.enabled = True


class LerobotVlaPolicy(LerobotChunkPolicy):
    """A lerobot VLA served whole: lerobot's own `predict_action_chunk` per batch.
    `from_pretrained(path)` loads a pi0, pi05 or smolvla folder offline (`load_policy` picks
    the split class where the model has one: `split.adapter_class`)."""

    serves_vlas = True

    @classmethod
    def _offline_overrides(cls, config, path: Path) -> dict:
        return prepare_config(config, path)

    @classmethod
    def _check_weights(cls, policy, path: Path) -> None:
        offline.check_weights(policy, path)

    follows_rtc_prefix = True
    """lerobot's own RTC guidance follows the prefix."""

    def __init__(self, policy, preprocessor, postprocessor, **kwargs) -> None:
        enable_rtc(policy.config)
        policy.init_rtc_processor()
        super().__init__(policy, preprocessor, postprocessor, **kwargs)
        self._pipeline_lock = threading.Lock()
        """lerobot's pipelines keep state from pre- to post-processing (relative actions)."""

    @property
    def horizon(self) -> int:
        return int(self.config.chunk_size)

    @torch.no_grad()
    def predict_chunks(self, observations: list[PolicyObservation]) -> list[ActionChunk]:
        """The whole model for many robots: one forward per RTC prefix length."""
        return self._grouped(observations, None)

    def predict_whole(self, observations: list[PolicyObservation]) -> list[ActionChunk]:
        """lerobot's whole call (prefix and expert) for `observations`, batched."""
        return LerobotVlaPolicy.predict_chunks(self, observations)

    def _grouped(self, observations: list[PolicyObservation], latents: list | None) -> list[ActionChunk]:
        """Answer `observations` (fast pathway from `latents`, else whole) in one forward per
        RTC prefix length, in their order."""
        groups: dict[int, list[int]] = {}
        for i, obs in enumerate(observations):
            groups.setdefault(self._prefix_rows(obs), []).append(i)
        chunks: dict[int, ActionChunk] = {}
        for rows, index in groups.items():
            group = [observations[i] for i in index]
            cached = None if latents is None else [latents[i] for i in index]
            chunks.update(zip(index, self._answer(group, cached, rows)))
        return [chunks[i] for i in range(len(observations))]

    def _answer(self, observations: list[PolicyObservation], latents: list | None, rows: int) -> list[ActionChunk]:
        with self._pipeline_lock:
            batch = self.preprocessor(self._batch(observations, with_images=latents is None, prefix_rows=rows))
            kwargs = self._rtc_kwargs(batch, rows)
            noise = self.flow_noise(observations)
            self.policy.reset()  # stateless: never serve from lerobot's internal queues
            if latents is None:
                actions = self.policy.predict_action_chunk(batch, noise=noise, **kwargs)
            else:
                actions = self._fast(batch, latents, noise, kwargs)
            actions = self.postprocessor(actions)
        return self._chunks(actions, observations)

    def _fast(self, batch: dict, latents: list, noise: torch.Tensor, rtc: dict) -> torch.Tensor:
        raise NotImplementedError("served whole")

    @staticmethod
    def _rtc_kwargs(batch: dict, rows: int) -> dict:
        """lerobot's RTC arguments for a batch whose (normalised) prefix is `batch["action"]`."""
        prefix = batch.pop(ACTION_KEY, None)
        if not rows or prefix is None:
            return {}
        return {"prev_chunk_left_over": prefix.float(), "inference_delay": 0, "execution_horizon": rows}

    def flow_noise(self, observations: list[PolicyObservation]) -> torch.Tensor:
        """(B, chunk_size, max_action_dim) initial flow noise, each robot's from its own
        (seed, tick), drawn on the CPU and moved to the model's device."""
        shape = (1, int(self.config.chunk_size), int(self.config.max_action_dim))
        rows = [
            torch.randn(shape, generator=torch.Generator().manual_seed(tick_seed(self.seed, o.tick)))
            for o in observations
        ]
        return torch.cat(rows).to(self.device)
