"""Normalisation statistics of a fast/slow policy, computed from its training data.

Actions are normalised in one of two ways (`FastSlowConfig.action_mode`):
- "absolute": (a - mean) / std per joint;
- "delta": (a_i - state) - mean_i) / std_i per chunk row i and joint, so row i of every
  chunk is measured from the (forwarded) state the chunk starts from;
- "ee_delta", "ee_absolute": the same over end-effector rows (`EndEffectorActions` of the
  arm `arm`: the commanded gripper position in metres instead of the three placing joints).
Outputs always go back to absolute joint targets in radians.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from robotrl.core.errors import ConfigError
from robotrl.policies.fastslow.config import DELTA_MODES, EE_MODES
from robotrl.policies.fastslow.ee_actions import EndEffectorActions

STATE_STD_FLOOR = 1e-2
"""Smallest std used for states, env_state and end-effector features, rad or m. A feature
whose std in the training data is at or below it (a joint the demonstrations never moved:
the wrist roll and the gripper on `track`) is left out, normalised to 0: the model learned
nothing from it, and amplifying a sensor's noise on it by 1 / floor throws the policy off
(docs/results.md section 21)."""
ACTION_STD_FLOOR = 1e-3
"""Smallest std used for actions."""


@dataclass
class Normalizer:
    action_mode: str
    state_mean: np.ndarray
    """(S,)"""
    state_std: np.ndarray
    action_mean: np.ndarray
    """(A,) absolute, (H, A) delta."""
    action_std: np.ndarray
    env_mean: np.ndarray | None = None
    env_std: np.ndarray | None = None
    ee_mean: np.ndarray | None = None
    """(9,) end-effector features (robotrl.policies.fastslow.features), when used."""
    ee_std: np.ndarray | None = None
    arm: str | None = None
    """Arm model whose kinematics map end-effector rows to joints (end-effector modes only)."""

    def __post_init__(self) -> None:
        if self.action_mode in EE_MODES and not self.arm:
            raise ValueError(f"action_mode {self.action_mode!r} needs the arm model (Normalizer.arm)")
        self._ee_actions = None
        keep = {"state": _moved_in_training(self.state_std)}
        self.state_std = np.maximum(np.asarray(self.state_std, np.float32), STATE_STD_FLOOR)
        self.action_std = np.maximum(np.asarray(self.action_std, np.float32), ACTION_STD_FLOOR)
        self.state_mean = np.asarray(self.state_mean, np.float32)
        self.action_mean = np.asarray(self.action_mean, np.float32)
        if self.env_mean is not None:
            keep["env"] = _moved_in_training(self.env_std)
            self.env_mean = np.asarray(self.env_mean, np.float32)
            self.env_std = np.maximum(np.asarray(self.env_std, np.float32), STATE_STD_FLOOR)
        if self.ee_mean is not None:
            keep["ee"] = _moved_in_training(self.ee_std)
            self.ee_mean = np.asarray(self.ee_mean, np.float32)
            self.ee_std = np.maximum(np.asarray(self.ee_std, np.float32), STATE_STD_FLOOR)
        arrays = self.to_arrays() | {f"{name}_keep": mask for name, mask in keep.items()}
        self._t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
        self._moved: dict[tuple[str, torch.device], torch.Tensor] = {}  # statistics on other devices

    @property
    def in_ee(self) -> bool:
        """Rows are end-effector rows ("ee_delta", "ee_absolute")."""
        return self.action_mode in EE_MODES

    @property
    def is_delta(self) -> bool:
        """Rows are measured from the state the chunk starts from ("delta", "ee_delta")."""
        return self.action_mode in DELTA_MODES

    @classmethod
    def fit(
        cls,
        action_mode: str,
        states: np.ndarray,
        chunks: np.ndarray,
        chunk_states: np.ndarray,
        mask: np.ndarray,
        env: np.ndarray | None = None,
        ee: np.ndarray | None = None,
        arm: str | None = None,
    ) -> Normalizer:
        """Statistics from training data.

        states: (N, S) every state; chunks: (M, H, A) action chunks starting at
        chunk_states (M, S); mask: (M, H) rows that are real (not padding); env: (N, E); ee: (N, 9);
        arm: the arm model (end-effector modes only).
        """
        if action_mode in EE_MODES:
            if arm is None:
                raise ConfigError(f"action_mode {action_mode!r} needs the arm model (arm=)")
            rows = EndEffectorActions(arm)
            chunks, chunk_states = rows.to_ee(chunks), rows.to_ee(chunk_states[:, : chunks.shape[2]])
        if action_mode in DELTA_MODES:
            deltas = chunks - chunk_states[:, None, : chunks.shape[2]]
            w = mask[..., None].astype(np.float64)
            n = np.maximum(w.sum(0), 1.0)
            mean = (deltas * w).sum(0) / n
            std = np.sqrt(((deltas - mean) ** 2 * w).sum(0) / n)
        else:
            rows = chunks[mask]
            mean, std = rows.mean(0), rows.std(0)
        env_mean = env_std = None
        if env is not None:
            env_mean, env_std = env.mean(0), env.std(0)
        ee_mean = ee_std = None
        if ee is not None:
            ee_mean, ee_std = ee.mean(0), ee.std(0)
        return cls(
            action_mode,
            states.mean(0),
            states.std(0),
            mean,
            std,
            env_mean,
            env_std,
            ee_mean,
            ee_std,
            arm if action_mode in EE_MODES else None,
        )

    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {
            "state_mean": self.state_mean,
            "state_std": self.state_std,
            "action_mean": self.action_mean,
            "action_std": self.action_std,
        }
        # __post_init__ sets each *_std whenever its *_mean is set
        if self.env_mean is not None and self.env_std is not None:
            out |= {"env_mean": self.env_mean, "env_std": self.env_std}
        if self.ee_mean is not None and self.ee_std is not None:
            out |= {"ee_mean": self.ee_mean, "ee_std": self.ee_std}
        return out

    def to_dict(self) -> dict:
        arm = {"arm": self.arm} if self.arm else {}
        return {"action_mode": self.action_mode} | arm | {k: v.tolist() for k, v in self.to_arrays().items()}

    @classmethod
    def from_dict(cls, data: dict) -> Normalizer:
        def get(k: str) -> Any:  # float32 array, or None for an absent or null key
            return None if data.get(k) is None else np.asarray(data[k], np.float32)

        return cls(
            data["action_mode"],
            get("state_mean"),
            get("state_std"),
            get("action_mean"),
            get("action_std"),
            get("env_mean"),
            get("env_std"),
            get("ee_mean"),
            get("ee_std"),
            data.get("arm"),
        )

    @property
    def id(self) -> str:
        """Short hash of the statistics (PolicyMetadata.normalization_id)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    def stat(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """Statistic `name` (a key of `to_arrays`, or `state_keep`, `env_keep`, `ee_keep`: 1 for
        the features that moved in training) on the device of `like` (moved once per
        device): the maths runs where its inputs are."""
        t = self._t[name]
        if t.device == like.device:
            return t
        key = (name, like.device)
        if key not in self._moved:
            self._moved[key] = t.to(like.device)
        return self._moved[key]

    def state(self, state: torch.Tensor) -> torch.Tensor:
        return self._normalise("state", state)

    def env(self, env: torch.Tensor) -> torch.Tensor:
        return self._normalise("env", env)

    def _normalise(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """(x - mean) / std, 0 for the features that did not move in training."""
        return (x - self.stat(f"{name}_mean", x)) / self.stat(f"{name}_std", x) * self.stat(f"{name}_keep", x)

    def env_from(self, z: torch.Tensor) -> torch.Tensor:
        """Inverse of `env`: normalised (B, E) -> env_state units (metres)."""
        return z * self.stat("env_std", z) + self.stat("env_mean", z)

    def fresh(
        self,
        state: torch.Tensor,
        env: torch.Tensor | None = None,
        ee: torch.Tensor | None = None,
        relative_object_dim: int = 0,
    ) -> torch.Tensor:
        """(B, fresh_dim) fast-pathway features: normalised state [+ env_state] [+ EE]
        [+ `object_offsets_dm` of env (slots of `relative_object_dim`) from ee]."""
        parts = [self.state(state)]
        if env is not None:
            parts.append(self.env(env))
        if ee is not None:
            parts.append(self._normalise("ee", ee))
        if relative_object_dim:
            if env is None or ee is None:
                raise ValueError("relative_object_dim needs both env and ee")
            parts.append(object_offsets_dm(env, ee, relative_object_dim))
        return torch.cat(parts, dim=1)

    @property
    def ee_actions(self) -> EndEffectorActions:
        """The arm's joint <-> end-effector row conversion (end-effector modes), built on first use."""
        if self._ee_actions is None:
            if self.arm is None:
                raise ConfigError(f"action_mode {self.action_mode!r} has no end-effector rows (Normalizer.arm is None)")
            self._ee_actions = EndEffectorActions(self.arm)
        return self._ee_actions

    def encode_chunk(self, actions_rad: torch.Tensor, state_rad: torch.Tensor) -> torch.Tensor:
        """(B, H', A) radians (H' <= H rows from the chunk start) -> normalised."""
        h, a = actions_rad.shape[1:]
        mean, std = self.stat("action_mean", actions_rad), self.stat("action_std", actions_rad)
        rows, start = actions_rad, state_rad[:, :a]
        if self.in_ee:  # kinematics in numpy on the CPU
            device = actions_rad.device
            rows = torch.from_numpy(self.ee_actions.to_ee(rows.cpu().numpy())).to(device)
            start = torch.from_numpy(self.ee_actions.to_ee(start.cpu().numpy())).to(device)
        if self.is_delta:
            return (rows - start[:, None] - mean[:h]) / std[:h]
        return (rows - mean) / std

    def decode_chunk(self, x: torch.Tensor, state_rad: torch.Tensor) -> torch.Tensor:
        """(B, H, A) normalised -> absolute joint targets, radians. End-effector rows go
        back to joints by IK seeded with the state."""
        rows = x * self.stat("action_std", x) + self.stat("action_mean", x)
        start = state_rad[:, : x.shape[2]]
        if not self.in_ee:
            return rows + start[:, None] if self.is_delta else rows
        seeds = start.detach().cpu().numpy()  # inverse kinematics in numpy on the CPU
        rows = rows.detach().cpu().numpy() + (self.ee_actions.to_ee(seeds)[:, None] if self.is_delta else 0.0)
        return torch.from_numpy(
            np.stack([self.ee_actions.to_joints(r, q) for r, q in zip(rows, seeds)]).astype(np.float32)
        ).to(x.device)


def _moved_in_training(std) -> np.ndarray:
    """(F,) float32 1 where a feature's training std is above `STATE_STD_FLOOR`, else 0
    (a saved std at the floor is one the floor set)."""
    return (np.asarray(std, np.float32) > STATE_STD_FLOOR).astype(np.float32)


def object_offsets_dm(env: torch.Tensor, ee: torch.Tensor, object_dim: int) -> torch.Tensor:
    """(B, 3 n) xyz of each of the n object slots of env (B, n * object_dim; xyz first,
    metres) minus the gripper position ee[:, :3] (metres), in decimetres."""
    objects = env.reshape(env.shape[0], -1, object_dim)[..., :3]
    return ((objects - ee[:, None, :3]) * 10.0).reshape(env.shape[0], -1)
