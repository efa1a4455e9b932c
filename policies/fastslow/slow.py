"""The slow pathway: camera images + instruction -> a few latent tokens.

One small CNN per camera, FiLM-conditioned on the instruction (so the text can pick
which object the keypoints track), ending in a spatial soft-argmax (keypoints) and an
average pool; a learned word-level text encoder (embedding + one transformer layer).
Latent: (B, 1 + cameras, width) = [text token, one token per camera].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from robotrl.core.policy import past_frame_ticks_back
from robotrl.policies.fastslow.config import FastSlowConfig


def resize_images(images: torch.Tensor, size_px: int) -> torch.Tensor:
    """(N, 3, h, w) uint8 -> (N, 3, size, size) uint8 (area-averaged when shrinking)."""
    if images.shape[-2:] == (size_px, size_px):
        return images
    x = images.float()
    shrink = images.shape[-1] >= size_px and images.shape[-2] >= size_px
    x = F.interpolate(
        x, size=(size_px, size_px), mode="area" if shrink else "bilinear", align_corners=None if shrink else False
    )
    return x.round().clamp(0, 255).to(torch.uint8)


class SpatialSoftArgmax(nn.Module):
    """(B, C, h, w) feature maps -> (B, 2C) expected (x, y) in [-1, 1] per channel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        attn = torch.softmax(x.flatten(2), dim=-1).view(b, c, h, w)
        ys = torch.linspace(-1, 1, h, dtype=x.dtype, device=x.device)
        xs = torch.linspace(-1, 1, w, dtype=x.dtype, device=x.device)
        return torch.cat([(attn.sum(2) * xs).sum(-1), (attn.sum(3) * ys).sum(-1)], dim=1)


class ImageEncoder(nn.Module):
    """One camera: conv stack (first two layers stride 2), FiLM on the last layer from
    the text token, keypoints + average pool -> one token of `width`. `frames` images of
    the camera are stacked on the channels (the newest first)."""

    def __init__(self, channels: tuple[int, ...], width: int, frames: int = 1) -> None:
        super().__init__()
        layers, c_in = [], 3 * frames
        for i, c in enumerate(channels):
            k, stride = (5, 2) if i == 0 else (3, 2 if i == 1 else 1)
            layers.append(nn.Conv2d(c_in, c, k, stride, padding=k // 2))
            layers.append(nn.GroupNorm(min(8, c), c))
            layers.append(nn.SiLU())
            c_in = c
        self.convs = nn.Sequential(*layers[:-2])  # the last norm + activation follow FiLM
        self.last_norm = layers[-2]
        self.film = nn.Linear(width, 2 * c_in)
        nn.init.zeros_(self.film.weight)
        nn.init.zeros_(self.film.bias)
        self.keypoints = SpatialSoftArgmax()
        self.out = nn.Sequential(nn.Linear(3 * c_in, width), nn.SiLU(), nn.Linear(width, width))

    def forward(self, images_u8: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        x = images_u8.float() / 127.5 - 1.0
        x = self.last_norm(self.convs(x))
        scale, shift = self.film(text).chunk(2, dim=-1)
        x = F.silu(x * (1 + scale[:, :, None, None]) + shift[:, :, None, None])
        return self.out(torch.cat([self.keypoints(x), x.mean((2, 3))], dim=1))


class TextEncoder(nn.Module):
    """(B, L) token ids (0 = pad) -> (B, width): embedding, one transformer layer,
    masked mean pool."""

    def __init__(self, vocab_size: int, max_words: int, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width, padding_idx=0)
        self.pos = nn.Parameter(torch.zeros(max_words, width))
        self.layer = nn.TransformerEncoderLayer(
            width, nhead=4, dim_feedforward=2 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.norm = nn.LayerNorm(width)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pad = tokens == 0
        pad[:, 0] = False  # an empty instruction still attends to one (pad) token
        x = self.layer(self.embed(tokens) + self.pos[: tokens.shape[1]], src_key_padding_mask=pad)
        keep = (~pad).float()[..., None]
        return self.norm((x * keep).sum(1) / keep.sum(1))


class SlowEncoder(nn.Module):
    def __init__(self, config: FastSlowConfig, vocab_size: int) -> None:
        super().__init__()
        self.cameras = config.cameras
        self.text = TextEncoder(vocab_size, config.max_words, config.width)
        frames = 1 + len(past_frame_ticks_back(config.past_frame_ticks, config.past_frames))
        self.images = nn.ModuleList(ImageEncoder(config.cnn_channels, config.width, frames) for _ in config.cameras)

    @property
    def num_tokens(self) -> int:
        return 1 + len(self.cameras)

    def forward(self, images_u8: list[torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
        """images_u8: per camera (B, 3 F, S, S) uint8 (F = 1 + P with past frames: the
        newest frame's channels first); tokens: (B, L) -> (B, 1 + cams, width)."""
        text = self.text(tokens)
        cams = [enc(img, text) for enc, img in zip(self.images, images_u8)]
        return torch.stack([text, *cams], dim=1)
