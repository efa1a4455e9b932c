"""`hil-flow`: intervention- and reward-weighted flow-matching fine-tuning of a
FastSlowPolicy (HG-DAgger + Hi-ORS rejection sampling).

Each update draws `ChunkSample`s from the buffer and keeps only accepted rows
(`accepted_rows`): what a human executed, and the policy's own rows in demos and
successful episodes except those the human then corrected. A human row weighs `w_int`, a
demo row 1, and the policy's own online row the exp of its episode's return normalised
over the online episodes in the batch, clipped (`row_weights`). The loss is the policy's
own flow-matching loss as a weighted mean over rows. The served policy is a moving average
of the trained weights (`HilFlowConfig.ema_decay`). With `k_max` > 0 the chunks are
offset from their images as in training (`offset_chunks`), so a policy deployed with a
delay keeps learning at the delays it runs at.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import torch

from robotrl.buffer.sampler import ChunkSample
from robotrl.buffer.spec import TransitionSpec
from robotrl.core.errors import ConfigError
from robotrl.core.learning import Sampler
from robotrl.core.policy import past_frame_ticks_back, past_image_key
from robotrl.learn.algorithm import (
    batch_metrics,
    check_saved_config,
    config_json,
    ess_fraction,
    load_optimizer_state,
    module_state,
    optimizer_state,
    soft_update,
)
from robotrl.policies.device import CPU, image_tensor
from robotrl.policies.fastslow.config import FastSlowConfig
from robotrl.policies.fastslow.features import EndEffectorFeatures
from robotrl.policies.fastslow.model import FastSlowModel
from robotrl.policies.fastslow.policy import FastSlowPolicy
from robotrl.policies.fastslow.slow import resize_images
from robotrl.train.loss import Batch, flow_matching_loss
from robotrl.train.sampling import forward_noise, forwarded_state, tick_motion_std


def row_weights(
    episode_return: np.ndarray,
    accepted: np.ndarray,
    intervention: np.ndarray,
    mask: np.ndarray,
    is_demo: np.ndarray,
    *,
    beta: float,
    max_weight: float,
    w_int: float,
) -> np.ndarray:
    """(B, H) loss weight of every chunk row.

    A row a human executed weighs `w_int` (HG-DAgger: the correction is the label, however
    the policy did before it). A demo row weighs 1. The policy's own row in an online
    episode weighs w_b = min(exp(beta z_b), max_weight), z_b = (R_b - mean R) / (std R +
    1e-6) over the accepted online examples (z = 0 when fewer than two): returns rank the
    policy's own attempts against each other, never against demos recorded elsewhere
    (other dynamics, other episode lengths). Times mask x accepted, then scaled so the
    positive weights average 1 (all zero when nothing is accepted)."""
    ret = np.asarray(episode_return, np.float64)
    online = np.asarray(accepted, bool) & ~np.asarray(is_demo, bool)
    z = np.zeros_like(ret)
    if online.sum() >= 2:
        z = (ret - ret[online].mean()) / (ret[online].std() + 1e-6)
    w_own = np.where(online, np.minimum(np.exp(beta * z), max_weight), 1.0)
    w = np.where(np.asarray(intervention, bool), w_int, w_own[:, None])
    w = w * np.asarray(mask, bool) * np.asarray(accepted, bool)[:, None]
    positive = w > 0
    return (w / w[positive].mean() if positive.any() else w).astype(np.float32)


def accepted_rows(
    is_demo: np.ndarray, episode_success: np.ndarray, intervention: np.ndarray, mask: np.ndarray
) -> np.ndarray:
    """(B, H) bool: the chunk rows to learn from (HG-DAgger + rejection sampling).

    Every real row a human executed is kept (the correction). The policy's own rows are
    kept only in demos and successful episodes, and never when a human row follows them
    in the same chunk: those are the drift the human corrected. Inputs: (B,) is_demo and
    episode_success, (B, H) intervention and mask (real, not padding)."""
    human = np.asarray(intervention, bool)
    real = np.asarray(mask, bool)
    human_later = np.flip(np.logical_or.accumulate(np.flip(human, 1), 1), 1)  # a human row at k or later
    good_episode = (np.asarray(is_demo, bool) | np.asarray(episode_success, bool))[:, None]
    return real & (human | (good_episode & ~human_later))


def check_policy_spec(spec: TransitionSpec, config: FastSlowConfig) -> None:
    """Raise `ConfigError` unless the buffer's state and action sizes are the policy's."""
    if (spec.state_dim, spec.action_dim) != (config.state_dim, config.action_dim):
        raise ConfigError(
            f"the policy reads state {config.state_dim} / action {config.action_dim}, the buffer spec "
            f"has {spec.state_dim} / {spec.action_dim}"
        )


class FlowInputs(TypedDict):
    """What `flow_inputs` returns: the conditioning fields of a `Batch`."""

    images: list[torch.Tensor]
    tokens: torch.Tensor
    state: torch.Tensor
    env_state: torch.Tensor | None
    ee: torch.Tensor | None


def flow_inputs(
    policy: FastSlowPolicy,
    state: np.ndarray,
    env_state: np.ndarray | None,
    images: Mapping[str, np.ndarray | torch.Tensor],
    instruction: list[str],
) -> FlowInputs:
    """What the flow conditions on, as `Batch` fields (images, tokens, state, env_state,
    ee) from (B, S) states, (B, E) env_state, image key -> (B, h, w, 3) uint8 (numpy, or a
    tensor on any device: it stays there; every key of `policy.metadata.image_keys`) and B
    strings. Each camera's images become (B, 3 F, S, S): its frame, then its past frames
    newest first (F = 1 + P), resized to the policy's size, as the policy reads them."""
    c = policy.config
    state_t = torch.from_numpy(np.asarray(state, np.float32))
    past = range(1, len(past_frame_ticks_back(c.past_frame_ticks, c.past_frames)) + 1)
    stacked = [[images[cam], *(images[past_image_key(cam, k)] for k in past)] for cam in c.cameras]
    return {
        "images": [
            resize_images(torch.cat([image_tensor(x).permute(0, 3, 1, 2) for x in frames], 1), c.image_size_px)
            for frames in stacked
        ],
        "tokens": torch.from_numpy(policy.vocab.encode_many(list(instruction), c.max_words)),
        "state": state_t,
        "env_state": torch.from_numpy(np.asarray(env_state, np.float32)) if c.reads_env_state else None,
        "ee": (
            torch.from_numpy(EndEffectorFeatures(c.ee_features_arm)(state_t.numpy())) if c.ee_features_arm else None
        ),
    }


