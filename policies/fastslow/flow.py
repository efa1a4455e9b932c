"""Flow-matching maths on action chunks, as pure functions of tensors.

Convention (docs/algorithms.md): flow time tau runs from 0 (noise) to 1 (data);
`x_tau = tau * x1 + (1 - tau) * x0`, the velocity target is `x1 - x0`, and sampling
integrates `dx/dtau = v(x, tau)` with Euler steps from tau = 0 to 1.

`Velocity` is any callable `(x (B, H, A), tau_rows (B, H)) -> v (B, H, A)`; the time is
given per row so clean prefix rows can carry tau = 1 (training-time RTC).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

Velocity = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def interpolate(x0: torch.Tensor, x1: torch.Tensor, tau_rows: torch.Tensor) -> torch.Tensor:
    """x_tau per row: tau * x1 + (1 - tau) * x0, with tau_rows (B, H)."""
    t = tau_rows[..., None]
    return t * x1 + (1 - t) * x0


def prefix_tau(tau: torch.Tensor, prefix_rows: torch.Tensor, horizon: int) -> torch.Tensor:
    """(B, H) per-row flow time: 1 (clean) for rows < prefix_rows[b], tau[b] after."""
    rows = torch.arange(horizon, device=tau.device)
    is_prefix = rows[None, :] < prefix_rows[:, None]
    return torch.where(is_prefix, torch.ones_like(tau)[:, None], tau[:, None].expand(-1, horizon))


def rtc_weights(horizon: int, execute_steps: int, delay: int) -> torch.Tensor:
    """(H,) RTC guidance weights W (docs/algorithms.md section 1, arXiv 2506.07339).

    W_i = 1 for i < d (rows that execute anyway), then an exponential decay
    c_i * (e^c_i - 1) / (e - 1) with c_i = (H - s - i) / (H - s - d + 1) for d <= i < H - s,
    and 0 for the last s rows (new territory, free).
    """
    h, s, d = horizon, execute_steps, delay
    w = torch.zeros(h, dtype=torch.float64)
    for i in range(h):
        if i < d:
            w[i] = 1.0
        elif i < h - s:
            c = (h - s - i) / (h - s - d + 1)
            w[i] = c * (math.exp(c) - 1) / (math.e - 1)
    return w.float()


def rtc_guidance_scale(tau: float, beta: float) -> float:
    """min(beta, (1 - tau) / (tau * r2)) with r2 = (1 - tau)^2 / (tau^2 + (1 - tau)^2);
    beta at tau = 0 (where the ratio is infinite), 0 at tau = 1."""
    if tau <= 0.0:
        return beta
    r2 = (1 - tau) ** 2 / (tau**2 + (1 - tau) ** 2)
    if r2 == 0.0:
        return 0.0
    return min(beta, (1 - tau) / (tau * r2))


def rtc_guided_velocity(
    velocity: Velocity, x: torch.Tensor, tau: float, target: torch.Tensor, weights: torch.Tensor, beta: float
) -> torch.Tensor:
    """Velocity guided toward `target` (RTC inpainting), one vector-Jacobian product.

    x, target: (B, H, A); weights: (H,). With A1_hat = x + (1 - tau) * v(x, tau):
    v_guided = v + scale * (target - A1_hat)^T diag(W) dA1_hat/dx.
    """
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        tau_rows = torch.full(x.shape[:2], float(tau), dtype=x.dtype, device=x.device)
        v = velocity(x, tau_rows)
        a1_hat = x + (1 - tau) * v
        err = (target - a1_hat) * weights[None, :, None]
        (g,) = torch.autograd.grad(a1_hat, x, grad_outputs=err.detach())
    return v.detach() + rtc_guidance_scale(tau, beta) * g


def sample(
    velocity: Velocity,
    noise: torch.Tensor,
    steps: int,
    *,
    prefix: torch.Tensor | None = None,
    prefix_rows: int = 0,
    guide: tuple[torch.Tensor, torch.Tensor, float] | None = None,
) -> torch.Tensor:
    """Euler integration of `velocity` from `noise` (tau = 0) to a chunk (tau = 1).

    prefix, prefix_rows: training-time RTC: rows < prefix_rows are held at `prefix`
        (clean, tau = 1) at every step.
    guide: (target (B, H, A), weights (H,), beta): inference-time RTC guidance.
    """
    x = noise
    b, h, _ = x.shape
    dt = 1.0 / steps
    for k in range(steps):
        tau = k * dt
        if prefix is not None and prefix_rows > 0:
            x = torch.cat([prefix[:, :prefix_rows], x[:, prefix_rows:]], dim=1)
        if guide is not None:
            v = rtc_guided_velocity(velocity, x, tau, guide[0], guide[1], guide[2])
        else:
            tau_rows = torch.full((b, h), tau, dtype=x.dtype, device=x.device)
            if prefix is not None and prefix_rows > 0:
                tau_rows[:, :prefix_rows] = 1.0
            v = velocity(x, tau_rows)
        x = x + dt * v
    if prefix is not None and prefix_rows > 0:
        x = torch.cat([prefix[:, :prefix_rows], x[:, prefix_rows:]], dim=1)
    return x
