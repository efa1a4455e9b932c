"""`sac`: SAC with RLPD mixing and interventions (HIL-SERL) for small state+image policies.

Batches come from `OnlineBuffer.sample_transitions` (half online, half demo +
intervention rows, staleness-capped by the buffer). Actions are per-tick joint deltas
scaled to [-1, 1] by `max_step_rad` (robotrl.policies.sac.policy.delta_to_unit). Per
update: `utd_ratio` critic steps (each on a fresh batch, each followed by the Polyak
target update), then one actor step and one temperature step on the last batch. The
observation encoder is shared: the critic trains it, the actor reads it detached.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from robotrl.buffer.sampler import TransitionSample
from robotrl.buffer.spec import TransitionSpec
from robotrl.core.errors import ConfigError
from robotrl.core.learning import Sampler
from robotrl.learn.algorithm import batch_metrics
from robotrl.learn.sac_core import SacCore, SacCoreConfig
from robotrl.policies.device import CPU, to_device
from robotrl.policies.sac.config import SacNetConfig
from robotrl.policies.sac.networks import random_shift
from robotrl.policies.sac.policy import SacChunkPolicy, delta_to_unit, observation_tensors


@dataclass(frozen=True)
class SacConfig(SacCoreConfig):
    """`SacCoreConfig` (batch_size counts transitions) plus the observations, actions and
    image encoder of a policy over per-tick joint deltas."""

    target_entropy_per_dim: float = -0.5
    """Target entropy = this x |A| (HIL-SERL: -|A|/2)."""
    shift_px: int = 4
    """Random-shift image augmentation, pixels each way (0: off)."""
    use_images: bool = True
    """Encode the spec's cameras (False: state [+ env_state] only)."""
    use_env_state: bool = True
    """Encode the spec's env_state when it has one (sim only)."""
    max_step_rad: float = 0.05
    """Joint delta per tick at |a| = 1, radians."""
    horizon: int = 2
    """Rows per served chunk."""
    control_rate_hz: float = 30.0
    """Rate at which chunk rows execute."""
    cnn_channels: int = 32
    """Channels of the image encoder."""


SAC_PRESETS: dict[str, SacConfig] = {
    "default": SacConfig(),
    "state": SacConfig(use_images=False),
    "tiny": SacConfig(batch_size=64, latent_dim=64, hidden_dims=(64, 64), cnn_channels=8, use_images=False),
}
"""default: HIL-SERL-sized networks on state, env_state and images; state: the same
without images (fast on CPU); tiny: small networks for tests and smoke runs."""


class Sac(SacCore):
    name = "sac"
    config: SacConfig

    def __init__(self, spec: TransitionSpec, config: SacConfig, *, seed: int = 0, device: torch.device = CPU) -> None:
        net = SacNetConfig(
            spec.state_dim,
            spec.action_dim,
            spec.env_state_dim if config.use_env_state else 0,
            dict(spec.cameras) if config.use_images else {},
            config.latent_dim,
            config.hidden_dims,
            config.cnn_channels,
            max_step_rad=config.max_step_rad,
            horizon=config.horizon,
            control_rate_hz=config.control_rate_hz,
        )
        if spec.action_dim > spec.state_dim:
            raise ConfigError(f"sac needs action_dim <= state_dim (deltas from the state), got {spec}")
        super().__init__(net, config, config.target_entropy_per_dim * spec.action_dim, seed=seed, device=device)

    # --- one update ------------------------------------------------------------------------
    def update(self, buffer: Sampler, learner_version: int, rng: np.random.Generator) -> dict[str, float]:
        c = self.config
        self.actor.train()
        for _ in range(c.utd_ratio):
            sample: TransitionSample = buffer.sample_transitions(c.batch_size, learner_version, rng)
            obs, action, reward, done, next_obs = self._tensors(sample)
            with torch.no_grad():
                target = reward + c.discount * (1.0 - done) * self._soft_next_value(next_obs)
            critic = self._regress_critics(obs, action, target)
        return self._actor_temperature_step(
            obs, critic, batch_metrics(sample.staleness, sample.intervention, sample.is_demo)
        )

    def _tensors(self, s: TransitionSample):
        """(obs, unit action (B, A), reward (B,), done (B,) float, next_obs) on the device;
        images (moved as uint8) shifted there."""
        device = self.device
        obs = self._augment(to_device(observation_tensors(s.state, s.env_state, s.images, self.net), device))
        next_obs = observation_tensors(s.next_state, s.next_env_state, s.next_images, self.net)
        next_obs = self._augment(to_device(next_obs, device))
        unit = torch.from_numpy(
            delta_to_unit(np.asarray(s.action, np.float32), np.asarray(s.state, np.float32), self.net.max_step_rad)
        )
        reward = torch.as_tensor(np.asarray(s.reward, np.float32))
        done = torch.as_tensor(np.asarray(s.done, np.float32))
        return obs, *to_device((unit, reward, done), device), next_obs

    def _augment(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {
            k: random_shift(v, self.config.shift_px, self.generator) if k.startswith("image.") else v
            for k, v in obs.items()
        }

    # --- serving ---------------------------------------------------------------------------
    def served_policy(self) -> SacChunkPolicy:
        return SacChunkPolicy(
            copy.deepcopy(self.actor), seed=self.seed, deterministic=self.config.deterministic_serving
        )
