"""Which frames a training example reads: the index maths of the augmentations.

Indices are absolute frame indices into the dataset; an episode spans
[episode_start, episode_end) (end exclusive). All functions work elementwise on
numpy arrays (one entry per example) as well as on Python ints.

- **VLASH offset** (docs/algorithms.md section 1): for an example at frame t and offset k,
  the observation (image, privileged features) is frame t, the target chunk is actions
  t + k .. t + k + H - 1, and the state the fast pathway conditions on is the one the
  executor sends for a delay of k (`inference.chunking.conditioning_state`): the measured
  state of frame t when k = 0, the recorded action of frame t + k - 1 (the target
  commanded for the tick before the chunk) when k > 0. The offset is clipped so the chunk
  starts inside the episode; chunk rows past the episode end repeat the last action and
  are masked out of the loss.
- **Delayed latent** (section 2): the slow latent is computed from frame t - j (clipped
  at the episode start); the fast pathway is told its age = state frame - latent frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def offset_state_index(t, k, episode_end):
    """Chunk start frame of an example at frame t with offset k: min(t + k, end - 1)."""
    return np.minimum(np.asarray(t) + np.asarray(k), np.asarray(episode_end) - 1)


def forwarded_state(measured: np.ndarray, previous_action: np.ndarray, k) -> np.ndarray:
    """(B, S) the state the fast pathway conditions on for chunks starting k (B,) rows
    after their observation: the `measured` (B, S) state when k = 0, else the
    `previous_action` (B, S), the target commanded for the row before the chunk (rad).
    With every k = 0 `measured` as it is (the action may then live in another space)."""
    forwarded = np.asarray(k) > 0
    return np.where(forwarded[:, None], previous_action, measured) if forwarded.any() else measured


def conditioning_state_rows(states: np.ndarray, actions: np.ndarray, obs, start) -> np.ndarray:
    """(B, S) conditioning states of examples observed at frames `obs` whose chunks start
    at frames `start` >= `obs` (same episode), `forwarded_state` of `states[obs]` and
    `actions[start - 1]`. `states` (N, S) and `actions` (N, S) share a space (joint
    positions, rad)."""
    obs, start = np.asarray(obs), np.asarray(start)
    if not (start > obs).any():
        return states[obs]
    if states.shape[1:] != actions.shape[1:]:
        raise ValueError(
            f"offset augmentation conditions on recorded actions as states: state {states.shape[1:]} and "
            f"action {actions.shape[1:]} must share a space (train with k_max = 0 otherwise)"
        )
    return forwarded_state(states[obs], actions[np.maximum(start - 1, 0)], start - obs)


def tick_motion_std(actions: np.ndarray, episode_start: np.ndarray) -> np.ndarray:
    """(S,) per-joint standard deviation of the change of the action over one tick,
    a_(t+1) - a_t within an episode, rad. `actions` (N, S), `episode_start` (N,)."""
    same_episode = episode_start[1:] == episode_start[:-1]
    steps = np.diff(actions, axis=0)[same_episode]
    return steps.std(axis=0) if len(steps) else np.zeros(actions.shape[1], actions.dtype)


def forward_noise(rng: np.random.Generator, k: np.ndarray, sigma_per_tick: np.ndarray) -> np.ndarray:
    """(B, S) Gaussian noise for forwarded conditioning states: standard deviation
    `sigma_per_tick` (S,) * k per joint, rad, for examples of offset k (0 where k = 0).

    At inference a forwarded state is a row of an earlier chunk, planned from an older
    observation; the recorded action it stands for in training was commanded with the
    world of frame t + k - 1 in view. Without noise the model learns to read the future
    from it (on `track`, the ball k ticks ahead: docs/algorithms.md section 1)."""
    k = np.asarray(k, dtype=np.float64)
    sigma = np.asarray(sigma_per_tick, dtype=np.float64)
    return (rng.standard_normal((len(k), len(sigma))) * k[:, None] * sigma).astype(np.float32)


def chunk_indices(state_index, horizon: int, episode_end) -> tuple[np.ndarray, np.ndarray]:
    """(..., H) action frames of the chunk starting at `state_index`, and the (..., H)
    mask of rows inside the episode (padding rows repeat the last action)."""
    rows = np.asarray(state_index)[..., None] + np.arange(horizon)
    end = np.asarray(episode_end)[..., None]
    return np.minimum(rows, end - 1), rows < end


def delayed_frame_index(t, j, episode_start):
    """Frame the slow latent sees: max(t - j, start)."""
    return np.maximum(np.asarray(t) - np.asarray(j), np.asarray(episode_start))


@dataclass
class ExampleIndices:
    obs: np.ndarray
    """(B,) frame t of the observation (fresh privileged features; images unless delayed)."""
    image: np.ndarray
    """(B,) frame of the images (and of the slow latent)."""
    state: np.ndarray
    """(B,) frame the chunk starts at, t + k (the state itself: `conditioning_state_rows`)."""
    chunk: np.ndarray
    """(B, H) frames of the target actions."""
    mask: np.ndarray
    """(B, H) rows inside the episode."""
    age: np.ndarray
    """(B,) latent age told to the fast pathway: state frame - image frame."""


def example_indices(t, k, j, horizon: int, episode_start, episode_end) -> ExampleIndices:
    """Combine both augmentations for examples at frames t with offsets k, latent delays j."""
    state = offset_state_index(t, k, episode_end)
    image = delayed_frame_index(t, j, episode_start)
    chunk, mask = chunk_indices(state, horizon, episode_end)
    return ExampleIndices(np.asarray(t), np.asarray(image), np.asarray(state), chunk, mask, np.asarray(state - image))


def sample_examples(
    rng: np.random.Generator,
    batch_size: int,
    num_frames: int,
    horizon: int,
    k_max: int,
    latent_delay_max: int,
    episode_start: np.ndarray,
    episode_end: np.ndarray,
    k_zero_prob: float = 0.0,
) -> ExampleIndices:
    """Uniform frames t, k ~ U{0..k_max}, j ~ U{0..latent_delay_max}; with `k_zero_prob` > 0
    an example gets k = 0 with that probability and k ~ U{0..k_max} otherwise."""
    t = rng.integers(0, num_frames, batch_size)
    k = rng.integers(0, k_max + 1, batch_size)
    if k_zero_prob > 0:
        k = np.where(rng.random(batch_size) < k_zero_prob, 0, k)
    j = rng.integers(0, latent_delay_max + 1, batch_size)
    return example_indices(t, k, j, horizon, episode_start[t], episode_end[t])
