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
import json
from dataclasses import asdict, dataclass

import numpy as np
import torch

from robotrl.buffer.sampler import TransitionSample
from robotrl.buffer.spec import TransitionSpec
from robotrl.hardware.errors import ConfigError
from robotrl.learn.algorithm import (batch_metrics, load_optimizer_state, module_state, optimizer_state,
                                     soft_update)
from robotrl.policies.checkpoint import save_weights_bytes
from robotrl.policies.sac.config import SacNetConfig
from robotrl.policies.sac.networks import CriticEnsemble, SacActor, random_shift
from robotrl.policies.sac.policy import SacChunkPolicy, delta_to_unit, observation_tensors


@dataclass(frozen=True)
class SacConfig:
    batch_size: int = 256
    """Transitions per critic step."""
    utd_ratio: int = 2
    """Critic steps per actor step (update-to-data / critic-to-actor ratio)."""
    discount: float = 0.97
    """Per-tick discount gamma."""
    tau: float = 0.005
    """Polyak rate of the target critics."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor head."""
    critic_lr: float = 3e-4
    """Adam learning rate of the critics and the shared encoder."""
    temperature_lr: float = 3e-4
    """Adam learning rate of log(alpha)."""
    init_temperature: float = 0.1
    """Initial entropy temperature alpha."""
    target_entropy_per_dim: float = -0.5
    """Target entropy = this x |A| (HIL-SERL: -|A|/2)."""
    grad_clip: float = 10.0
    """Gradient norm clip of every optimizer step."""
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
    latent_dim: int = 256
    """Width of each input's encoding."""
    hidden_dims: tuple[int, ...] = (256, 256)
    """Hidden layers of the actor and of each critic."""
    cnn_channels: int = 32
    """Channels of the image encoder."""
    deterministic_serving: bool = False
    """Serve the actor's mean (True) or sample from it (exploration)."""

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.utd_ratio < 1:
            raise ConfigError("SacConfig: batch_size and utd_ratio must be >= 1")
        if not 0.0 < self.discount <= 1.0 or not 0.0 < self.tau <= 1.0:
            raise ConfigError("SacConfig: discount and tau must be in (0, 1]")
        object.__setattr__(self, "hidden_dims", tuple(self.hidden_dims))


SAC_PRESETS: dict[str, SacConfig] = {
    "default": SacConfig(),
    "state": SacConfig(use_images=False),
    "tiny": SacConfig(batch_size=64, latent_dim=64, hidden_dims=(64, 64), cnn_channels=8, use_images=False),
}
"""default: HIL-SERL-sized networks on state, env_state and images; state: the same
without images (fast on CPU); tiny: small networks for tests and smoke runs."""


