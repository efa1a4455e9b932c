"""SAC networks: observation encoder, tanh-Gaussian actor head, critic ensemble.

Observations are dicts of tensors: "state" (B, S) float32 radians, "env_state" (B, E)
float32 (when the config has E > 0), and one (B, h, w, 3) uint8 tensor per camera under
"image.<camera>". Images become float inside the encoder (never stored as float).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from robotrl.core.errors import ConfigError
from robotrl.policies.sac.config import SacNetConfig

LOG_2 = math.log(2.0)


def mlp(in_dim: int, hidden_dims: tuple[int, ...]) -> nn.Sequential:
    """Linear -> LayerNorm -> SiLU per hidden layer (lerobot's MLP with activate_final)."""
    layers: list[nn.Module] = []
    for out_dim in hidden_dims:
        layers += [nn.Linear(in_dim, out_dim), nn.LayerNorm(out_dim), nn.SiLU()]
        in_dim = out_dim
    return nn.Sequential(*layers)


def random_shift(images_u8: torch.Tensor, pad_px: int, generator: torch.Generator | None) -> torch.Tensor:
    """(B, h, w, 3) uint8 -> the same images shifted by up to `pad_px` pixels each way
    (replicate padding, one random offset per image; DrQ / HIL-SERL augmentation)."""
    if pad_px == 0:
        return images_u8
    b, h, w, _ = images_u8.shape
    device = images_u8.device  # the offsets are drawn on the generator's device (the CPU), the shift runs here
    padded = F.pad(images_u8.permute(0, 3, 1, 2).float(), (pad_px,) * 4, mode="replicate")
    dy = torch.randint(0, 2 * pad_px + 1, (b,), generator=generator).to(device)
    dx = torch.randint(0, 2 * pad_px + 1, (b,), generator=generator).to(device)
    rows = (dy[:, None] + torch.arange(h, device=device)[None])[:, :, None]  # (B, h, 1)
    cols = (dx[:, None] + torch.arange(w, device=device)[None])[:, None, :]  # (B, 1, w)
    shifted = padded.permute(0, 2, 3, 1)[torch.arange(b, device=device)[:, None, None], rows, cols]  # (B, h, w, 3)
    return shifted.to(torch.uint8)


class SpatialEmbeddings(nn.Module):
    """(B, C, h, w) feature maps -> (B, C * F) learned spatial poolings."""

    def __init__(self, channels: int, height: int, width: int, features: int) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.empty(channels, height, width, features))
        nn.init.kaiming_normal_(self.kernel, mode="fan_in", nonlinearity="linear")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bchw,chwf->bcf", x, self.kernel).flatten(1)


class ImageEncoder(nn.Module):
    """(B, h, w, 3) uint8 -> (B, latent_dim): 4 stride-2 convs, spatial embeddings,
    Linear/LayerNorm/Tanh."""

    def __init__(self, config: SacNetConfig, size: tuple[int, int]) -> None:
        super().__init__()
        c = config.cnn_channels
        self.cnn = nn.Sequential(
            nn.Conv2d(3, c, 7, 2),
            nn.ReLU(),
            nn.Conv2d(c, c, 5, 2),
            nn.ReLU(),
            nn.Conv2d(c, c, 3, 2),
            nn.ReLU(),
            nn.Conv2d(c, c, 3, 2),
            nn.ReLU(),
        )
        with torch.no_grad():
            _, _, fh, fw = self.cnn(torch.zeros(1, 3, *size)).shape
        if fh < 1 or fw < 1:
            raise ConfigError(f"images of {size} are too small for the SAC image encoder (needs >= 45 px)")
        self.pool = SpatialEmbeddings(c, fh, fw, config.spatial_features)
        self.out = nn.Sequential(
            nn.Linear(c * config.spatial_features, config.latent_dim), nn.LayerNorm(config.latent_dim), nn.Tanh()
        )

    def forward(self, images_u8: torch.Tensor) -> torch.Tensor:
        x = images_u8.permute(0, 3, 1, 2).float() / 255.0
        return self.out(self.pool(self.cnn((x - 0.5) / 0.25)))


