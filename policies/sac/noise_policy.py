"""`DsrlChunkPolicy`: a frozen FastSlowPolicy steered by a learned noise actor (DSRL).

The noise actor (a `SacActor` over state [+ env_state]) outputs a in [-1, 1]^(H*A); the
flow's initial noise is w = noise_bound * a reshaped to (H, A), and the frozen flow maps
w to an in-support chunk. `load_weights` replaces only the noise actor (the flow stays
frozen). Inference-time RTC is not applied (the noise is the actor's, not a guided
sample).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from robotrl.core.errors import ConfigError
from robotrl.core.policy import ActionChunk, PolicyMetadata, PolicyObservation
from robotrl.policies.device import to_device, torch_device
from robotrl.policies.fastslow.policy import FastSlowPolicy
from robotrl.policies.sac.actor_policy import ActorPolicy, read_actor
from robotrl.policies.sac.networks import SacActor

POLICY_TYPE = "dsrl"
FLOW_FOLDER = "flow"


class DsrlChunkPolicy(ActorPolicy):
    NOISE_SALT = 777

    def __init__(
        self,
        flow: FastSlowPolicy,
        actor: SacActor,
        noise_bound: float,
        *,
        seed: int = 0,
        version: int = 0,
        deterministic: bool = False,
    ) -> None:
        c = flow.config
        if actor.config.action_dim != c.horizon * c.action_dim:
            raise ConfigError(
                f"the noise actor outputs {actor.config.action_dim} values, the flow needs {c.horizon} x {c.action_dim}"
            )
        super().__init__(actor, seed=seed, version=version, deterministic=deterministic)
        self.flow = flow
        self.noise_bound = noise_bound

    @property
    def metadata(self) -> PolicyMetadata:
        """The flow's (what it reads, its start pose, instructions and rows per request),
        refusing an RTC prefix (the noise is the actor's, not a guided sample); no latent
        cache (each request encodes its own frames)."""
        return replace(self.flow.metadata, policy_type=POLICY_TYPE, follows_rtc_prefix=False, max_latent_age_ticks=None)

    @torch.no_grad()
    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
        """(H, A) absolute targets (radians) from the flow with the actor's noise."""
        c, flow = self.flow.config, self.flow
        state = flow._state(obs)
        actor_obs = {"state": state}
        if self.actor.config.env_state_dim:
            actor_obs["env_state"] = flow._env_state(obs)
        unit = self._act(actor_obs, obs.tick)
        device = flow.device
        noise = (self.noise_bound * unit).reshape(1, c.horizon, c.action_dim).to(device)
        latent = flow.encode_slow(obs)
        age, fresh = to_device((torch.tensor([obs.delay_ticks]), flow._fresh(state, [obs], latent[None])), device)
        x = flow.model.sample_chunk(latent[None], age, fresh, noise).float().cpu()
        actions = flow.normalizer.decode_chunk(x, state)[0].numpy().astype(np.float64)
        return ActionChunk(actions, obs.tick + obs.delay_ticks, self.version)

    def to(self, device: str | torch.device) -> DsrlChunkPolicy:
        """Move the noise actor and the flow to `device`; returns the policy."""
        device = torch_device(device)
        self.actor.to(device)
        self.flow.to(device)
        return self

    def save(self, path: Path) -> None:
        """Checkpoint folder: the noise actor (model.safetensors + config.json) and the flow
        policy's own checkpoint in `flow/`."""
        path = Path(path)
        self._write_actor(path, POLICY_TYPE, noise_bound=self.noise_bound)
        self.flow.save(path / FLOW_FOLDER)

    @classmethod
    def load(cls, path: Path, *, seed: int = 0, device: str | torch.device = "cpu") -> DsrlChunkPolicy:
        """The checkpoint at `path`, read onto the CPU and moved to `device`."""
        actor, doc, version = read_actor(path, POLICY_TYPE)
        flow = FastSlowPolicy.load(Path(path) / FLOW_FOLDER, seed=seed)
        return cls(flow, actor, float(doc["noise_bound"]), seed=seed, version=version).to(device)
