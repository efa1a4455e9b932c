"""The two pathways of pi0 and SmolVLA, made of lerobot's own model code.

Each class cuts lerobot's `sample_actions` where its prefix stops depending on the state:

- pi0 (`PI0Pytorch.sample_actions`): `prefix` is its prefix prefill (images and language
  through PaliGemma, `use_cache=True`); `actions` is its Euler loop of `denoise_step`, whose
  suffix is the state token and the noisy actions. The cut is exactly lerobot's.
- SmolVLA (`VLAFlowMatching.sample_actions`): its prefix ends with one state token that
  images and language never attend to (`embed_prefix`'s attention mask), so their keys and
  values do not depend on the state. `prefix` prefills images and language alone; `actions`
  runs the state token through every VLM layer as self-attention onto that cache (its keys
  and values appended, exactly as the whole prefill computes them), then the expert's
  `denoise_step` loop on the cache with the state.

Nothing here touches the weights; the RTC hook and the noise are lerobot's (`euler_integrate`).
"""

from __future__ import annotations

import contextlib

import torch

LANG_TOKENS = "observation.language.tokens"
LANG_MASK = "observation.language.attention_mask"


def pathways_for(policy):
    """The pathways of lerobot `policy` (a `PI0Policy` or `SmolVLAPolicy`)."""
    if policy.config.type == "pi0":
        return Pi0Pathways(policy)
    if policy.config.type == "smolvla":
        if not policy.config.use_cache:
            raise ValueError("SmolVLA with use_cache=False has no prefix cache to split on")
        return SmolVlaPathways(policy)
    raise ValueError(f"lerobot {policy.config.type} has no fast/slow split")


def _prefill(backbone, attention_mask: torch.Tensor, pad: torch.Tensor, embs: torch.Tensor):
    """The KV cache of prefix embeddings `embs` (B, L, D) through lerobot's two-tower
    `backbone` (pi0's `paligemma_with_expert`, SmolVLA's `vlm_with_expert`), positions
    counted over the (B, L) pad mask, as their `sample_actions` prefill does."""
    _, cache = backbone.forward(
        attention_mask=attention_mask,
        position_ids=torch.cumsum(pad, dim=1) - 1,
        past_key_values=None,
        inputs_embeds=[embs, None],
        use_cache=True,
    )
    return cache


def _action_dim(policy) -> int:
    return int(policy.config.output_features["action"].shape[0])


class Pi0Pathways:
    def __init__(self, policy) -> None:
        self.policy = policy
        self.model = policy.model

    def prefix(self, batch: dict) -> tuple[object, torch.Tensor]:
        """(KV cache, (B, L) pad masks) of the images and instruction in `batch`."""
        from lerobot.policies.common.vla_utils import make_att_2d_masks, prepare_attention_masks_4d

        images, img_masks = self.policy._preprocess_images(batch)
        embs, pad, att = self.model.embed_prefix(images, img_masks, batch[LANG_TOKENS], batch[LANG_MASK])
        masks_4d = prepare_attention_masks_4d(make_att_2d_masks(pad, att))
        experts = self.model.paligemma_with_expert
        experts.paligemma.model.language_model.config._attn_implementation = "eager"  # as sample_actions
        return _prefill(experts, masks_4d, pad, embs), pad

    def actions(self, cache, pad: torch.Tensor, batch: dict, noise: torch.Tensor, rtc: dict) -> torch.Tensor:
        """(B, H, A) normalised actions: the expert's flow on the cached prefix with the
        state of `batch` (`denoise_step` clones the cache, which stays as it was)."""
        from lerobot.policies.common.flow_matching import euler_integrate

        model, state = self.model, self.policy.prepare_state(batch)
        x = euler_integrate(
            lambda x_t, t: model.denoise_step(
                state=state, prefix_pad_masks=pad, past_key_values=cache, x_t=x_t, timestep=t
            ),
            noise,
            model.config.num_inference_steps,
            rtc_processor=model.rtc_processor,
            rtc_enabled=model._rtc_enabled(),
            **rtc,
        )
        return x[:, :, : _action_dim(self.policy)]


class SmolVlaPathways:
    def __init__(self, policy) -> None:
        self.policy = policy
        self.model = policy.model

    def prefix(self, batch: dict) -> tuple[object, torch.Tensor]:
        """(KV cache, (B, L) pad masks) of the images and instruction (the state token cut off)."""
        from lerobot.policies.common.vla_utils import make_att_2d_masks

        policy, model = self.policy, self.model
        batch = policy._prepare_batch(batch)
        images, img_masks = policy.prepare_images(batch)
        state = policy.prepare_state(batch)
        embs, pad, att = model.embed_prefix(images, img_masks, batch[LANG_TOKENS], batch[LANG_MASK], state=state)
        n = int(att[0].nonzero()[-1])  # the state token: the last one that opens an attention block
        embs, pad, att = embs[:, :n], pad[:, :n], att[:, :n]
        return _prefill(model.vlm_with_expert, make_att_2d_masks(pad, att), pad, embs), pad

    def actions(self, cache, pad: torch.Tensor, batch: dict, noise: torch.Tensor, rtc: dict) -> torch.Tensor:
        """(B, H, A) normalised actions: the state token onto a copy of the cached prefix,
        then the expert's flow."""
        from lerobot.policies.common.flow_matching import euler_integrate
        from lerobot.policies.common.vla_utils import clone_past_key_values

        policy, model = self.policy, self.model
        batch = policy._prepare_batch(batch)
        state_emb = model.state_proj(policy.prepare_state(batch))[:, None, :]
        cache = clone_past_key_values(cache)  # the robot's prefix is reused: extend a copy
        full = torch.cat([pad, torch.ones_like(pad[:, :1])], dim=1)
        with _all_self_attention(model.vlm_with_expert):  # as in the prefill, every layer
            _, cache = model.vlm_with_expert.forward(
                attention_mask=full[:, None, :],  # the state sees every real token and itself
                position_ids=pad.sum(dim=1, keepdim=True),
                past_key_values=cache,
                inputs_embeds=[state_emb, None],
                use_cache=True,
            )
        x = euler_integrate(
            lambda x_t, t: model.denoise_step(prefix_pad_masks=full, past_key_values=cache, x_t=x_t, timestep=t),
            noise,
            model.config.num_steps,
            rtc_processor=model.rtc_processor,
            rtc_enabled=model._rtc_enabled(),
            **rtc,
        )
        actions = x[:, :, : _action_dim(policy)]
        return policy._pi_aloha_encode_actions(actions) if policy.config.adapt_to_pi_aloha else actions


@contextlib.contextmanager
def _all_self_attention(vlm_with_expert):
    """Route every layer of `SmolVLMWithExpertModel.forward` through self-attention, as its
    prefill does (with a cache passed it would send the cross-attention layers to the
    expert). Only the model thread runs the fast pathway; the slow pathway's prefill takes
    that route whatever the mode."""
    mode = vlm_with_expert.attention_mode
    vlm_with_expert.attention_mode = "self_attn"
    try:
        yield
    finally:
        vlm_with_expert.attention_mode = mode