class ObservationEncoder(nn.Module):
    """Observation dict -> (B, out_dim) features: [cameras..., env_state, state] encodings."""

    def __init__(self, config: SacNetConfig) -> None:
        super().__init__()
        d = config.latent_dim
        self.cameras = tuple(config.cameras)
        self.images = nn.ModuleDict({cam: ImageEncoder(config, size) for cam, size in config.cameras.items()})
        self.env = (
            nn.Sequential(nn.Linear(config.env_state_dim, d), nn.LayerNorm(d), nn.Tanh())
            if config.env_state_dim
            else None
        )
        self.state = nn.Sequential(nn.Linear(config.state_dim, d), nn.LayerNorm(d), nn.Tanh())
        self.out_dim = d * (len(self.cameras) + 1 + (1 if self.env is not None else 0))

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = [self.images[cam](obs[f"image.{cam}"]) for cam in self.cameras]
        if self.env is not None:
            parts.append(self.env(obs["env_state"]))
        parts.append(self.state(obs["state"]))
        return torch.cat(parts, dim=-1)


class ActorHead(nn.Module):
    """Features (B, F) -> tanh-Gaussian over actions in [-1, 1]^A."""

    def __init__(self, config: SacNetConfig, in_dim: int) -> None:
        super().__init__()
        self.net = mlp(in_dim, config.hidden_dims)
        self.mean = nn.Linear(config.hidden_dims[-1], config.action_dim)
        self.log_std = nn.Linear(config.hidden_dims[-1], config.action_dim)
        for layer in (self.mean, self.log_std):
            nn.init.uniform_(layer.weight, -0.05, 0.05)
            nn.init.uniform_(layer.bias, -0.05, 0.05)
        self.log_std_range = (config.log_std_min, config.log_std_max)

    def forward(
        self, features: torch.Tensor, generator: torch.Generator | None = None, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, A) actions in [-1, 1] and their (B,) log-probabilities (nats, tanh-corrected)."""
        h = self.net(features)
        mean = self.mean(h)
        lo, hi = self.log_std_range
        log_std = lo + 0.5 * (hi - lo) * (torch.tanh(self.log_std(h)) + 1.0)
        if deterministic:
            u = mean
        else:
            # drawn where the generator lives (a CPU generator: the same noise on every device)
            at = generator.device if generator is not None else mean.device
            eps = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=at).to(mean.device)
            u = mean + log_std.exp() * eps
        return torch.tanh(u), tanh_gaussian_log_prob(u, mean, log_std)


def tanh_gaussian_log_prob(u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """(B,) log-density of a = tanh(u) with u ~ N(mean, exp(log_std)^2) per dimension:
    sum_i [log N(u_i) - log(1 - tanh(u_i)^2)], the Jacobian term written as
    2 (log 2 - u - softplus(-2u)) for stability."""
    normal = -0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    jacobian = 2.0 * (LOG_2 - u - F.softplus(-2.0 * u))
    return (normal - jacobian).sum(-1)


class CriticEnsemble(nn.Module):
    """(B, F) features and (B, A) actions -> (N, B) Q-values of N independent heads."""

    def __init__(self, config: SacNetConfig, in_dim: int, action_dim: int | None = None) -> None:
        super().__init__()
        a = config.action_dim if action_dim is None else action_dim
        self.heads = nn.ModuleList(
            nn.Sequential(mlp(in_dim + a, config.hidden_dims), nn.Linear(config.hidden_dims[-1], 1))
            for _ in range(config.num_critics)
        )

    def forward(self, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        x = torch.cat([features, actions], dim=-1)
        return torch.stack([head(x).squeeze(-1) for head in self.heads])


class SacActor(nn.Module):
    """What the robot side runs: the observation encoder and the actor head."""

    def __init__(self, config: SacNetConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = ObservationEncoder(config)
        self.head = ActorHead(config, self.encoder.out_dim)

    def forward(
        self, obs: dict[str, torch.Tensor], generator: torch.Generator | None = None, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.head(self.encoder(obs), generator, deterministic)
