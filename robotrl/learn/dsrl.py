"""`dsrl`: DSRL with noise aliasing (DSRL-NA) over a frozen FastSlowPolicy.

- Action-space critic Q(s, x): x = the executed chunk (H, A), normalised by the flow's own
  statistics and flattened; trained by chunk TD from buffer chunks, so off-policy and
  intervention chunks enter here (noise aliasing):
      y = sum_i gamma^i r_i (real rows) + gamma^n (1 - done) [min Q'(s', flow(s', w')) - alpha log pi(w'|s')],
  n = real rows, w' ~ pi(.|s').
- Noise actor pi(w|s) (tanh Gaussian, w = noise_bound * a) maximises
  min Q(s, flow(s, w)) - alpha log pi(w|s); gradients flow through the frozen flow's
  Euler steps into w. Temperature tuned to target entropy -(H A)/2.
Needs `ChunkSample.reward (B, H)`, `next_state`, `next_env_state`, `next_images`, `done`.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass

import numpy as np
import torch

from robotrl.buffer.sampler import ChunkSample
from robotrl.buffer.spec import TransitionSpec
from robotrl.hardware.errors import ConfigError
from robotrl.learn.algorithm import (batch_metrics, load_optimizer_state, module_state, optimizer_state,
                                     soft_update)
from robotrl.learn.hil_flow import flow_inputs
from robotrl.policies.checkpoint import save_weights_bytes
from robotrl.policies.fastslow import flow as flow_math
from robotrl.policies.fastslow.policy import FastSlowPolicy
from robotrl.policies.sac.config import SacNetConfig
from robotrl.policies.sac.networks import CriticEnsemble, SacActor
from robotrl.policies.sac.noise_policy import DsrlChunkPolicy


def chunk_returns(reward: np.ndarray, mask: np.ndarray, discount: float) -> tuple[np.ndarray, np.ndarray]:
    """(B, H) rewards and real-row mask -> ((B,) sum_i gamma^i r_i over real rows, (B,)
    gamma^n with n the number of real rows)."""
    h = reward.shape[1]
    powers = discount ** np.arange(h, dtype=np.float64)
    m = np.asarray(mask, bool)
    returns = (np.asarray(reward, np.float64) * m * powers).sum(1)
    return returns.astype(np.float32), (discount ** m.sum(1)).astype(np.float32)


@dataclass(frozen=True)
class DsrlConfig:
    batch_size: int = 64
    """Chunks per critic step."""
    utd_ratio: int = 2
    """Critic steps per actor step."""
    discount: float = 0.97
    """Per-tick discount (a chunk of n real rows is discounted by gamma^n)."""
    tau: float = 0.005
    """Polyak rate of the target critics."""
    actor_lr: float = 3e-4
    """Adam learning rate of the noise actor head."""
    critic_lr: float = 3e-4
    """Adam learning rate of the critics and the shared encoder."""
    temperature_lr: float = 3e-4
    """Adam learning rate of log(alpha)."""
    init_temperature: float = 0.1
    """Initial entropy temperature."""
    noise_bound: float = 1.5
    """Largest |w| (in noise std units) the actor can choose."""
    latent_dim: int = 128
    """Width of the state / env_state encodings."""
    hidden_dims: tuple[int, ...] = (256, 256)
    """Hidden layers of the noise actor and of each critic."""
    grad_clip: float = 10.0
    """Gradient norm clip."""
    deterministic_serving: bool = False
    """Serve the actor's mean noise (True) or sample it."""

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.utd_ratio < 1 or self.noise_bound <= 0:
            raise ConfigError("DsrlConfig: batch_size, utd_ratio must be >= 1 and noise_bound > 0")
        object.__setattr__(self, "hidden_dims", tuple(self.hidden_dims))


DSRL_PRESETS: dict[str, DsrlConfig] = {
    "default": DsrlConfig(),
    "small": DsrlConfig(batch_size=16, latent_dim=32, hidden_dims=(64, 64)),
}
"""default: DSRL-NA sizes; small: tests and smoke runs."""


