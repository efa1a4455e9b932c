"""The flow-matching loss of a fast/slow policy on a batch of action chunks."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from robotrl.policies.device import to_device
from robotrl.policies.fastslow import flow
from robotrl.policies.fastslow.model import FastSlowModel, estimated_env_state
from robotrl.policies.fastslow.normalize import Normalizer


@dataclass
class Batch:
    images: list[torch.Tensor]
    """Per camera (B, 3, S, S) uint8 (the frame the slow latent sees)."""
    tokens: torch.Tensor
    """(B, L) instruction token ids."""
    state: torch.Tensor
    """(B, S) radians, at the chunk's first row."""
    chunk: torch.Tensor
    """(B, H, A) target joint positions, radians (padding rows repeat the last action)."""
    mask: torch.Tensor
    """(B, H) bool, rows inside the episode."""
    age: torch.Tensor
    """(B,) int64 latent age in ticks."""
    env_state: torch.Tensor | None = None
    """(B, E) privileged features, when the policy uses them."""
    prefix_rows: torch.Tensor | None = None
    """(B,) training-time RTC: rows given clean (no loss on them)."""
    ee: torch.Tensor | None = None
    """(B, 9) end-effector features of `state`, when the policy uses them."""

    def to(self, device: torch.device) -> Batch:
        """The batch with every tensor on `device` (large ones through pinned memory)."""
        return Batch(**{f.name: to_device(getattr(self, f.name), device) for f in fields(self)})


ENV_LOSS_WEIGHT = 1.0
"""Weight of the env_state estimate's mean squared error (normalised units) beside the
flow loss (`estimate_env_state`)."""

ESTIMATE_NOISE = 0.005
"""Std of the Gaussian noise (env_state's units: metres for positions, m/s for velocities)
on the simulator's env_state that the fast pathway trains on under `estimate_env_state`:
about the estimate's error on unseen pick_place scenes (0.3-0.4 cm per axis from 600
demonstrations), so the fast pathway does not learn to trust a feature more exactly than
any estimate gives it, and the estimate is trained by its own error alone. A feature the
estimate gets worse (track's ball velocity, read from two frames) is not blurred to that
error: a fast pathway trained on a blurred velocity hedges toward a still ball, a bias the
closed loop never corrects, and trails the ball at long delays (docs/results.md section 30)."""


def sample_tau(n: int) -> torch.Tensor:
    """(n,) flow times biased toward noise (pi0's Beta(1.5, 1), in our tau convention),
    from torch's global (CPU) generator."""
    u = torch.distributions.Beta(torch.tensor(1.5), torch.tensor(1.0)).sample((n,))
    return 1.0 - (0.001 + 0.999 * u)


def flow_matching_loss(
    model: FastSlowModel,
    normalizer: Normalizer,
    batch: Batch,
    flow_samples: int = 4,
    row_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean squared velocity error over real (and, with RTC, postfix) rows, plus, with
    `estimate_env_state`, `ENV_LOSS_WEIGHT` x the estimate's squared error; a batch
    without env_state (online on a real arm) conditions the fast pathway on the estimate,
    as deployed, and leaves the estimate untrained.

    The slow latent and the conditioning are computed once per example and shared by
    `flow_samples` draws of (noise, tau). `row_weights` (B, H) >= 0 makes it the weighted
    mean over rows (online fine-tuning: reward- and intervention-weighted rows). The maths
    runs on the batch's device; noise and times are drawn from torch's CPU generator and
    moved, so a seed gives the same draws on every device."""
    latent = model.encode_slow(batch.images, batch.tokens)
    env, env_loss = batch.env_state, None
    if model.config.estimate_env_state and batch.env_state is None:  # a real arm: the estimate, as deployed
        env = estimated_env_state(model, normalizer, latent)
    elif model.config.estimate_env_state and env is not None:  # the fast pathway sees the true state, blurred
        residual = model.estimate_env(latent) - normalizer.env(env)
        env_loss = (residual**2).mean()
        env = env + (torch.randn(env.shape, dtype=env.dtype) * ESTIMATE_NOISE).to(env.device)
    fresh = normalizer.fresh(batch.state, env, batch.ee, model.config.relative_object_dim)
    cond = model.expert.condition(latent, batch.age, fresh)
    x1 = normalizer.encode_chunk(batch.chunk, batch.state)
    b, h, a = x1.shape
    n = flow_samples
    weight = batch.mask if row_weights is None else batch.mask * row_weights
    cond, x1, mask = cond.repeat_interleave(n, 0), x1.repeat_interleave(n, 0), weight.repeat_interleave(n, 0)
    device = x1.device
    x0 = torch.randn(x1.shape, dtype=x1.dtype).to(device)
    tau = sample_tau(b * n).to(device)
    if batch.prefix_rows is not None:
        prefix = batch.prefix_rows.repeat_interleave(n, 0)
        tau_rows = flow.prefix_tau(tau, prefix, h)
        mask = mask * (torch.arange(h, device=device)[None, :] >= prefix[:, None])
    else:
        tau_rows = tau[:, None].expand(-1, h)
    x_tau = flow.interpolate(x0, x1, tau_rows)
    v = model.expert.velocity(x_tau, tau_rows, cond)
    err = ((v - (x1 - x0)) ** 2).sum(-1) * mask
    loss = err.sum() / (mask.sum().clamp(min=1) * a)
    return loss if env_loss is None else loss + ENV_LOSS_WEIGHT * env_loss
