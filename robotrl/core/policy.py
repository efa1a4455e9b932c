"""The `ChunkPolicy` protocol, the optional capabilities the server checks by type, and
the data a policy exchanges: an observation in, an action chunk out.

Actions are absolute joint-position targets in robot units (radians), never normalised,
so a chunk can cross a process boundary and be spliced by absolute tick.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class PolicyMetadata:
    policy_type: str
    """e.g. "fastslow_flow", "lerobot_act"."""
    horizon: int
    """H, rows per chunk."""
    action_dim: int
    """A, joints per row."""
    control_rate_hz: float
    """Rate at which chunk rows are executed."""
    state_dim: int
    """Length of the proprioceptive state the policy reads (radians)."""
    cameras: tuple[str, ...] = ()
    """Camera names the policy reads, in `PolicyObservation.images`."""
    image_size_px: int = 0
    """Square image size the policy expects (0: no images)."""
    normalization_id: str = ""
    """Hash of the normalisation statistics baked into the checkpoint."""
    env_state_dim: int = 0
    """Length of the privileged `env_state` the policy reads (0: none; sim only)."""
    execute_steps: int = 0
    """s, rows of a chunk the policy was trained to run before the next synchronous
    request (evaluation's default); 0: all H."""
    follows_rtc_prefix: bool = True
    """Whether the policy uses an RTC prefix (guidance or clean rows); False: a request
    carrying one is refused, so the rtc execution modes cannot drive it."""
    start_state_rad: tuple[float, ...] = ()
    """(state_dim,) where the training episodes started, radians: a real arm is moved there
    before each episode; () unknown (the arm starts where it stands)."""
    instructions: tuple[str, ...] = ()
    """The instructions the policy was trained on; () unknown (any is passed on as given)."""
    past_frame_ticks: int = 0
    """G: the policy also reads each camera's frames from G, 2 G, .. P G ticks before the
    observation, under `past_image_key(camera, k)` (motion a single frame cannot show);
    0: none."""
    past_frames: int = 1
    """P: how many past frames a camera gives when `past_frame_ticks` > 0."""
    max_latent_age_ticks: int | None = None
    """Slow/fast policies: the oldest latent (ticks between its frame and the request's
    observation) the fast pathway was trained on; an older one is re-encoded with the
    request (`LatentCache`). None: any age."""

    @property
    def image_keys(self) -> tuple[str, ...]:
        """Every key the policy reads in `PolicyObservation.images`: the cameras, then
        their past frames when it reads them."""
        ticks = past_frame_ticks_back(self.past_frame_ticks, self.past_frames)
        return self.cameras + tuple(past_image_key(c, k) for k in range(1, len(ticks) + 1) for c in self.cameras)


def past_frame_ticks_back(past_frame_ticks: int, past_frames: int) -> tuple[int, ...]:
    """Ticks back of a camera's past frames k = 1 .. P: (G, 2 G, .. P G); () when G = 0."""
    return tuple(k * past_frame_ticks for k in range(1, past_frames + 1)) if past_frame_ticks else ()


def past_image_key(camera: str, k: int = 1) -> str:
    """Key in `PolicyObservation.images` of `camera`'s frame k x `past_frame_ticks` earlier."""
    return f"{camera}@past" if k == 1 else f"{camera}@past{k}"


@dataclass
class PolicyObservation:
    state_rad: np.ndarray
    """(state_dim,) joint positions the chunk should start from: the measured state, or
    the state forwarded to the chunk's first tick (VLASH)."""
    tick: int
    """Absolute control tick at which the observation was captured."""
    instruction: str = ""
    images: dict[str, np.ndarray] = field(default_factory=dict)
    """Camera name -> (H, W, 3) uint8, captured at `tick` (may be stale); for a policy
    with `past_frame_ticks` G also `past_image_key(name, k)` -> the frame of `tick - k G`
    for k = 1 .. P (the episode's first frame when it began less than k G ticks ago)."""
    env_state: np.ndarray | None = None
    """Optional privileged features (sim only)."""
    delay_ticks: int = 0
    """d: ticks between capture and the chunk's first executed row."""
    prefix_rad: np.ndarray | None = None
    """(P, A) the robot's current plan for the chunk's own ticks `tick + delay_ticks` ..
    (the rows the new chunk replaces), or None. The state is already forwarded to the
    chunk's first tick, so no row is frozen: RTC guides the new chunk toward this plan
    with weights decaying over the chunk, for continuity at the boundary."""


@dataclass
class ActionChunk:
    actions_rad: np.ndarray
    """(H, A) absolute joint targets, radians."""
    start_tick: int
    """Absolute tick at which row 0 executes (observation tick + delay)."""
    version: int = 0
    """Weight version that produced the chunk."""


@runtime_checkable
class ChunkPolicy(Protocol):
    @property
    def metadata(self) -> PolicyMetadata: ...

    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk: ...

    def reset(self) -> None: ...


@runtime_checkable
class SlowFastPolicy(ChunkPolicy, Protocol):
    """A `ChunkPolicy` with a slow pathway (docs/algorithms.md section 2): `encode_slow`
    turns images and instruction into a latent at a low rate; the fast pathway answers
    every request from the newest latent and its age. The server and the local chunk
    source keep one latent per robot (`robotrl.inference.latents.LatentCache`)."""

    def encode_slow(self, obs: PolicyObservation) -> Any:
        """The latent of `obs.images` and `obs.instruction` (opaque to the caller)."""
        ...

    def predict_chunk(self, obs: PolicyObservation, latent: Any = None, latent_age_ticks: int = 0) -> ActionChunk:
        """The fast pathway from `latent` (encoded now when None), `latent_age_ticks`
        older than `obs.tick`."""
        ...


@runtime_checkable
class StateEstimatingPolicy(Protocol):
    """A `SlowFastPolicy` whose slow pathway estimates the simulator's privileged
    `env_state` from the images (`train --estimate-env-state`): the fast pathway reads
    the estimate, so the policy runs on a real arm. Simulated evaluation compares the
    estimate with the simulator's env_state (`LocalChunkSource.estimate_errors`)."""

    def estimate_env_state(self, latent: Any) -> np.ndarray | None:
        """(E,) the estimate of env_state, in env_state's units, that the fast pathway
        reads with `latent`; None for a policy that reads no estimate of the simulator's
        env_state (none, or one of something else: `train --blob-target`)."""
        ...


@runtime_checkable
class BatchedPolicy(Protocol):
    """A policy that answers many robots' observations in one model call; a
    `SlowFastPolicy` takes one latent and latent age per observation too."""

    def predict_chunks(self, observations: list[PolicyObservation], *latents_and_ages: Any) -> list[ActionChunk]: ...


@runtime_checkable
class BatchedSlowPolicy(Protocol):
    """A `SlowFastPolicy` whose slow pathway encodes many robots in one model call: the
    `LatentCache` refreshes every due robot at once, each latent stamped with its own
    robot's tick and the weight version that made it."""

    def encode_slow_batch(self, observations: list[PolicyObservation]) -> list[Any]:
        """One latent per observation, in order, each as `encode_slow` gives it alone."""
        ...


@runtime_checkable
class SavablePolicy(ChunkPolicy, Protocol):
    """A policy that writes itself as a checkpoint folder `robotrl serve --policy` loads."""

    def save(self, path: Path) -> None: ...


@runtime_checkable
class ReloadablePolicy(Protocol):
    """A policy whose weights can be swapped while it serves (online learning)."""

    def load_weights(self, data: bytes) -> None:
        """Replace the weights with safetensors `data` (same architecture)."""
        ...


@runtime_checkable
class StagedReloadablePolicy(ReloadablePolicy, Protocol):
    """A reloadable policy that takes new weights in two steps, so the thread that serves
    never waits on parsing or a host-to-device copy: `stage_weights` off the serving thread,
    `swap_weights` on it between batches (`PolicyServer` checks this type)."""

    def stage_weights(self, data: bytes) -> Any:
        """Safetensors `data` parsed, checked against the model and copied onto its device,
        touching nothing the policy serves with (safe from another thread while it serves);
        raises as `load_weights` does for weights that do not fit."""
        ...

    def swap_weights(self, staged: Any) -> None:
        """Put weights from `stage_weights` in service (a copy on the model's device)."""
        ...
