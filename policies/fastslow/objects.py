"""`ObjectSelector`: the instruction picks an object out of the privileged env_state.

env_state is read as `n` object slots of `d` numbers each (pick_place: the xyz of the red,
green and blue cubes and of the bin). The instruction's text token attends over the slots:
keys are learned slot identities (which colour a slot is), values one MLP shared by every
slot. The attended value is "the object the instruction names", learned from every
episode whatever its colour, instead of one position-to-action map per colour learned
from a third of the episodes each.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class ObjectSelector(nn.Module):
    def __init__(self, num_objects: int, object_dim: int, text_width: int, hidden: int) -> None:
        super().__init__()
        self.num_objects, self.object_dim = num_objects, object_dim
        self.slot_keys = nn.Parameter(torch.randn(num_objects, hidden) / math.sqrt(hidden))
        self.query = nn.Linear(text_width, hidden)
        self.value = nn.Sequential(nn.Linear(object_dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden))

    def weights(self, text: torch.Tensor) -> torch.Tensor:
        """(B, W) text token -> (B, n) attention over the object slots."""
        logits = self.query(text) @ self.slot_keys.T / math.sqrt(self.slot_keys.shape[1])
        return torch.softmax(logits, dim=-1)

    def forward(self, text: torch.Tensor, env: torch.Tensor) -> torch.Tensor:
        """text (B, W), env (B, n * d) normalised -> (B, hidden) attended object value."""
        objects = env.reshape(env.shape[0], self.num_objects, self.object_dim)
        return (self.weights(text)[..., None] * self.value(objects)).sum(1)