class Dsrl:
    name = "dsrl"

    def __init__(self, spec: TransitionSpec, policy: FastSlowPolicy, config: DsrlConfig, *, seed: int = 0) -> None:
        c = policy.config
        if (spec.state_dim, spec.action_dim) != (c.state_dim, c.action_dim):
            raise ConfigError(f"the policy reads state {c.state_dim} / action {c.action_dim}, the buffer spec has "
                              f"{spec.state_dim} / {spec.action_dim}")
        self.config = config
        self.flow = policy
        policy.model.eval().requires_grad_(False)
        self.horizon = c.horizon
        self.net = SacNetConfig(c.state_dim, c.horizon * c.action_dim, c.env_state_dim if c.use_env_state else 0,
                                {}, config.latent_dim, config.hidden_dims)
        torch.manual_seed(seed)
        self.actor = SacActor(self.net)
        self.critic = CriticEnsemble(self.net, self.actor.encoder.out_dim)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.nn.Parameter(torch.tensor(np.log(config.init_temperature), dtype=torch.float32))
        self.target_entropy = -0.5 * self.net.action_dim
        self.optim = {
            "critic": torch.optim.Adam([*self.critic.parameters(), *self.actor.encoder.parameters()],
                                       lr=config.critic_lr),
            "actor": torch.optim.Adam(self.actor.head.parameters(), lr=config.actor_lr),
            "temperature": torch.optim.Adam([self.log_alpha], lr=config.temperature_lr),
        }
        self.generator = torch.Generator().manual_seed(seed)
        self.seed = seed
        self.updates = 0

    # --- flow helpers ------------------------------------------------------------------------
    def _condition(self, state, env_state, images, instruction) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Frozen flow conditioning (B, ...) at age 0, and the actor/critic observation dict."""
        inputs = flow_inputs(self.flow, state, env_state, images, instruction)
        with torch.no_grad():
            latent = self.flow.model.encode_slow(inputs["images"], inputs["tokens"])
            fresh = self.flow.normalizer.fresh(inputs["state"], inputs["env_state"], inputs["ee"])
            cond = self.flow.model.expert.condition(latent, torch.zeros(len(state), dtype=torch.long), fresh)
        obs = {"state": inputs["state"]}
        if self.net.env_state_dim:
            obs["env_state"] = inputs["env_state"]
        return cond, obs

    def _flow(self, cond: torch.Tensor, unit: torch.Tensor) -> torch.Tensor:
        """(B, H*A) actor output in [-1, 1] -> (B, H*A) normalised chunk (differentiable in unit)."""
        c = self.flow.config
        noise = (self.config.noise_bound * unit).reshape(-1, c.horizon, c.action_dim)
        velocity = lambda x, tau_rows: self.flow.model.expert.velocity(x, tau_rows, cond)  # noqa: E731
        return flow_math.sample(velocity, noise, c.flow_steps).flatten(1)

    # --- one update ------------------------------------------------------------------------
    def update(self, buffer, learner_version: int, rng: np.random.Generator) -> dict[str, float]:
        cfg = self.config
        for _ in range(cfg.utd_ratio):
            s = buffer.sample_chunks(cfg.batch_size, self.horizon, learner_version, rng)
            cond, obs = self._condition(s.state, s.env_state, s.images, s.instruction)
            critic_loss, q_mean, grad = self._critic_step(s, obs)
        features = self.actor.encoder(obs).detach()
        unit, log_prob = self.actor.head(features, self.generator)
        q = self.critic(features, self._flow(cond, unit)).min(0).values
        actor_loss = (self.log_alpha.exp().detach() * log_prob - q).mean()
        actor_grad = self._step("actor", actor_loss, self.actor.head.parameters())
        temperature_loss = -(self.log_alpha.exp() * (log_prob.detach() + self.target_entropy)).mean()
        self._step("temperature", temperature_loss, [self.log_alpha])
        self.updates += 1
        return {"loss_critic": critic_loss, "loss_actor": float(actor_loss.detach()),
                "loss_temperature": float(temperature_loss.detach()),
                "temperature": float(self.log_alpha.detach().exp()), "q_mean": q_mean, "grad_norm": grad,
                "grad_norm_actor": actor_grad, "ess": 1.0,
                **batch_metrics(s.staleness, s.intervention[:, 0], s.is_demo)}

    def _critic_step(self, s: ChunkSample, obs: dict[str, torch.Tensor]) -> tuple[float, float, float]:
        cfg = self.config
        ret, gamma_n = (torch.from_numpy(x) for x in chunk_returns(s.reward, s.mask, cfg.discount))
        with torch.no_grad():
            next_cond, next_obs = self._condition(s.next_state, s.next_env_state, s.next_images, s.instruction)
            next_features = self.actor.encoder(next_obs)
            next_unit, next_log_prob = self.actor.head(next_features, self.generator)
            next_q = self.critic_target(next_features, self._flow(next_cond, next_unit)).min(0).values
            done = torch.from_numpy(np.asarray(s.done, np.float32))
            target = ret + gamma_n * (1.0 - done) * (next_q - self.log_alpha.exp() * next_log_prob)
            state = torch.from_numpy(np.asarray(s.state, np.float32))
            executed = self.flow.normalizer.encode_chunk(torch.from_numpy(np.asarray(s.actions, np.float32)), state)
        q = self.critic(self.actor.encoder(obs), executed.flatten(1))
        loss = ((q - target[None]) ** 2).mean(1).sum()
        grad = self._step("critic", loss, [*self.critic.parameters(), *self.actor.encoder.parameters()])
        soft_update(self.critic_target, self.critic, cfg.tau)
        return float(loss.detach()), float(q.detach().mean()), grad

    def _step(self, name: str, loss: torch.Tensor, params) -> float:
        optimizer = self.optim[name]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad = torch.nn.utils.clip_grad_norm_(list(params), self.config.grad_clip)
        optimizer.step()
        return float(grad)

    # --- serving and checkpoints ----------------------------------------------------------
    def policy_weights(self) -> bytes:
        return save_weights_bytes(self.actor.state_dict())

    def served_policy(self) -> DsrlChunkPolicy:
        return DsrlChunkPolicy(self.flow, copy.deepcopy(self.actor), self.config.noise_bound, seed=self.seed,
                               deterministic=self.config.deterministic_serving)

    def state_dict(self) -> dict:
        return {"actor": module_state(self.actor), "critic": module_state(self.critic),
                "critic_target": module_state(self.critic_target), "log_alpha": self.log_alpha.detach().clone(),
                "optim": {k: optimizer_state(o) for k, o in self.optim.items()},
                "generator": self.generator.get_state(), "updates": self.updates,
                "config": json.dumps(asdict(self.config))}

    def load_state_dict(self, state: dict) -> None:
        if json.loads(state["config"]) != json.loads(json.dumps(asdict(self.config))):
            raise ConfigError("the checkpoint was written with another dsrl config; resume with the same preset")
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        for k, o in self.optim.items():
            load_optimizer_state(o, state["optim"][k])
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])
