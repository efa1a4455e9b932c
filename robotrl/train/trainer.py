"""Behaviour cloning of a fast/slow policy from a LeRobotDataset (flow matching).

Augmentations (robotrl.train.sampling): VLASH offsets (image from t, state and chunk from
t + k), delayed latents (the slow latent sees frame t - j, the fast pathway is told the
age), optional training-time RTC (a clean prefix of random length, loss on the rest).
The checkpoint folder doubles as the resume point (model + optimizer + step + RNG).

Devices: the model, the optimizer and every batch live on `TrainConfig.device`; batches
are assembled on the CPU from the frames in RAM (the same draws on every device) and
moved, images as uint8 (shifted on the device). On a GPU the next batch is assembled
while the current step runs, and bf16 autocast is optional (`bf16`). On the CPU nothing
changes: the same numbers as before devices existed, and at most 2 torch threads.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robotrl.core.devices import DEFAULT_DEVICE, check_device
from robotrl.core.errors import ConfigError
from robotrl.core.policy import past_frame_ticks_back
from robotrl.policies.checkpoint import read_config
from robotrl.policies.device import autocast, to_device, torch_device
from robotrl.policies.fastslow.config import FastSlowConfig
from robotrl.policies.fastslow.features import EndEffectorFeatures
from robotrl.policies.fastslow.model import FastSlowModel
from robotrl.policies.fastslow.normalize import Normalizer
from robotrl.policies.fastslow.policy import POLICY_TYPE, FastSlowPolicy
from robotrl.policies.fastslow.vocab import Vocabulary
from robotrl.record.dataset import FrameTable, load_frames
from robotrl.train.loss import Batch, flow_matching_loss
from robotrl.train.sampling import (
    chunk_indices,
    conditioning_state_rows,
    delayed_frame_index,
    forward_noise,
    sample_examples,
    tick_motion_std,
)
from robotrl.train.state import load_training_state, save_training_state

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainConfig:
    dataset: Path
    """Local LeRobotDataset folder."""
    out: Path
    """Checkpoint folder (written every `save_every` steps and at the end)."""
    steps: int = 20_000
    """Optimizer steps."""
    batch_size: int = 64
    """Examples per step (each with `flow_samples` noise draws)."""
    lr: float = 3e-4
    """Peak learning rate (AdamW), cosine-decayed to 10% after warm-up."""
    warmup_steps: int = 300
    """Linear learning-rate warm-up."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    action_key: str = "action"
    """Dataset column of the targets: "action" (executed) or "teleop.action" (the teleop's
    clean targets of a `robotrl record --perturb` dataset)."""
    ball_calibration: Path | None = None
    """A camera calibration file (`robotrl.hardware.camera_geometry`): the env_state the
    policy learns to estimate is the red ball's base-frame position and velocity seen by
    the calibrated cameras (`robotrl.record.ball`), instead of the simulator's."""
    k_max: int = 8
    """VLASH offset: k ~ U{0..k_max} per example (0: no offset augmentation)."""
    k_zero_prob: float = 0.5
    """Probability of k = 0 on top of the uniform draw (keeps plain behaviour cloning's
    share of the data, so no-delay performance does not pay for the offsets)."""
    forward_noise: float = 0.0
    """Gaussian noise on the forwarded state of an example of offset k > 0: per joint, a
    standard deviation of k * this * the joint's typical motion in one tick (the std of
    a_(t+1) - a_t over the dataset; `sampling.forward_noise`); 0: none."""
    latent_delay_max: int = 0
    """Delayed latent: j ~ U{0..J} ticks older frame for the slow latent."""
    rtc_train: bool = False
    """Training-time RTC: a clean prefix of d ~ U{0..rtc_max_prefix} rows, loss on the rest."""
    rtc_max_prefix: int = 8
    """Largest clean prefix of training-time RTC."""
    flow_samples: int = 4
    """Noise/time draws per example (the slow latent is shared)."""
    shift_px: int = 0
    """Random image shift augmentation, pixels (0: off)."""
    seed: int = 0
    """Seeds torch and numpy (batches, noise)."""
    threads: int = 1
    """torch CPU threads; on the CPU device at most 2. One is the safe choice on the shared
    2-core machines: with another busy process, 2 OpenMP threads made a step 30x slower
    (measured). With a GPU they assemble the batches."""
    device: str = DEFAULT_DEVICE
    """Where the model trains: auto (a free GPU, else the CPU), cpu, cuda or cuda:N."""
    bf16: bool = False
    """bf16 autocast of the forward pass on a CUDA device (ignored on the CPU)."""
    save_every: int = 2_000
    """Checkpoint period in steps."""
    eval_every: int = 0
    """Simulated evaluation period in steps (0: only at the end when eval_episodes > 0)."""
    eval_episodes: int = 0
    """Episodes per evaluation (0: no evaluation)."""
    task: str | None = None
    """Simulated task for evaluation (reach, pick_place, track)."""
    time_budget_s: float | None = None
    """Stop (and save) after this much wall time of training, whatever `steps` says; the
    learning rate then decays on whichever runs out first (not bitwise resumable)."""
    policy: dict = field(default_factory=dict)
    """FastSlowConfig overrides (horizon, image_size_px, use_env_state, action_mode, ...)."""

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.flow_samples < 1:
            raise ConfigError("TrainConfig: steps, batch_size and flow_samples must be >= 1")
        if self.k_max < 0 or self.latent_delay_max < 0 or self.rtc_max_prefix < 0:
            raise ConfigError("TrainConfig: k_max, latent_delay_max and rtc_max_prefix must be >= 0")
        if not 0.0 <= self.k_zero_prob <= 1.0:
            raise ConfigError("TrainConfig.k_zero_prob must be in [0, 1]")
        if self.forward_noise < 0:
            raise ConfigError("TrainConfig.forward_noise must be >= 0")
        if self.eval_episodes and self.task is None:
            raise ConfigError("TrainConfig: evaluation needs a task (--task reach|pick_place)")
        if self.threads < 1:
            raise ConfigError("TrainConfig.threads must be >= 1")
        check_device(self.device)


