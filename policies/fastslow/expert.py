"""The fast pathway: a flow-matching action expert over an H x A chunk.

A residual MLP over the flattened (normalised) noisy chunk, modulated (adaptive layer
norm) by a conditioning vector built once per chunk from the newest slow latent, the
latent's age in ticks (embedded), the forwarded proprioceptive state and, if the
checkpoint was trained with it, the privileged env_state; plus the flow time. The
instruction's text token FiLMs the hidden layer of the fresh features (`text_gates_fresh`),
so the instruction can select which object features matter, not only shift them.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from robotrl.policies.fastslow.config import FastSlowConfig
from robotrl.policies.fastslow.objects import ObjectSelector


def time_features(tau: torch.Tensor, dim: int = 64) -> torch.Tensor:
    """(B,) flow time in [0, 1] -> (B, dim) sinusoidal features."""
    freqs = torch.exp(torch.linspace(0, math.log(1000.0), dim // 2, dtype=tau.dtype, device=tau.device))
    angles = tau[:, None] * freqs[None] * math.pi
    return torch.cat([angles.sin(), angles.cos()], dim=1)


class AdaLNBlock(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden, elementwise_affine=False)
        self.mlp = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.SiLU(), nn.Linear(2 * hidden, hidden))
        self.mod = nn.Linear(hidden, 3 * hidden)
        nn.init.zeros_(self.mod.weight)
        nn.init.zeros_(self.mod.bias)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        scale, shift, gate = self.mod(c).chunk(3, dim=-1)
        return x + (1 + gate) * self.mlp(self.norm(x) * (1 + scale) + shift)


class ActionExpert(nn.Module):
    def __init__(self, config: FastSlowConfig, latent_tokens: int) -> None:
        super().__init__()
        h, a, hidden = config.horizon, config.action_dim, config.expert_hidden
        self.horizon, self.action_dim, self.max_age = h, a, config.max_age_ticks
        fresh = config.fresh_dim
        self.latent_proj = nn.Sequential(
            nn.LayerNorm(latent_tokens * config.width), nn.Linear(latent_tokens * config.width, hidden)
        )
        self.age_embed = nn.Embedding(config.max_age_ticks + 1, hidden)
        nn.init.normal_(self.age_embed.weight, std=0.02)
        self.fresh_proj = nn.Sequential(nn.Linear(fresh, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.fresh_film = None
        if config.text_gates_fresh:  # text token -> (scale, shift) of the fresh features' hidden layer
            self.fresh_film = nn.Linear(config.width, 2 * hidden)
            nn.init.zeros_(self.fresh_film.weight)
            nn.init.zeros_(self.fresh_film.bias)
        self.env_slice = slice(config.state_dim, config.state_dim + config.env_state_dim)
        self.objects = None
        if config.env_object_dim:
            slots = config.env_state_dim // config.env_object_dim
            self.offset_slice = slice(fresh - 3 * slots, fresh) if config.relative_objects else None
            self.objects = ObjectSelector(
                slots, config.env_object_dim + (3 if config.relative_objects else 0), config.width, hidden
            )
        self.cond_out = nn.Sequential(nn.SiLU(), nn.Linear(hidden, hidden))
        self.time_proj = nn.Sequential(nn.Linear(64, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.inp = nn.Linear(h * a + h, hidden)
        self.blocks = nn.ModuleList(AdaLNBlock(hidden) for _ in range(config.expert_blocks))
        self.out_norm = nn.LayerNorm(hidden)
        self.out = nn.Linear(hidden, h * a)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def condition(self, latent: torch.Tensor, age_ticks: torch.Tensor, fresh: torch.Tensor) -> torch.Tensor:
        """latent (B, T, W), age_ticks (B,) int, fresh (B, S [+ E]) normalised -> (B, hidden).

        Ages above `max_age_ticks` are clipped to it."""
        age = age_ticks.clamp(0, self.max_age).long()
        cond = self.latent_proj(latent.flatten(1)) + self.age_embed(age) + self.fresh_features(latent, fresh)
        if self.objects is not None:  # fresh = [state, env_state, EE, offsets]: the instruction picks an object
            slots = fresh[:, self.env_slice].reshape(len(fresh), self.objects.num_objects, -1)
            if self.offset_slice is not None:  # each slot with its offset from the gripper
                offsets = fresh[:, self.offset_slice].reshape(len(fresh), self.objects.num_objects, 3)
                slots = torch.cat([slots, offsets], dim=2)
            cond = cond + self.objects(latent[:, 0], slots.flatten(1))
        return cond

    def fresh_features(self, latent: torch.Tensor, fresh: torch.Tensor) -> torch.Tensor:
        """(B, hidden) embedding of the fresh features; with `text_gates_fresh` the first
        hidden layer is scaled and shifted by the text token (latent[:, 0]), a
        multiplicative gate: the instruction picks which object features pass."""
        if self.fresh_film is None:
            return self.fresh_proj(fresh)
        h = self.fresh_proj[0](fresh)
        scale, shift = self.fresh_film(latent[:, 0]).chunk(2, dim=-1)
        return self.fresh_proj[2](self.fresh_proj[1](h * (1 + scale) + shift))

    def velocity(self, x: torch.Tensor, tau_rows: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """x (B, H, A) noisy normalised chunk, tau_rows (B, H), cond (B, hidden) -> (B, H, A).

        The noise level is the smallest row time (prefix rows are clean, tau = 1)."""
        c = self.cond_out(cond + self.time_proj(time_features(tau_rows.min(dim=1).values)))
        h = self.inp(torch.cat([x.flatten(1), tau_rows], dim=1))
        for block in self.blocks:
            h = block(h, c)
        return self.out(self.out_norm(h)).view(-1, self.horizon, self.action_dim)