def _rows(images: np.ndarray | torch.Tensor, idx: np.ndarray) -> np.ndarray | torch.Tensor:
    """Rows `idx` of (B, ...) images, numpy or a tensor (indexed on its device)."""
    if isinstance(images, torch.Tensor):
        return images[torch.from_numpy(idx).to(images.device)]
    return images[idx]


@dataclass
class OffsetChunks:
    """Chunks of H rows starting k rows after the row t their images come from."""

    state: np.ndarray
    """(B, S) the state the fast pathway conditions on (`forwarded_state`), rad."""
    actions: np.ndarray
    """(B, H, A) executed rows t + k .. t + k + H - 1."""
    mask: np.ndarray
    """(B, H) real rows."""
    intervention: np.ndarray
    """(B, H) rows a human executed."""
    age: np.ndarray
    """(B,) k: ticks between the images and the chunk's first row, the latent age."""


def offset_chunks(sample: ChunkSample, k: np.ndarray, horizon: int) -> OffsetChunks:
    """The chunks of `horizon` rows starting k (B,) rows after each sample's row t, k
    clipped to the episode's last row, as offline training offsets them: conditioned on the
    measured state at t when k = 0, else on the action executed at row t + k - 1 (what the
    executor forwards for a delay of k). `sample` holds at least horizon + max k rows."""
    k = np.minimum(np.asarray(k), sample.mask.sum(1) - 1)
    rows = k[:, None] + np.arange(horizon)
    previous = sample.actions[np.arange(len(k)), np.maximum(k - 1, 0)]
    return OffsetChunks(
        state=forwarded_state(sample.state, previous, k),
        actions=np.take_along_axis(sample.actions, rows[..., None], 1),
        mask=np.take_along_axis(sample.mask, rows, 1),
        intervention=np.take_along_axis(sample.intervention, rows, 1),
        age=k,
    )


def flow_batch(policy: FastSlowPolicy, sample: ChunkSample, chunks: OffsetChunks, idx: np.ndarray) -> Batch:
    """The flow-matching `Batch` of examples `idx`: `sample`'s images (and env_state) of
    row t and instruction, `chunks`' conditioning state, rows and latent age."""
    inputs = flow_inputs(
        policy,
        chunks.state[idx],
        None if sample.env_state is None else sample.env_state[idx],
        {key: _rows(sample.images[key], idx) for key in policy.metadata.image_keys},
        [sample.instruction[i] for i in idx],
    )
    return Batch(
        **inputs,
        chunk=torch.from_numpy(np.asarray(chunks.actions[idx], np.float32)),
        mask=torch.from_numpy(np.asarray(chunks.mask[idx], bool)),
        age=torch.from_numpy(np.asarray(chunks.age[idx], np.int64)),
    )


