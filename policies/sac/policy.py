"""`SacChunkPolicy`: a SAC actor behind the `ChunkPolicy` protocol.

The actor outputs a per-tick joint delta a in [-1, 1]^A; the chunk integrates it from
the (forwarded) state: row i = state[:A] + (i + 1) * a * max_step_rad, i < horizon.
Stochastic by default (exploration on the actors), with noise seeded by (seed, tick) so
the same observation always gives the same chunk; `deterministic=True` serves the mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from robotrl.core.errors import ConfigError
from robotrl.core.policy import ActionChunk, PolicyMetadata, PolicyObservation
from robotrl.policies.device import image_tensor
from robotrl.policies.sac.actor_policy import ActorPolicy, read_actor
from robotrl.policies.sac.config import SacNetConfig
from robotrl.policies.sac.networks import SacActor

POLICY_TYPE = "sac"


def delta_to_unit(action_rad: np.ndarray, state_rad: np.ndarray, max_step_rad: float) -> np.ndarray:
    """(..., A) executed targets and (..., S) states -> (..., A) actions in [-1, 1]:
    (target - state[:A]) / max_step_rad, clipped."""
    a = action_rad.shape[-1]
    return np.clip((action_rad - state_rad[..., :a]) / max_step_rad, -1.0, 1.0).astype(np.float32)


def unit_to_chunk(unit: np.ndarray, state_rad: np.ndarray, max_step_rad: float, horizon: int) -> np.ndarray:
    """(A,) action in [-1, 1] and (S,) state -> (horizon, A) absolute targets, radians:
    row i = state[:A] + (i + 1) * unit * max_step_rad."""
    steps = np.arange(1, horizon + 1, dtype=np.float64)[:, None]
    return state_rad[: unit.shape[0]][None, :] + steps * unit[None, :].astype(np.float64) * max_step_rad


def observation_tensors(
    state: np.ndarray,
    env_state: np.ndarray | None,
    images: Mapping[str, np.ndarray | torch.Tensor],
    config: SacNetConfig,
) -> dict[str, torch.Tensor]:
    """Batched numpy arrays ((B, S), (B, E), camera -> (B, h, w, 3) uint8) -> the encoder's
    observation dict; images may already be uint8 tensors (on any device: they stay there);
    images of another size are resized to the config's (area)."""
    obs = {"state": torch.as_tensor(np.asarray(state, np.float32))}
    if config.env_state_dim:
        if env_state is None:
            raise ValueError(f"this SAC policy reads env_state ({config.env_state_dim} values); none given")
        obs["env_state"] = torch.as_tensor(np.asarray(env_state, np.float32))
    for cam, (h, w) in config.cameras.items():
        if cam not in images:
            raise ValueError(f"no image from camera {cam!r} (the policy reads {sorted(config.cameras)})")
        img = image_tensor(images[cam])
        if img.dtype != torch.uint8 or img.ndim != 4 or img.shape[-1] != 3:
            raise ValueError(f"images[{cam!r}] is {tuple(img.shape)} {img.dtype}, expected (B, h, w, 3) uint8")
        if tuple(img.shape[1:3]) != (h, w):
            x = F.interpolate(img.permute(0, 3, 1, 2).float(), size=(h, w), mode="area")
            img = x.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()
        obs[f"image.{cam}"] = img
    return obs


class SacChunkPolicy(ActorPolicy):
    NOISE_SALT = 54_321

    def __init__(self, actor: SacActor, *, seed: int = 0, version: int = 0, deterministic: bool = False) -> None:
        super().__init__(actor, seed=seed, version=version, deterministic=deterministic)
        self.config: SacNetConfig = actor.config
        if self.config.action_dim > self.config.state_dim:
            raise ConfigError(
                f"SAC actions are deltas from the first A state entries: action_dim "
                f"({self.config.action_dim}) must be <= state_dim ({self.config.state_dim})"
            )

    @property
    def metadata(self) -> PolicyMetadata:
        c = self.config
        size = next(iter(c.cameras.values()))[0] if c.cameras else 0
        return PolicyMetadata(
            POLICY_TYPE,
            c.horizon,
            c.action_dim,
            c.control_rate_hz,
            c.state_dim,
            tuple(c.cameras),
            size,
            "",
            c.env_state_dim,
        )

    @torch.no_grad()
    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
        """(horizon, A) absolute targets (radians) starting at `obs.tick + obs.delay_ticks`."""
        c = self.config
        state = np.asarray(obs.state_rad, dtype=np.float64)
        if state.shape != (c.state_dim,) or not np.all(np.isfinite(state)):
            raise ValueError(f"state_rad must be ({c.state_dim},) finite, got {state.shape}")
        env = None if obs.env_state is None else np.asarray(obs.env_state)[None]
        tensors = observation_tensors(state[None], env, {k: np.asarray(v)[None] for k, v in obs.images.items()}, c)
        unit = self._act(tensors, obs.tick)
        actions = unit_to_chunk(unit[0].numpy(), state, c.max_step_rad, c.horizon)
        return ActionChunk(actions, obs.tick + obs.delay_ticks, self.version)

    # --- checkpoints ------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        """Checkpoint folder: model.safetensors (actor) + config.json (network config)."""
        self._write_actor(path, POLICY_TYPE)

    @classmethod
    def load(cls, path: Path, *, seed: int = 0, device: str | torch.device = "cpu") -> SacChunkPolicy:
        """The checkpoint at `path`, read onto the CPU and moved to `device`."""
        actor, _, version = read_actor(path, POLICY_TYPE)
        return cls(actor, seed=seed, version=version).to(device)
