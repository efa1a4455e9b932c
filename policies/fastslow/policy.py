"""`FastSlowPolicy`: the fast/slow VLA behind the `ChunkPolicy` protocol.

The two pathways can run at different rates:

    latent = policy.encode_slow(obs)                     # slow: images + instruction
    chunk = policy.predict_chunk(obs2, latent, latent_age_ticks=obs2.tick - obs.tick)

`predict_chunk(obs)` alone encodes a fresh latent (age 0). The age the action expert
sees is `latent_age_ticks + obs.delay_ticks`: ticks between the frame the latent saw and
the tick of the chunk's first row (the tick of the forwarded state `obs.state_rad`); the
trainer samples it the same way (delayed-latent + VLASH offset augmentation).

Deterministic: the initial noise of a chunk comes from a `torch.Generator` seeded with
(`seed`, `obs.tick`), so the same observation always gives the same chunk.

Devices (`robotrl.policies.device`): the model, the latents and the flow sampling (RTC
guidance included) run on the model's device (`to(device)`, `load(..., device=)`); the
per-request features (normalised state, end-effector kinematics) and the noise are made on
the CPU and moved, and chunks come back as numpy on the CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from robotrl.core.errors import ConfigError
from robotrl.core.policy import (
    ActionChunk,
    PolicyMetadata,
    PolicyObservation,
    past_frame_ticks_back,
    past_image_key,
)
from robotrl.core.seeds import tick_seed
from robotrl.policies.checkpoint import load_weights_bytes, read_checkpoint, save_weights_bytes, write_checkpoint
from robotrl.policies.device import load_staged, module_device, stage_tensors, to_device, torch_device
from robotrl.policies.fastslow import flow
from robotrl.policies.fastslow.config import FastSlowConfig
from robotrl.policies.fastslow.features import EndEffectorFeatures
from robotrl.policies.fastslow.model import FastSlowModel, estimated_env_state
from robotrl.policies.fastslow.normalize import Normalizer
from robotrl.policies.fastslow.slow import resize_images
from robotrl.policies.fastslow.vocab import Vocabulary

POLICY_TYPE = "fastslow_flow"


FLOW_NOISE_SALT = 12_345
"""Keeps the flow noise stream apart from other draws of the same seed."""


class FastSlowPolicy:
    def __init__(
        self,
        model: FastSlowModel,
        normalizer: Normalizer,
        vocab: Vocabulary,
        *,
        seed: int = 0,
        version: int = 0,
        rtc_guidance: bool = True,
        noise_scale: float = 1.0,
    ) -> None:
        self.model = model.eval()
        self.config: FastSlowConfig = model.config
        if self.config.use_env_state and normalizer.env_mean is None:
            raise ConfigError("the policy reads env_state but its normalisation statistics have none")
        if self.config.ee_features_arm and normalizer.ee_mean is None:
            raise ConfigError("the policy reads end-effector features but its normalisation statistics have none")
        self.normalizer = normalizer
        self.vocab = vocab
        self.seed = seed
        self.version = version
        self.rtc_guidance = rtc_guidance
        """Guide the sampler toward `obs.prefix_rad` (inference-time RTC) when a prefix is
        given and the checkpoint was not trained with clean prefixes."""
        self.noise_scale = noise_scale
        """Scale of the initial noise (1: sample the learned distribution; 0: its
        deterministic central chunk)."""
        self._generator = torch.Generator()
        self._ee_features = EndEffectorFeatures(self.config.ee_features_arm) if self.config.ee_features_arm else None

    @property
    def device(self) -> torch.device:
        """Where the model runs."""
        return module_device(self.model)

    def to(self, device: str | torch.device) -> FastSlowPolicy:
        """Move the model to `device` (auto, cpu, cuda, cuda:N); returns the policy."""
        self.model.to(torch_device(device))
        return self

    # --- ChunkPolicy -------------------------------------------------------------------
    @property
    def metadata(self) -> PolicyMetadata:
        c = self.config
        return PolicyMetadata(
            POLICY_TYPE,
            c.horizon,
            c.action_dim,
            c.control_rate_hz,
            c.state_dim,
            c.cameras,
            c.image_size_px,
            self.normalizer.id,
            c.env_state_dim if c.reads_env_state else 0,
            c.execute_steps,
            start_state_rad=c.start_state_rad,
            instructions=c.instructions,
            past_frame_ticks=c.past_frame_ticks,
            past_frames=c.past_frames,
            max_latent_age_ticks=c.latent_delay_max,
        )

    def reset(self) -> None:
        """Stateless between chunks: nothing to clear."""

    @torch.no_grad()
    def encode_slow(self, obs: PolicyObservation) -> torch.Tensor:
        """Slow pathway: (T, W) latent tokens (on the model's device) from `obs.images` and
        `obs.instruction`."""
        device = self.device
        images = [to_device(self._camera(obs, cam), device) for cam in self.config.cameras]
        tokens = torch.from_numpy(self.vocab.encode(obs.instruction, self.config.max_words))[None]
        return self.model.encode_slow(images, tokens.to(device))[0]

    @torch.no_grad()
    def estimate_env_state(self, latent: torch.Tensor) -> np.ndarray | None:
        """(E,) the estimate of the simulator's env_state (its units) the fast pathway
        reads with the (T, W) `latent`; None without `estimate_env_state`, and for an
        estimate of a red object's image track (`env_blob_cameras`), which no simulator
        state compares with."""
        if not self.config.estimate_env_state or self.config.env_blob_cameras:
            return None
        return self._estimate(latent[None])[0].numpy()

    def predict_chunk(
        self, obs: PolicyObservation, latent: torch.Tensor | None = None, latent_age_ticks: int = 0
    ) -> ActionChunk:
        """Fast pathway: an (H, A) chunk of absolute joint targets (radians) starting at
        tick `obs.tick + obs.delay_ticks`, from `latent` (encoded now when None) that is
        `latent_age_ticks` older than `obs.tick`."""
        c = self.config
        state = self._state(obs)
        if latent is None:
            latent, latent_age_ticks = self.encode_slow(obs), 0
        if tuple(latent.shape) != (self.model.slow.num_tokens, c.width):
            raise ValueError(
                f"latent has shape {tuple(latent.shape)}, expected "
                f"{(self.model.slow.num_tokens, c.width)} (from this policy's encode_slow)"
            )
        if latent_age_ticks < 0 or obs.delay_ticks < 0:
            raise ValueError("latent_age_ticks and obs.delay_ticks must be >= 0")
        device = self.device
        fresh = self._fresh(state, [obs], latent[None])
        age = torch.tensor([latent_age_ticks + obs.delay_ticks])
        self._generator.manual_seed(tick_seed(self.seed, obs.tick, FLOW_NOISE_SALT))
        noise = torch.randn((1, c.horizon, c.action_dim), generator=self._generator) * self.noise_scale
        prefix, rows = self._prefix(obs, state)
        with torch.no_grad():
            kwargs: dict[str, Any] = {}
            if prefix is not None and c.rtc_train:
                kwargs = {"prefix": prefix.to(device), "prefix_rows": rows}
            elif prefix is not None and self.rtc_guidance:
                weights = flow.rtc_weights(c.horizon, c.execute_steps, rows)
                weights[self._prefix_len(obs) :] = 0.0
                kwargs = {"guide": (prefix.to(device), weights.to(device), c.rtc_beta)}
            inputs = to_device((latent[None], age, fresh, noise), device)
            x = self.model.sample_chunk(*inputs, **kwargs).float().cpu()
            actions = self.normalizer.decode_chunk(x, state)[0].numpy().astype(np.float64)
        if prefix is not None and rows > 0:  # rows that execute anyway stay exactly as committed
            actions[:rows] = np.asarray(obs.prefix_rad, dtype=np.float64)[:rows]
        return ActionChunk(actions, obs.tick + obs.delay_ticks, self.version)

    @torch.no_grad()
    def predict_chunks(
        self, observations: list[PolicyObservation], latents: list[torch.Tensor], latent_ages_ticks: list[int]
    ) -> list[ActionChunk]:
        """The fast pathway for many robots in one model call (the server batches
        requests); observations with an RTC prefix are answered one by one."""
        chunks: list[ActionChunk | None] = [None] * len(observations)
        batch = [i for i, obs in enumerate(observations) if obs.prefix_rad is None or len(obs.prefix_rad) == 0]
        for i in sorted(set(range(len(observations))) - set(batch)):
            chunks[i] = self.predict_chunk(observations[i], latents[i], latent_ages_ticks[i])
        if batch:
            c = self.config
            obs = [observations[i] for i in batch]
            states = torch.cat([self._state(o) for o in obs])
            fresh = self._fresh(states, obs, torch.stack([latents[i] for i in batch]))
            ages = torch.tensor([latent_ages_ticks[i] + observations[i].delay_ticks for i in batch])
            noise = []
            for o in obs:
                self._generator.manual_seed(tick_seed(self.seed, o.tick, FLOW_NOISE_SALT))
                noise.append(torch.randn((1, c.horizon, c.action_dim), generator=self._generator) * self.noise_scale)
            inputs = to_device((torch.stack([latents[i] for i in batch]), ages, fresh, torch.cat(noise)), self.device)
            x = self.model.sample_chunk(*inputs).float().cpu()
            actions = self.normalizer.decode_chunk(x, states).numpy().astype(np.float64)
            for row, (i, o) in enumerate(zip(batch, obs)):
                chunks[i] = ActionChunk(actions[row], o.tick + o.delay_ticks, self.version)
        return cast(list[ActionChunk], chunks)  # every index is filled: one by one or in the batch

    # --- live weights (online learning) --------------------------------------------------
    def weights_bytes(self) -> bytes:
        """The model's weights as safetensors bytes (what `load_weights` accepts); the
        normalisation statistics and vocabulary are fixed by the checkpoint."""
        return save_weights_bytes(self.model.state_dict())

    def load_weights(self, data: bytes) -> None:
        """Replace the model's weights with safetensors bytes from `weights_bytes` (a
        learner's update); the tensor names and shapes must match exactly. The new
        weights are copied onto the model's device."""
        self.swap_weights(self.stage_weights(data))

    def stage_weights(self, data: bytes) -> dict[str, torch.Tensor]:
        """The model's weights from safetensors bytes, checked and on its device, not yet
        in service (any thread, also while the policy serves)."""
        like = self.model.state_dict()
        return stage_tensors(load_weights_bytes(data, like), like)

    def swap_weights(self, staged: dict[str, torch.Tensor]) -> None:
        """Put `stage_weights` output in service (a copy on the model's device)."""
        load_staged(self.model, staged)

    # --- checkpoints -------------------------------------------------------------------
    def save(self, path: Path, extra: dict | None = None) -> None:
        """Checkpoint folder: model.safetensors + config.json (config, statistics, vocabulary)."""
        write_checkpoint(
            path,
            POLICY_TYPE,
            self.model.state_dict(),
            {
                "config": self.config.to_dict(),
                "normalization": self.normalizer.to_dict(),
                "vocabulary": self.vocab.tokens,
                "training": extra or {},
            },
        )

    @classmethod
    def load(
        cls, path: Path, *, seed: int = 0, device: str | torch.device = "cpu", noise_scale: float = 1.0
    ) -> FastSlowPolicy:
        """The checkpoint at `path`, read onto the CPU and moved to `device`, sampling with
        `noise_scale` (see the attribute)."""
        doc, tensors = read_checkpoint(path, POLICY_TYPE)
        config = FastSlowConfig.from_checkpoint(doc)
        vocab = Vocabulary(doc["vocabulary"])
        model = FastSlowModel(config, len(vocab))
        model.load_state_dict(tensors)
        version = int(doc.get("training", {}).get("step", 0))
        normalizer = Normalizer.from_dict(doc["normalization"])
        policy = cls(model, normalizer, vocab, seed=seed, version=version, noise_scale=noise_scale)
        return policy.to(device)

    def _fresh(
        self, states: torch.Tensor, observations: list[PolicyObservation], latents: torch.Tensor
    ) -> torch.Tensor:
        """(B, fresh_dim) normalised fast-pathway features of (B, S) (forwarded) states; the
        env_state is the observations' or, with `estimate_env_state`, the (B, T, W) latents'
        estimate of it."""
        env = None
        if self.config.estimate_env_state:
            env = self._estimate(latents)
        elif self.config.use_env_state:
            env = torch.cat([self._env_state(o) for o in observations])
        ee = torch.from_numpy(self._ee_features(states.numpy())) if self._ee_features else None
        return self.normalizer.fresh(states, env, ee, self.config.relative_object_dim)

    @torch.no_grad()
    def _estimate(self, latents: torch.Tensor) -> torch.Tensor:
        """(B, E) env_state units on the CPU: the estimate from (B, T, W) latents."""
        return estimated_env_state(self.model, self.normalizer, latents).cpu()

    # --- input checks ------------------------------------------------------------------
    def _state(self, obs: PolicyObservation) -> torch.Tensor:
        state = np.asarray(obs.state_rad, dtype=np.float32)
        if state.shape != (self.config.state_dim,):
            raise ValueError(f"state_rad has shape {state.shape}, expected ({self.config.state_dim},)")
        if not np.all(np.isfinite(state)):
            raise ValueError("state_rad contains NaN or inf")
        return torch.from_numpy(state)[None]

    def _env_state(self, obs: PolicyObservation) -> torch.Tensor:
        if obs.env_state is None:
            raise ValueError("this policy was trained with env_state; the observation has none")
        env = np.asarray(obs.env_state, dtype=np.float32)
        if env.shape != (self.config.env_state_dim,):
            raise ValueError(f"env_state has shape {env.shape}, expected ({self.config.env_state_dim},)")
        return torch.from_numpy(env)[None]

    def _camera(self, obs: PolicyObservation, camera: str) -> torch.Tensor:
        """(1, 3 F, S, S) uint8: the camera's frame, then its past frames (newest first) when
        the policy reads them."""
        c = self.config
        past = past_frame_ticks_back(c.past_frame_ticks, c.past_frames)
        keys = [camera] + [past_image_key(camera, k) for k in range(1, len(past) + 1)]
        return torch.cat([self._image(obs, key) for key in keys], dim=1)

    def _image(self, obs: PolicyObservation, camera: str) -> torch.Tensor:
        if camera not in obs.images:
            raise ValueError(
                f"observation has no image from camera {camera!r} "
                f"(the policy reads {list(self.config.cameras)}, got {sorted(obs.images)})"
            )
        image = np.asarray(obs.images[camera])
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ValueError(f"image {camera!r} has shape {image.shape} {image.dtype}, expected (H, W, 3) uint8")
        chw = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None]
        return resize_images(chw, self.config.image_size_px)

    def _prefix_len(self, obs: PolicyObservation) -> int:
        return 0 if obs.prefix_rad is None else min(len(obs.prefix_rad), self.config.horizon)

    def _prefix(self, obs: PolicyObservation, state: torch.Tensor) -> tuple[torch.Tensor | None, int]:
        """Normalised prefix padded to H rows, and d = rows frozen (min(delay, P))."""
        if obs.prefix_rad is None or len(obs.prefix_rad) == 0:
            return None, 0
        c = self.config
        prefix = np.asarray(obs.prefix_rad, dtype=np.float32)
        if prefix.ndim != 2 or prefix.shape[1] != c.action_dim:
            raise ValueError(f"prefix_rad has shape {prefix.shape}, expected (P, {c.action_dim})")
        p = self._prefix_len(obs)
        padded = np.zeros((c.horizon, c.action_dim), dtype=np.float32)
        padded[:p] = prefix[:p]
        padded[p:] = prefix[p - 1]
        x = self.normalizer.encode_chunk(torch.from_numpy(padded)[None], state)
        return x, min(obs.delay_ticks, p)
