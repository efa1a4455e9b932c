"""`ActorPolicy`: live weights and checkpoint folders of a policy whose trained part is a
`SacActor` (`SacChunkPolicy`, `DsrlChunkPolicy`).

The checkpoint folder holds model.safetensors (the actor) and config.json: the actor's
`SacNetConfig` under "config", what the policy adds, and "training": {"version": ...}.
"""

from __future__ import annotations

from pathlib import Path
from typing import Self

import torch

from robotrl.core.seeds import tick_seed
from robotrl.policies.checkpoint import load_weights_bytes, read_checkpoint, save_weights_bytes, write_checkpoint
from robotrl.policies.device import load_staged, module_device, stage_tensors, to_device, torch_device
from robotrl.policies.sac.config import SacNetConfig
from robotrl.policies.sac.networks import SacActor


class ActorPolicy:
    """Shared code of the actor policies: construction, seeded actions, live weights and
    checkpoints. Sampled noise is seeded by (seed, tick, the subclass's `NOISE_SALT`), so
    the same observation always gives the same chunk; `deterministic=True` serves the mean."""

    NOISE_SALT: int
    """Offset of the noise seed, distinct per policy type."""

    def __init__(self, actor: SacActor, *, seed: int = 0, version: int = 0, deterministic: bool = False) -> None:
        self.actor = actor.eval()
        self.seed = seed
        self.version = version
        self.deterministic = deterministic
        self._generator = torch.Generator()

    def reset(self) -> None:
        """Stateless between chunks: nothing to clear."""

    @property
    def device(self) -> torch.device:
        """Where the actor runs."""
        return module_device(self.actor)

    def to(self, device: str | torch.device) -> Self:
        """Move the actor to `device` (auto, cpu, cuda, cuda:N); returns the policy."""
        self.actor.to(torch_device(device))
        return self

    def _act(self, obs: dict[str, torch.Tensor], tick: int) -> torch.Tensor:
        """(1, D) actor output in [-1, 1], on the CPU, for the observation dict `obs` (CPU
        tensors, moved to the actor's device) taken at `tick`."""
        self._generator.manual_seed(tick_seed(self.seed, tick, self.NOISE_SALT))
        unit, _ = self.actor(to_device(obs, self.device), self._generator, self.deterministic)
        return unit.float().cpu()

    def weights_bytes(self) -> bytes:
        """Actor (encoder + head) weights as safetensors bytes."""
        return save_weights_bytes(self.actor.state_dict())

    def load_weights(self, data: bytes) -> None:
        """Replace the actor's weights with safetensors bytes (names and shapes must match),
        copied onto the actor's device; nothing else changes."""
        self.swap_weights(self.stage_weights(data))

    def stage_weights(self, data: bytes) -> dict[str, torch.Tensor]:
        """The actor's weights from safetensors bytes, checked and on its device, not yet
        in service (any thread)."""
        like = self.actor.state_dict()
        return stage_tensors(load_weights_bytes(data, like), like)

    def swap_weights(self, staged: dict[str, torch.Tensor]) -> None:
        """Put `stage_weights` output in service (a copy on the actor's device)."""
        load_staged(self.actor, staged)

    def _write_actor(self, path: Path, policy_type: str, **payload) -> None:
        """Write the actor's checkpoint folder at `path`, with `payload` in config.json."""
        write_checkpoint(
            path,
            policy_type,
            self.actor.state_dict(),
            {"config": self.actor.config.to_dict(), **payload, "training": {"version": self.version}},
        )


def read_actor(path: Path, policy_type: str) -> tuple[SacActor, dict, int]:
    """(actor with its weights, config.json, training version) of the checkpoint at `path`."""
    doc, tensors = read_checkpoint(path, policy_type)
    actor = SacActor(SacNetConfig.from_dict(doc["config"]))
    actor.load_state_dict(tensors)
    return actor, doc, int(doc.get("training", {}).get("version", 0))
