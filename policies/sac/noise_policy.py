"""`DsrlChunkPolicy`: a frozen FastSlowPolicy steered by a learned noise actor (DSRL).

The noise actor (a `SacActor` over state [+ env_state]) outputs a in [-1, 1]^(H*A); the
flow's initial noise is w = noise_bound * a reshaped to (H, A), and the frozen flow maps
w to an in-support chunk. `load_weights` replaces only the noise actor. Inference-time
RTC is not applied (the noise is the actor's, not a guided sample).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from robotrl.hardware.errors import ConfigError
from robotrl.policies.base import ActionChunk, PolicyMetadata, PolicyObservation
from robotrl.policies.checkpoint import (load_weights_bytes, read_checkpoint, save_weights_bytes,
                                         write_checkpoint)
from robotrl.policies.fastslow.policy import FastSlowPolicy
from robotrl.policies.sac.config import SacNetConfig
from robotrl.policies.sac.networks import SacActor

POLICY_TYPE = "dsrl"
FLOW_FOLDER = "flow"


class DsrlChunkPolicy:
    def __init__(self, flow: FastSlowPolicy, actor: SacActor, noise_bound: float, *, seed: int = 0,
                 version: int = 0, deterministic: bool = False) -> None:
        c = flow.config
        if actor.config.action_dim != c.horizon * c.action_dim:
            raise ConfigError(f"the noise actor outputs {actor.config.action_dim} values, the flow needs "
                              f"{c.horizon} x {c.action_dim}")
        self.flow = flow
        self.actor = actor.eval()
        self.noise_bound = noise_bound
        self.seed = seed
        self.version = version
        self.deterministic = deterministic
        self._generator = torch.Generator()

    @property
    def metadata(self) -> PolicyMetadata:
        m = self.flow.metadata
        return PolicyMetadata(POLICY_TYPE, m.horizon, m.action_dim, m.control_rate_hz, m.state_dim, m.cameras,
                              m.image_size_px, m.normalization_id, m.env_state_dim)

    def reset(self) -> None:
        """Stateless between chunks: nothing to clear."""

    @torch.no_grad()
    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
        """(H, A) absolute targets (radians) from the flow with the actor's noise."""
        c, flow = self.flow.config, self.flow
        state = flow._state(obs)
        actor_obs = {"state": state}
        if self.actor.config.env_state_dim:
            actor_obs["env_state"] = flow._env_state(obs)
        self._generator.manual_seed((self.seed * 1_000_003 + obs.tick * 7_919 + 777) % (2 ** 63))
        unit, _ = self.actor(actor_obs, self._generator, self.deterministic)
        noise = (self.noise_bound * unit).reshape(1, c.horizon, c.action_dim)
        latent = flow.encode_slow(obs)
        age = torch.tensor([obs.delay_ticks])
        x = flow.model.sample_chunk(latent[None], age, flow._fresh(state, [obs]), noise)
        actions = flow.normalizer.decode_chunk(x, state)[0].numpy().astype(np.float64)
        return ActionChunk(actions, obs.tick + obs.delay_ticks, self.version)

    def weights_bytes(self) -> bytes:
        """Noise actor weights as safetensors bytes."""
        return save_weights_bytes(self.actor.state_dict())

    def load_weights(self, data: bytes) -> None:
        """Replace the noise actor's weights (the flow stays frozen)."""
        self.actor.load_state_dict(load_weights_bytes(data, self.actor.state_dict()))

    def save(self, path: Path) -> None:
        """Checkpoint folder: the noise actor (model.safetensors + config.json) and the flow
        policy's own checkpoint in `flow/`."""
        path = Path(path)
        write_checkpoint(path, POLICY_TYPE, self.actor.state_dict(),
                         {"config": self.actor.config.to_dict(), "noise_bound": self.noise_bound,
                          "training": {"version": self.version}})
        self.flow.save(path / FLOW_FOLDER)

    @classmethod
    def load(cls, path: Path, *, seed: int = 0) -> DsrlChunkPolicy:
        doc, tensors = read_checkpoint(path, POLICY_TYPE)
        actor = SacActor(SacNetConfig.from_dict(doc["config"]))
        actor.load_state_dict(tensors)
        flow = FastSlowPolicy.load(Path(path) / FLOW_FOLDER, seed=seed)
        return cls(flow, actor, float(doc["noise_bound"]), seed=seed,
                   version=int(doc.get("training", {}).get("version", 0)))
