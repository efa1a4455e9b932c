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
from dataclasses import dataclass

import numpy as np
import torch

from robotrl.buffer.sampler import ChunkSample
from robotrl.buffer.spec import TransitionSpec
from robotrl.core.errors import ConfigError
from robotrl.core.learning import Sampler
from robotrl.learn.algorithm import batch_metrics
from robotrl.learn.hil_flow import check_policy_spec, flow_inputs
from robotrl.learn.sac_core import SacCore, SacCoreConfig
from robotrl.policies.device import CPU, to_device
from robotrl.policies.fastslow import flow as flow_math
from robotrl.policies.fastslow.model import estimated_env_state
from robotrl.policies.fastslow.policy import FastSlowPolicy
from robotrl.policies.sac.config import SacNetConfig
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
class DsrlConfig(SacCoreConfig):
    """`SacCoreConfig` over chunks (a chunk of n real rows is discounted by gamma^n; the
    actor is the noise actor) plus the noise range."""

    batch_size: int = 64
    """Chunks per critic step."""
    latent_dim: int = 128
    """Width of the state / env_state encodings."""
    noise_bound: float = 1.5
    """Largest |w| (in noise std units) the actor can choose."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.noise_bound <= 0:
            raise ConfigError("DsrlConfig: noise_bound must be > 0")


DSRL_PRESETS: dict[str, DsrlConfig] = {
    "default": DsrlConfig(),
    "small": DsrlConfig(batch_size=16, latent_dim=32, hidden_dims=(64, 64)),
}
"""default: DSRL-NA sizes; small: tests and smoke runs."""


class Dsrl(SacCore):
    name = "dsrl"
    config: DsrlConfig

    def __init__(
        self,
        spec: TransitionSpec,
        policy: FastSlowPolicy,
        config: DsrlConfig,
        *,
        seed: int = 0,
        device: torch.device = CPU,
    ) -> None:
        c = policy.config
        check_policy_spec(spec, c)
        self.flow = policy.to(device)
        policy.model.eval().requires_grad_(False)
        self.horizon = c.horizon
        net = SacNetConfig(
            c.state_dim,
            c.horizon * c.action_dim,
            c.env_state_dim if c.reads_env_state else 0,
            {},
            config.latent_dim,
            config.hidden_dims,
        )
        super().__init__(net, config, -0.5 * net.action_dim, seed=seed, device=device)

    # --- flow helpers ------------------------------------------------------------------------
    def _condition(self, state, env_state, images, instruction) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Frozen flow conditioning (B, ...) at age 0, and the actor/critic observation dict,
        on the device."""
        flow = self.flow
        inputs = to_device(flow_inputs(flow, state, env_state, images, instruction), self.device)
        with torch.no_grad():
            latent = flow.model.encode_slow(inputs["images"], inputs["tokens"])
            env = inputs["env_state"]
            if flow.config.estimate_env_state:  # the flow's own estimate, as deployed
                env = estimated_env_state(flow.model, flow.normalizer, latent)
            fresh = flow.normalizer.fresh(inputs["state"], env, inputs["ee"], flow.config.relative_object_dim)
            age = torch.zeros(len(state), dtype=torch.long, device=self.device)
            cond = flow.model.expert.condition(latent, age, fresh)
        obs = {"state": inputs["state"]}
        if self.net.env_state_dim and inputs["env_state"] is not None:  # set whenever the net reads it
            obs["env_state"] = inputs["env_state"]
        return cond, obs

    def _flow(self, cond: torch.Tensor, unit: torch.Tensor) -> torch.Tensor:
        """(B, H*A) actor output in [-1, 1] -> (B, H*A) normalised chunk (differentiable in unit)."""
        c = self.flow.config
        noise = (self.config.noise_bound * unit).reshape(-1, c.horizon, c.action_dim)
        velocity = lambda x, tau_rows: self.flow.model.expert.velocity(x, tau_rows, cond)  # noqa: E731
        return flow_math.sample(velocity, noise, c.flow_steps).flatten(1)

    # --- one update ------------------------------------------------------------------------
    def update(self, buffer: Sampler, learner_version: int, rng: np.random.Generator) -> dict[str, float]:
        cfg = self.config
        for _ in range(cfg.utd_ratio):
            s = buffer.sample_chunks(cfg.batch_size, self.horizon, learner_version, rng)
            cond, obs = self._condition(s.state, s.env_state, s.images, s.instruction)
            critic = self._critic_step(s, obs)
        return self._actor_temperature_step(
            obs,
            critic,
            batch_metrics(s.staleness, s.intervention[:, 0], s.is_demo),
            lambda unit: self._flow(cond, unit),
        )

    def _critic_step(self, s: ChunkSample, obs: dict[str, torch.Tensor]) -> tuple[float, float, float]:
        """Chunk TD: the executed chunk's Q regressed on the discounted real-row return
        plus gamma^n times the soft value of the next state."""
        cfg = self.config
        ret, gamma_n = to_device(
            tuple(torch.from_numpy(x) for x in chunk_returns(s.reward, s.mask, cfg.discount)), self.device
        )
        with torch.no_grad():
            next_cond, next_obs = self._condition(s.next_state, s.next_env_state, s.next_images, s.instruction)
            next_value = self._soft_next_value(next_obs, lambda unit: self._flow(next_cond, unit))
            done = torch.from_numpy(np.asarray(s.done, np.float32)).to(self.device)
            target = ret + gamma_n * (1.0 - done) * next_value
            state = torch.from_numpy(np.asarray(s.state, np.float32)).to(self.device)
            actions = torch.from_numpy(np.asarray(s.actions, np.float32)).to(self.device)
            executed = self.flow.normalizer.encode_chunk(actions, state)
        return self._regress_critics(obs, executed.flatten(1), target)

    # --- serving ---------------------------------------------------------------------------
    def served_policy(self) -> DsrlChunkPolicy:
        return DsrlChunkPolicy(
            self.flow,
            copy.deepcopy(self.actor),
            self.config.noise_bound,
            seed=self.seed,
            deterministic=self.config.deterministic_serving,
        )