class Sac:
    name = "sac"

    def __init__(self, spec: TransitionSpec, config: SacConfig, *, seed: int = 0) -> None:
        self.config = config
        self.seed = seed
        self.net = SacNetConfig(spec.state_dim, spec.action_dim,
                                spec.env_state_dim if config.use_env_state else 0,
                                dict(spec.cameras) if config.use_images else {}, config.latent_dim,
                                config.hidden_dims, config.cnn_channels, max_step_rad=config.max_step_rad,
                                horizon=config.horizon, control_rate_hz=config.control_rate_hz)
        if spec.action_dim > spec.state_dim:
            raise ConfigError(f"sac needs action_dim <= state_dim (deltas from the state), got {spec}")
        torch.manual_seed(seed)
        self.actor = SacActor(self.net)
        self.critic = CriticEnsemble(self.net, self.actor.encoder.out_dim)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.nn.Parameter(torch.tensor(np.log(config.init_temperature), dtype=torch.float32))
        self.target_entropy = config.target_entropy_per_dim * spec.action_dim
        self.optim = {
            "critic": torch.optim.Adam([*self.critic.parameters(), *self.actor.encoder.parameters()],
                                       lr=config.critic_lr),
            "actor": torch.optim.Adam(self.actor.head.parameters(), lr=config.actor_lr),
            "temperature": torch.optim.Adam([self.log_alpha], lr=config.temperature_lr),
        }
        self.generator = torch.Generator().manual_seed(seed)
        self.updates = 0

    # --- one update ------------------------------------------------------------------------
    def update(self, buffer, learner_version: int, rng: np.random.Generator) -> dict[str, float]:
        c = self.config
        self.actor.train()
        for _ in range(c.utd_ratio):
            sample: TransitionSample = buffer.sample_transitions(c.batch_size, learner_version, rng)
            obs, action, reward, done, next_obs = self._tensors(sample)
            critic_loss, q_mean, critic_grad = self._critic_step(obs, action, reward, done, next_obs)
        features = self.actor.encoder(obs).detach()
        unit, log_prob = self.actor.head(features, self.generator)
        actor_loss = (self.alpha.detach() * log_prob - self.critic(features, unit).min(0).values).mean()
        actor_grad = self._step("actor", actor_loss, self.actor.head.parameters())
        temperature_loss = -(self.log_alpha.exp() * (log_prob.detach() + self.target_entropy)).mean()
        self._step("temperature", temperature_loss, [self.log_alpha])
        self.updates += 1
        return {"loss_critic": critic_loss, "loss_actor": float(actor_loss.detach()),
                "loss_temperature": float(temperature_loss.detach()),
                "temperature": float(self.alpha.detach()), "entropy": float(-log_prob.detach().mean()), "q_mean": q_mean,
                "grad_norm": critic_grad, "grad_norm_actor": actor_grad, "ess": 1.0,
                **batch_metrics(sample.staleness, sample.intervention, sample.is_demo)}

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.exp()

    def _critic_step(self, obs, action, reward, done, next_obs) -> tuple[float, float, float]:
        c = self.config
        with torch.no_grad():
            next_features = self.actor.encoder(next_obs)
            next_unit, next_log_prob = self.actor.head(next_features, self.generator)
            next_q = self.critic_target(next_features, next_unit).min(0).values - self.alpha * next_log_prob
            target = reward + c.discount * (1.0 - done) * next_q
        q = self.critic(self.actor.encoder(obs), action)
        loss = ((q - target[None]) ** 2).mean(1).sum()
        grad = self._step("critic", loss, [*self.critic.parameters(), *self.actor.encoder.parameters()])
        soft_update(self.critic_target, self.critic, c.tau)
        return float(loss.detach()), float(q.detach().mean()), grad

    def _step(self, name: str, loss: torch.Tensor, params) -> float:
        optimizer = self.optim[name]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad = torch.nn.utils.clip_grad_norm_(list(params), self.config.grad_clip)
        optimizer.step()
        return float(grad)

    def _tensors(self, s: TransitionSample):
        """(obs, unit action (B, A), reward (B,), done (B,) float, next_obs); images shifted."""
        obs = self._augment(observation_tensors(s.state, s.env_state, s.images, self.net))
        next_obs = self._augment(observation_tensors(s.next_state, s.next_env_state, s.next_images, self.net))
        unit = torch.from_numpy(delta_to_unit(np.asarray(s.action, np.float32), np.asarray(s.state, np.float32),
                                              self.net.max_step_rad))
        reward = torch.as_tensor(np.asarray(s.reward, np.float32))
        done = torch.as_tensor(np.asarray(s.done, np.float32))
        return obs, unit, reward, done, next_obs

    def _augment(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: random_shift(v, self.config.shift_px, self.generator) if k.startswith("image.") else v
                for k, v in obs.items()}

    # --- serving and checkpoints ----------------------------------------------------------
    def policy_weights(self) -> bytes:
        return save_weights_bytes(self.actor.state_dict())

    def served_policy(self) -> SacChunkPolicy:
        return SacChunkPolicy(copy.deepcopy(self.actor), seed=self.seed,
                              deterministic=self.config.deterministic_serving)

    def state_dict(self) -> dict:
        return {"actor": module_state(self.actor), "critic": module_state(self.critic),
                "critic_target": module_state(self.critic_target), "log_alpha": self.log_alpha.detach().clone(),
                "optim": {k: optimizer_state(o) for k, o in self.optim.items()},
                "generator": self.generator.get_state(), "updates": self.updates,
                "config": json.dumps(asdict(self.config))}

    def load_state_dict(self, state: dict) -> None:
        saved = json.loads(state["config"])
        if saved != json.loads(json.dumps(asdict(self.config))):
            raise ConfigError("the checkpoint was written with another sac config; resume with the same preset")
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        for k, o in self.optim.items():
            load_optimizer_state(o, state["optim"][k])
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])
