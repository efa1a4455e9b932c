"""`FastSlowModel`: the trainable torch module (slow encoder + action expert)."""

from __future__ import annotations

import torch
from torch import nn

from robotrl.policies.fastslow import flow
from robotrl.policies.fastslow.config import FastSlowConfig
from robotrl.policies.fastslow.expert import ActionExpert
from robotrl.policies.fastslow.normalize import Normalizer
from robotrl.policies.fastslow.slow import SlowEncoder


class FastSlowModel(nn.Module):
    def __init__(self, config: FastSlowConfig, vocab_size: int) -> None:
        super().__init__()
        self.config = config
        self.slow = SlowEncoder(config, vocab_size)
        self.expert = ActionExpert(config, self.slow.num_tokens)
        tokens = self.slow.num_tokens * config.width
        self.env_head = (
            nn.Sequential(nn.Linear(tokens, config.width), nn.SiLU(), nn.Linear(config.width, config.env_state_dim))
            if config.estimate_env_state
            else None
        )

    def encode_slow(self, images_u8: list[torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
        """Per camera (B, 3, S, S) uint8 and (B, L) token ids -> latent (B, T, W)."""
        return self.slow(images_u8, tokens)

    def estimate_env(self, latent: torch.Tensor) -> torch.Tensor:
        """Latent (B, T, W) -> (B, E) normalised estimate of env_state (`estimate_env_state`)."""
        if self.env_head is None:
            raise ValueError("this model has no env_state head (estimate_env_state is off)")
        return self.env_head(latent.flatten(1))

    def sample_chunk(
        self,
        latent: torch.Tensor,
        age_ticks: torch.Tensor,
        fresh: torch.Tensor,
        noise: torch.Tensor,
        prefix: torch.Tensor | None = None,
        prefix_rows: int = 0,
        guide: tuple[torch.Tensor, torch.Tensor, float] | None = None,
    ) -> torch.Tensor:
        """Normalised (B, H, A) chunk from the conditioning and (B, H, A) initial noise."""
        cond = self.expert.condition(latent, age_ticks, fresh)
        velocity = lambda x, tau_rows: self.expert.velocity(x, tau_rows, cond)  # noqa: E731
        return flow.sample(velocity, noise, self.config.flow_steps, prefix=prefix, prefix_rows=prefix_rows, guide=guide)

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def estimated_env_state(model: FastSlowModel, normalizer: Normalizer, latent: torch.Tensor) -> torch.Tensor:
    """(B, E) env_state units (float32, on the latents' device, no gradient): `model`'s
    estimate from (B, T, W) latents, what the fast pathway of a policy with
    `estimate_env_state` conditions on when deployed and when fine-tuned without the
    simulator's env_state (a real arm)."""
    with torch.no_grad():
        return normalizer.env_from(model.estimate_env(latent).float())
