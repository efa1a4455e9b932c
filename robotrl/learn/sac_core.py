"""`SacCore`: the soft actor-critic machinery that `sac` and `dsrl` share.

Both learn a tanh-Gaussian `SacActor` (encoder + head) and a `CriticEnsemble` with Polyak
targets over the actor's encoder features, with a tuned temperature alpha = exp(log_alpha).
They differ in what the critic scores: `sac` scores the actor's action itself, `dsrl` the
chunk the frozen flow makes from it. So the steps that query the critics with the actor's
output take `to_action`, the map from that (B, D) output in [-1, 1] to the critics'
(B, D') action input.

- critic: loss = sum over critics of mean_b (Q_k(s, a) - y)^2, one Adam step on the
  critics and the shared encoder (gradient norm clipped), then the Polyak target update;
- actor: loss = mean(alpha log pi(u|s) - min_k Q_k(s, to_action(u))) on detached features;
- temperature: loss = -mean(alpha (log pi(u|s) + target_entropy)).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch

from robotrl.core.errors import ConfigError
from robotrl.learn.algorithm import (
    check_saved_config,
    config_json,
    load_optimizer_state,
    module_state,
    optimizer_state,
    soft_update,
)
from robotrl.policies.checkpoint import save_weights_bytes
from robotrl.policies.device import CPU
from robotrl.policies.sac.config import SacNetConfig
from robotrl.policies.sac.networks import CriticEnsemble, SacActor

ToAction = Callable[[torch.Tensor], torch.Tensor]
"""The actor's (B, D) output in [-1, 1] -> the critic's (B, D') action input."""


def _identity(unit: torch.Tensor) -> torch.Tensor:
    return unit


@dataclass(frozen=True)
class SacCoreConfig:
    """Fields of every `SacCore` learner; subclasses add their own and may change defaults."""

    batch_size: int = 256
    """Examples per critic step."""
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
    grad_clip: float = 10.0
    """Gradient norm clip of every optimizer step."""
    latent_dim: int = 256
    """Width of each input's encoding."""
    hidden_dims: tuple[int, ...] = (256, 256)
    """Hidden layers of the actor and of each critic."""
    deterministic_serving: bool = False
    """Serve the actor's mean (True) or sample from it (exploration)."""

    def __post_init__(self) -> None:
        name = type(self).__name__
        if self.batch_size < 1 or self.utd_ratio < 1:
            raise ConfigError(f"{name}: batch_size and utd_ratio must be >= 1")
        if not 0.0 < self.discount <= 1.0 or not 0.0 < self.tau <= 1.0:
            raise ConfigError(f"{name}: discount and tau must be in (0, 1]")
        object.__setattr__(self, "hidden_dims", tuple(self.hidden_dims))


class SacCore:
    """Actor, critics, targets, temperature, optimizers, their update steps, the served
    weights and the `state_dict` of an `Algorithm`.

    A subclass sets `name`, builds the `SacNetConfig` and implements `update` (sample a
    batch, form the TD target with `_soft_next_value`, `_regress_critics`; `utd_ratio`
    times; then `_actor_temperature_step` once) and `served_policy`.
    """

    name: str

    def __init__(
        self,
        net: SacNetConfig,
        config: SacCoreConfig,
        target_entropy: float,
        *,
        seed: int,
        device: torch.device = CPU,
    ) -> None:
        self.net = net
        self.config = config
        self.seed = seed
        self.device = device
        """Where the networks train; batches are moved here, random draws stay on the CPU."""
        torch.manual_seed(seed)
        self.actor = SacActor(net).to(device)
        self.critic = CriticEnsemble(net, self.actor.encoder.out_dim).to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        log_alpha = torch.tensor(np.log(config.init_temperature), dtype=torch.float32, device=device)
        self.log_alpha = torch.nn.Parameter(log_alpha)
        self.target_entropy = target_entropy
        self.optim = {
            "critic": torch.optim.Adam(self._critic_params(), lr=config.critic_lr),
            "actor": torch.optim.Adam(self.actor.head.parameters(), lr=config.actor_lr),
            "temperature": torch.optim.Adam([self.log_alpha], lr=config.temperature_lr),
        }
        self.generator = torch.Generator().manual_seed(seed)
        self.updates = 0

    @property
    def alpha(self) -> torch.Tensor:
        """The entropy temperature exp(log_alpha), with gradient to log_alpha."""
        return self.log_alpha.exp()

    # --- update steps ------------------------------------------------------------------------
    def _soft_next_value(self, next_obs: dict[str, torch.Tensor], to_action: ToAction = _identity) -> torch.Tensor:
        """(B,) min_k Q'_k(s', to_action(u')) - alpha log pi(u'|s'), u' ~ pi(.|s'); call
        under `torch.no_grad()`."""
        next_features = self.actor.encoder(next_obs)
        next_unit, next_log_prob = self.actor.head(next_features, self.generator)
        return self.critic_target(next_features, to_action(next_unit)).min(0).values - self.alpha * next_log_prob

    def _regress_critics(
        self, obs: dict[str, torch.Tensor], action: torch.Tensor, target: torch.Tensor
    ) -> tuple[float, float, float]:
        """One critic step: every critic's Q(obs, action) regressed on the (B,) `target`,
        then the Polyak target update. Returns (loss, mean Q, gradient norm)."""
        q = self.critic(self.actor.encoder(obs), action)
        loss = ((q - target[None]) ** 2).mean(1).sum()
        grad = self._step("critic", loss, self._critic_params())
        soft_update(self.critic_target, self.critic, self.config.tau)
        return float(loss.detach()), float(q.detach().mean()), grad

    def _actor_temperature_step(
        self,
        obs: dict[str, torch.Tensor],
        critic: tuple[float, float, float],
        data: dict[str, float],
        to_action: ToAction = _identity,
    ) -> dict[str, float]:
        """One actor step and one temperature step on `obs`, which ends the update. Returns
        the update's metrics, with `critic` (the last `_regress_critics` result) and `data`
        (`batch_metrics` of the last batch)."""
        features = self.actor.encoder(obs).detach()
        unit, log_prob = self.actor.head(features, self.generator)
        actor_loss = (self.alpha.detach() * log_prob - self.critic(features, to_action(unit)).min(0).values).mean()
        actor_grad = self._step("actor", actor_loss, self.actor.head.parameters())
        temperature_loss = -(self.log_alpha.exp() * (log_prob.detach() + self.target_entropy)).mean()
        self._step("temperature", temperature_loss, [self.log_alpha])
        self.updates += 1
        critic_loss, q_mean, critic_grad = critic
        return {
            "loss_critic": critic_loss,
            "loss_actor": float(actor_loss.detach()),
            "loss_temperature": float(temperature_loss.detach()),
            "temperature": float(self.alpha.detach()),
            "entropy": float(-log_prob.detach().mean()),
            "q_mean": q_mean,
            "grad_norm": critic_grad,
            "grad_norm_actor": actor_grad,
            "ess": 1.0,
            **data,
        }

    def _critic_params(self) -> list[torch.nn.Parameter]:
        return [*self.critic.parameters(), *self.actor.encoder.parameters()]

    def _step(self, name: str, loss: torch.Tensor, params: Iterable[torch.nn.Parameter]) -> float:
        optimizer = self.optim[name]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad = torch.nn.utils.clip_grad_norm_(list(params), self.config.grad_clip)
        optimizer.step()
        return float(grad)

    # --- weights and checkpoints ----------------------------------------------------------
    def policy_weights(self) -> bytes:
        return save_weights_bytes(self.actor.state_dict())

    def state_dict(self) -> dict:
        return {
            "actor": module_state(self.actor),
            "critic": module_state(self.critic),
            "critic_target": module_state(self.critic_target),
            "log_alpha": self.log_alpha.detach().clone(),
            "optim": {k: optimizer_state(o) for k, o in self.optim.items()},
            "generator": self.generator.get_state(),
            "updates": self.updates,
            "config": config_json(self.config),
        }

    def load_state_dict(self, state: dict) -> None:
        check_saved_config(state, self.config, self.name)
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        for k, o in self.optim.items():
            load_optimizer_state(o, state["optim"][k])
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])