@dataclass
class TrainResult:
    policy: FastSlowPolicy
    steps: int
    wall_s: float
    losses: list[tuple[int, float]]
    evals: list[dict]
    num_parameters: int


def lr_at(step: int, cfg: TrainConfig, time_fraction: float = 0.0) -> float:
    """Linear warm-up to `lr`, then cosine to 0.1 * lr at `steps`, or earlier when the
    time budget runs out first (`time_fraction` = elapsed / budget)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = min(1.0, max((step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps), time_fraction))
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def policy_config(frames: FrameTable, cfg: TrainConfig) -> FastSlowConfig:
    overrides = dict(cfg.policy)
    use_env = bool(overrides.get("use_env_state", False))
    if use_env and frames.env_states is None:
        raise ConfigError("use_env_state needs frames loaded with use_env_state=True")
    age_max = max(int(overrides.get("max_age_ticks", FastSlowConfig.max_age_ticks)), cfg.k_max + cfg.latent_delay_max)
    env_state_dim = frames.env_states.shape[1] if use_env and frames.env_states is not None else 0
    return FastSlowConfig(
        **{
            **overrides,
            "state_dim": frames.states.shape[1],
            "start_state_rad": tuple(np.median(frames.states[np.unique(frames.episode_start)], axis=0).tolist()),
            "instructions": tuple(sorted({frames.tasks[i] for i in np.unique(frames.task_ids)})),
            "action_dim": frames.actions.shape[1],
            "control_rate_hz": frames.fps,
            "env_state_dim": env_state_dim,
            "max_age_ticks": age_max,
            "rtc_train": cfg.rtc_train,
            "latent_delay_max": cfg.latent_delay_max,
            "action_key": cfg.action_key,
        }
    )


def fit_normalizer(frames: FrameTable, config: FastSlowConfig, ee: np.ndarray | None = None) -> Normalizer:
    """Statistics over every frame's state and the (offset 0) chunk starting there."""
    starts = np.arange(frames.num_frames)
    idx, mask = chunk_indices(starts, config.horizon, frames.episode_end)
    return Normalizer.fit(
        config.action_mode,
        frames.states,
        frames.actions[idx],
        frames.states,
        mask,
        frames.env_states if config.use_env_state else None,
        ee,
        config.ee_features_arm or None,
    )


