"""Which frames a training example reads: the index maths of the augmentations.

Indices are absolute frame indices into the dataset; an episode spans
[episode_start, episode_end) (end exclusive). All functions work elementwise on
numpy arrays (one entry per example) as well as on Python ints.

- **VLASH offset** (docs/algorithms.md section 1): for an example at frame t and offset k,
  the image is frame t, the state is frame t + k and the target chunk is actions
  t + k .. t + k + H - 1. The offset is clipped so the state exists; chunk rows past
  the episode end repeat the last action and are masked out of the loss.
- **Delayed latent** (section 2): the slow latent is computed from frame t - j (clipped
  at the episode start); the fast pathway is told its age = state frame - latent frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def offset_state_index(t, k, episode_end):
    """State frame of an example at frame t with offset k: min(t + k, end - 1)."""
    return np.minimum(np.asarray(t) + np.asarray(k), np.asarray(episode_end) - 1)


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
    image: np.ndarray
    """(B,) frame of the images (and of the slow latent)."""
    state: np.ndarray
    """(B,) frame of the proprioceptive state."""
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
    return ExampleIndices(np.asarray(image), np.asarray(state), chunk, mask, np.asarray(state - image))


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