@dataclass(frozen=True)
class HilFlowConfig:
    batch_size: int = 32
    """Chunks drawn per update (rejected ones are dropped from the step)."""
    lr: float = 1e-4
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    flow_samples: int = 4
    """Noise/time draws per example."""
    w_int: float = 3.0
    """Weight of rows a human executed (HG-DAgger)."""
    return_beta: float = 1.0
    """Inverse temperature of the return weighting of the policy's own online rows (0:
    returns ignored)."""
    max_weight: float = 3.0
    """Clip of the return weight exp(beta z)."""
    grad_clip: float = 1.0
    """Gradient norm clip."""
    ema_decay: float = 0.995
    """The served policy is an exponential moving average of the trained weights, ema <-
    decay * ema + (1 - decay) * weights after every update (0: serve the raw weights).
    Raw weights under a constant learning rate jitter from update to update, and the arm
    would execute consecutive chunks from differently jittered policies."""
    k_max: int = 0
    """Offset augmentation, as `robotrl train --k-max` does it: each chunk starts k ~
    U{0..k_max} rows after the row its images come from, conditioned on the state the
    executor forwards for a delay of k, at latent age k (0: every chunk from its images'
    row, age 0). Set it to the delays the arm runs at."""
    forward_noise: float = 0.0
    """Std of the Gaussian noise on forwarded states, in k x the batch's per-tick motion
    std per joint (`robotrl train --forward-noise`; needs `k_max` > 0)."""
    freeze_encoder: bool = False
    """Train the fast pathway only: the slow pathway (camera CNNs, text encoder) stays as
    behaviour cloning left it, as HIL-SERL keeps its image encoder frozen. An image
    policy's update then skips the backward pass through its CNNs (two 96 px cameras, 2
    CPU threads: 0.041 s instead of 0.092 s per update of 32, measured). A policy that
    estimates the scene, fine-tuned without the simulator's env_state (a real arm), always
    trains this way: its estimate head reads the slow pathway's latent and has no target
    to follow a changing one (the pixel track policy's ball estimate along x drifted from
    0.5 to 1.9 cm rms in 3,880 updates of a trained encoder)."""

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.flow_samples < 1:
            raise ConfigError("HilFlowConfig: batch_size and flow_samples must be >= 1")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError(f"HilFlowConfig: ema_decay must be in [0, 1), got {self.ema_decay}")
        if self.w_int < 0 or self.max_weight <= 0 or self.return_beta < 0:
            raise ConfigError("HilFlowConfig: w_int and return_beta must be >= 0, max_weight > 0")
        if self.k_max < 0 or self.forward_noise < 0 or (self.forward_noise and not self.k_max):
            raise ConfigError("HilFlowConfig: k_max and forward_noise must be >= 0, forward_noise only with k_max > 0")


HIL_FLOW_PRESETS: dict[str, HilFlowConfig] = {
    "default": HilFlowConfig(),
    "conservative": HilFlowConfig(lr=3e-5, w_int=2.0),
    "small": HilFlowConfig(batch_size=8, flow_samples=2),
}
"""default: Hi-ORS-style weights, lr 1e-4; conservative: slower drift from the BC policy;
small: tiny batches for tests and smoke runs."""