class Trainer:
    def __init__(self, cfg: TrainConfig, frames: FrameTable | None = None, progress: bool = True) -> None:
        self.cfg = cfg
        self.progress = progress
        self.device = torch_device(cfg.device)
        on_cpu = self.device.type == "cpu"
        torch.set_num_threads(max(1, min(cfg.threads, 2)) if on_cpu else cfg.threads)
        if cfg.bf16 and on_cpu:
            log.warning("bf16 autocast applies on a CUDA device only; training in fp32 on the CPU")
        torch.manual_seed(cfg.seed)
        self.rng = np.random.default_rng(cfg.seed)
        resume_doc = read_config(cfg.out) if _has_training_state(cfg.out) else None
        if resume_doc is not None and resume_doc.get("policy_type") != POLICY_TYPE:
            raise ConfigError(f"{cfg.out} holds a {resume_doc.get('policy_type')!r} policy, not {POLICY_TYPE!r}")
        if resume_doc is not None:
            _check_same_targets(resume_doc, cfg)
            self.config = FastSlowConfig.from_checkpoint(resume_doc)
            self.vocab = Vocabulary(resume_doc["vocabulary"])
            self.normalizer = Normalizer.from_dict(resume_doc["normalization"])
        self.frames = (
            frames
            if frames is not None
            else load_frames(
                cfg.dataset,
                tuple(self._policy_field("cameras")),
                self._policy_field("image_size_px"),
                self._policy_field("use_env_state"),
                progress=progress,
                action_key=cfg.action_key,
                blob_cameras=tuple(self._policy_field("env_blob_cameras")),
                ball_calibration=cfg.ball_calibration,
            )
        )
        if resume_doc is None:
            self.config = policy_config(self.frames, cfg)
        self.ee = self.ee_of_actions = self.ee_features = None
        if self.config.ee_features_arm:  # forward kinematics of every state and action, once
            self.ee_features = EndEffectorFeatures(self.config.ee_features_arm)
            self.ee, self.ee_of_actions = (self.ee_features(x) for x in (self.frames.states, self.frames.actions))
        if resume_doc is None:
            self.vocab = Vocabulary.build(self.frames.tasks)
            self.normalizer = fit_normalizer(self.frames, self.config, self.ee)
        self.motion_std = tick_motion_std(self.frames.actions, self.frames.episode_start)
        self.tokens = torch.from_numpy(self.vocab.encode_many(self.frames.tasks, self.config.max_words))
        self.model = FastSlowModel(self.config, len(self.vocab)).to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self._prefetched: tuple[Batch, Any] | None = None  # (next batch, numpy RNG state before it)
        self.step = 0
        self.losses: list[tuple[int, float]] = []
        self.evals: list[dict] = []

    def _policy_field(self, name: str):
        if hasattr(self, "config"):
            return getattr(self.config, name)
        return self.cfg.policy.get(name, getattr(FastSlowConfig, name))

    def resume(self) -> None:
        """Continue from the checkpoint at `cfg.out` (model, optimizer, step, RNG)."""
        policy = FastSlowPolicy.load(self.cfg.out)
        self.model.load_state_dict(policy.model.state_dict())
        doc = load_training_state(self.cfg.out, self.optimizer, self.rng)
        self.step = int(doc["step"])
        self.losses = [tuple(x) for x in doc.get("losses", [])]
        self.evals = doc.get("evals", [])
        log.info("resumed %s at step %d", self.cfg.out, self.step)

    def batch(self) -> Batch:
        """The next training batch, on the training device."""
        cfg, c, f = self.cfg, self.config, self.frames
        idx = sample_examples(
            self.rng,
            cfg.batch_size,
            f.num_frames,
            c.horizon,
            cfg.k_max,
            cfg.latent_delay_max,
            f.episode_start,
            f.episode_end,
            cfg.k_zero_prob,
        )
        image_idx = torch.from_numpy(idx.image)
        frames = [image_idx]
        for back in past_frame_ticks_back(c.past_frame_ticks, c.past_frames):
            # the same camera k G frames earlier (the episode's first frame at its start)
            past = delayed_frame_index(idx.image, back, f.episode_start[idx.image])
            frames.append(torch.from_numpy(past))
        stacked = [torch.cat([f.images[cam][i] for i in frames], dim=1) for cam in c.cameras]
        images = [self._shift(to_device(x, self.device)) for x in stacked]
        env_state = None
        if c.use_env_state:
            assert f.env_states is not None  # frames are loaded (or checked) with env states for such a config
            env_state = torch.from_numpy(f.env_states[idx.obs])  # observed at t, like the images
        state = conditioning_state_rows(f.states, f.actions, idx.obs, idx.state)
        ee = None
        if cfg.forward_noise > 0:
            state = state + forward_noise(self.rng, idx.state - idx.obs, cfg.forward_noise * self.motion_std)
            if self.ee_features is not None:  # the features of the noisy state
                ee = torch.from_numpy(self.ee_features(state))
        elif self.ee is not None and self.ee_of_actions is not None:  # the same rule on the features
            ee = torch.from_numpy(conditioning_state_rows(self.ee, self.ee_of_actions, idx.obs, idx.state))
        prefix = None
        if cfg.rtc_train:
            prefix = torch.from_numpy(self.rng.integers(0, min(cfg.rtc_max_prefix, c.horizon - 1) + 1, cfg.batch_size))
        return Batch(
            images=images,
            tokens=self.tokens[f.task_ids[idx.image]],
            state=torch.from_numpy(state),
            chunk=torch.from_numpy(f.actions[idx.chunk]),
            mask=torch.from_numpy(idx.mask),
            age=torch.from_numpy(idx.age),
            env_state=env_state,
            prefix_rows=prefix,
            ee=ee,
        ).to(self.device)

    def _shift(self, images: torch.Tensor) -> torch.Tensor:
        """(N, C, h, w) uint8 shifted by up to `shift_px` each way (replicate padding; the
        frames stacked on C move together), offsets drawn from the numpy RNG, the shift done
        where the images are."""
        s = self.cfg.shift_px
        if s == 0:
            return images
        n, channels, h, w = images.shape
        padded = torch.nn.functional.pad(images.float(), (s, s, s, s), mode="replicate").to(torch.uint8)
        dx, dy = self.rng.integers(0, 2 * s + 1, n), self.rng.integers(0, 2 * s + 1, n)
        d = images.device
        rows = torch.from_numpy(dy).to(d)[:, None] + torch.arange(h, device=d)  # (N, h)
        cols = torch.from_numpy(dx).to(d)[:, None] + torch.arange(w, device=d)  # (N, w)
        pick = (torch.arange(n, device=d)[:, None, None, None], torch.arange(channels, device=d)[None, :, None, None])
        return padded[pick[0], pick[1], rows[:, None, :, None], cols[:, None, None, :]]

    def _next_batch(self) -> Batch:
        """The batch assembled ahead (on a GPU), else a new one."""
        if self._prefetched is not None:
            batch, self._prefetched = self._prefetched[0], None
            return batch
        return self.batch()

    def _prefetch(self) -> None:
        """Assemble the next batch now, while the GPU works on the current step (the
        numpy RNG state before it is kept: a checkpoint resumes before this batch)."""
        state = self.rng.bit_generator.state
        self._prefetched = (self.batch(), state)

    def policy(self) -> FastSlowPolicy:
        """The model as a policy (shares the weights; puts the model in eval mode)."""
        return FastSlowPolicy(self.model, self.normalizer, self.vocab, version=self.step)

    def save(self) -> None:
        cfg = self.cfg
        extra = {
            "step": self.step,
            "dataset": str(cfg.dataset),
            "frames": self.frames.num_frames,
            "episodes": self.frames.num_episodes,
            "dataset_joint_units": self.frames.joint_units,
            "train_config": _jsonable(asdict(cfg)),
        }
        self.policy().save(cfg.out, extra)
        rng = self.rng
        if self._prefetched is not None:  # the resumed run draws the prefetched batch again
            rng = np.random.default_rng()
            rng.bit_generator.state = self._prefetched[1]
        save_training_state(cfg.out, self.optimizer, self.step, rng, {"losses": self.losses, "evals": self.evals})

    def evaluate(self) -> dict:
        from robotrl.inference.evaluation import evaluate

        if self.cfg.task is None:
            raise ConfigError("TrainConfig: evaluation needs a task (--task reach|pick_place)")
        result = evaluate(self.policy(), self.cfg.task, self.cfg.eval_episodes, progress=self.progress)
        result["step"] = self.step
        self.evals.append(
            {k: result[k] for k in ("step", "success_rate", "wilson95_low", "wilson95_high", "mean_ticks")}
        )
        return result

    def train(self, until_step: int | None = None) -> TrainResult:
        """Train to `cfg.steps` or the time budget (then evaluate, with `eval_episodes`), or
        stop early at `until_step` as an interruption would; then save."""
        from tqdm import tqdm

        cfg = self.cfg
        last = cfg.steps if until_step is None else min(until_step, cfg.steps)
        start = time.perf_counter()
        ema, out_of_time = None, False
        with tqdm(total=cfg.steps, initial=self.step, desc="training", unit="step", disable=not self.progress) as bar:
            while self.step < last:
                elapsed_s = time.perf_counter() - start
                time_fraction = elapsed_s / cfg.time_budget_s if cfg.time_budget_s else 0.0
                for group in self.optimizer.param_groups:
                    group["lr"] = lr_at(self.step, cfg, time_fraction)
                self.model.train()
                with autocast(self.device, cfg.bf16):
                    loss = flow_matching_loss(self.model, self.normalizer, self._next_batch(), cfg.flow_samples)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                self.optimizer.step()
                self.step += 1
                if self.device.type == "cuda" and self.step < last:
                    self._prefetch()  # the GPU is still busy with this step
                value = float(loss.detach())  # waits for the step
                ema = value if ema is None else 0.98 * ema + 0.02 * value
                if self.step % 25 == 0 or self.step == 1:
                    self.losses.append((self.step, value))
                    bar.set_postfix(loss=f"{ema:.4f}")
                bar.update(1)
                out_of_time = cfg.time_budget_s is not None and time.perf_counter() - start > cfg.time_budget_s
                if cfg.eval_every and cfg.eval_episodes and self.step % cfg.eval_every == 0 and self.step < cfg.steps:
                    r = self.evaluate()
                    bar.write(
                        f"step {self.step}: success {r['success_rate']:.0%} "
                        f"[{r['wilson95_low']:.0%}, {r['wilson95_high']:.0%}]"
                    )
                if self.step % cfg.save_every == 0 or out_of_time:
                    self.save()
                if out_of_time:
                    log.warning("time budget of %.0f s reached at step %d", cfg.time_budget_s, self.step)
                    break
        if cfg.eval_episodes and (self.step == cfg.steps or out_of_time):  # finished, not interrupted
            self.evaluate()
        self.save()
        return TrainResult(
            self.policy(), self.step, time.perf_counter() - start, self.losses, self.evals, self.model.num_parameters
        )