class HilFlow:
    name = "hil-flow"

    def __init__(
        self,
        spec: TransitionSpec,
        policy: FastSlowPolicy,
        config: HilFlowConfig,
        *,
        seed: int = 0,
        device: torch.device = CPU,
    ) -> None:
        c = policy.config
        check_policy_spec(spec, c)
        missing = sorted(set(c.cameras) - set(spec.cameras))
        if missing or (c.reads_env_state and spec.env_state_dim != c.env_state_dim):
            raise ConfigError(
                f"the buffer spec lacks what the policy reads: cameras {missing}, env_state "
                f"{c.env_state_dim if c.reads_env_state else 0} (spec has {spec.env_state_dim})"
            )
        if config.k_max > c.max_age_ticks or (config.k_max and c.state_dim != c.action_dim):
            raise ConfigError(
                f"hil-flow k_max {config.k_max}: the policy knows latent ages up to {c.max_age_ticks} and "
                f"conditions on forwarded actions only when state and action share a space "
                f"({c.state_dim} / {c.action_dim})"
            )
        self.config = config
        self.device = device
        """Where the flow trains; batches are moved here, random draws stay on the CPU."""
        self.policy = policy.to(device)
        self.model = policy.model
        if config.freeze_encoder or (c.estimate_env_state and not spec.env_state_dim):
            self.model.slow.requires_grad_(False)
        trained = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trained, lr=config.lr, weight_decay=config.weight_decay)
        self.ema = self._policy_copy(self.model)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.torch_rng = torch.get_rng_state()
        self.updates = 0

    def update(self, buffer: Sampler, learner_version: int, rng: np.random.Generator) -> dict[str, float]:
        cfg = self.config
        horizon = self.policy.config.horizon
        sample: ChunkSample = buffer.sample_chunks(cfg.batch_size, horizon + cfg.k_max, learner_version, rng)
        chunks = self._offset(sample, rng)
        rows = accepted_rows(sample.is_demo, sample.episode_success, chunks.intervention, chunks.mask)
        accepted = np.asarray(rows.any(1))
        weights = row_weights(
            sample.episode_return,
            accepted,
            chunks.intervention,
            rows,
            sample.is_demo,
            beta=cfg.return_beta,
            max_weight=cfg.max_weight,
            w_int=cfg.w_int,
        )
        data = batch_metrics(sample.staleness, chunks.intervention[:, 0], sample.is_demo)
        idx = np.flatnonzero(accepted)
        if idx.size == 0:
            return {"loss_flow": 0.0, "accepted_frac": 0.0, "ess": 0.0, "grad_norm": 0.0, "skipped": 1.0, **data}
        self.model.train()
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self.torch_rng)
            loss = flow_matching_loss(
                self.model,
                self.policy.normalizer,
                flow_batch(self.policy, sample, chunks, idx).to(self.device),
                cfg.flow_samples,
                row_weights=torch.from_numpy(weights[idx]).to(self.device),
            )
            self.torch_rng = torch.get_rng_state()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip))
        self.optimizer.step()
        soft_update(self.ema.model, self.model, 1.0 - cfg.ema_decay)
        self.model.eval()
        self.updates += 1
        real = weights[idx][rows[idx]]
        return {
            "loss_flow": float(loss.detach()),
            "accepted_frac": float(accepted.mean()),
            "ess": ess_fraction(real),
            "grad_norm": grad,
            "skipped": 0.0,
            **data,
        }

    def _offset(self, sample: ChunkSample, rng: np.random.Generator) -> OffsetChunks:
        """`sample`'s chunks at offsets k ~ U{0..k_max} (all 0, no draw, when k_max = 0),
        their forwarded states noised by `forward_noise`."""
        cfg, b = self.config, len(sample.state)
        k = rng.integers(0, cfg.k_max + 1, b) if cfg.k_max else np.zeros(b, np.int64)
        chunks = offset_chunks(sample, k, self.policy.config.horizon)
        if cfg.forward_noise:
            real = np.asarray(sample.mask, bool)
            sigma = tick_motion_std(sample.actions[real], np.nonzero(real)[0])  # per example's real rows
            chunks.state = chunks.state + forward_noise(rng, chunks.age, cfg.forward_noise * sigma)
        return chunks

    def policy_weights(self) -> bytes:
        return self.ema.weights_bytes()

    def served_policy(self) -> FastSlowPolicy:
        return self._policy_copy(self.ema.model)

    def _policy_copy(self, model: FastSlowModel) -> FastSlowPolicy:
        """A FastSlowPolicy around a copy of `model` (normaliser, vocabulary and sampling
        settings of the trained policy)."""
        p = self.policy
        return FastSlowPolicy(
            copy.deepcopy(model),
            p.normalizer,
            p.vocab,
            seed=p.seed,
            rtc_guidance=p.rtc_guidance,
            noise_scale=p.noise_scale,
        )

    def state_dict(self) -> dict:
        return {
            "model": module_state(self.model),
            "ema": module_state(self.ema.model),
            "optim": optimizer_state(self.optimizer),
            "torch_rng": self.torch_rng.clone(),
            "updates": self.updates,
            "config": config_json(self.config),
        }

    def load_state_dict(self, state: dict) -> None:
        check_saved_config(state, self.config, self.name)
        self.model.load_state_dict(state["model"])
        self.ema.model.load_state_dict(state["ema"])
        load_optimizer_state(self.optimizer, state["optim"])
        self.torch_rng = state["torch_rng"].clone()
        self.updates = int(state["updates"])