def train(
    cfg: TrainConfig, resume: bool = False, frames: FrameTable | None = None, progress: bool = True
) -> TrainResult:
    if not resume and _has_training_state(cfg.out):
        raise ConfigError(
            f"{cfg.out} already holds a training run; pass --resume to continue it or choose another --out"
        )
    if resume and not _has_training_state(cfg.out):
        raise ConfigError(f"nothing to resume at {cfg.out}")
    trainer = Trainer(cfg, frames, progress)
    if resume:
        trainer.resume()
    return trainer.train()


def _check_same_targets(doc: dict, cfg: TrainConfig) -> None:
    """ConfigError when a resumed run would estimate another env_state than it started on
    (the ball from calibrated cameras against the dataset's own column)."""
    saved = doc.get("training", {}).get("train_config", {}).get("ball_calibration")
    if (saved is None) != (cfg.ball_calibration is None):
        how = f"with --ball-target {saved}" if saved else "without --ball-target"
        raise ConfigError(f"the run in {cfg.out} was trained {how}: resume it the same way")


def _has_training_state(path: Path) -> bool:
    from robotrl.train.state import JSON_FILE

    return (Path(path) / JSON_FILE).is_file()


def _jsonable(d: dict) -> dict:
    return {k: str(v) if isinstance(v, Path) else v for k, v in d.items()}
