"""What a transition looks like: the observation/action spec every executor and the
learner agree on, and the check that rejects a batch that does not match it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from robotrl.core.errors import ProtocolError
from robotrl.wire.messages import TransitionBatch


class SpecMismatch(ProtocolError):
    """A transition batch whose arrays do not match the learner's `TransitionSpec`."""


@dataclass(frozen=True)
class TransitionSpec:
    """Shapes of one transition row.

    state_dim: S joints (radians); action_dim: A joints (radians); cameras: camera name
    -> (h, w) of the uint8 RGB images at training resolution; env_state_dim: E privileged
    features (0: none, real arms).
    """

    state_dim: int
    action_dim: int
    cameras: dict[str, tuple[int, int]] = field(default_factory=dict)
    env_state_dim: int = 0

    def to_dict(self) -> dict:
        return {**asdict(self), "cameras": {k: list(v) for k, v in self.cameras.items()}}

    @classmethod
    def from_dict(cls, data: dict) -> TransitionSpec:
        return cls(
            int(data["state_dim"]),
            int(data["action_dim"]),
            {k: (int(v[0]), int(v[1])) for k, v in data.get("cameras", {}).items()},
            int(data.get("env_state_dim", 0)),
        )

    def check(self, batch: TransitionBatch) -> int:
        """Rows in `batch`; raises `SpecMismatch` naming the robot, the field, the shape
        or dtype it has and the one expected."""
        n = len(batch.ticks)
        where = f"transitions from robot {batch.robot_id!r} (episode {batch.episode_id})"
        expected = {
            "ticks": ((n,), None),
            "state": ((n, self.state_dim), None),
            "action": ((n, self.action_dim), None),
            "policy_action": ((n, self.action_dim), None),
            "reward": ((n,), None),
            "intervention": ((n,), np.bool_),
            "version": ((n,), None),
            "delay_ticks": ((n,), None),
        }
        for name, (shape, dtype) in expected.items():
            _check_array(where, name, getattr(batch, name), shape, dtype)
        if n == 0:
            raise SpecMismatch(f"{where}: empty batch")
        if set(batch.images) != set(self.cameras):
            raise SpecMismatch(f"{where}: cameras {sorted(batch.images)}, expected {sorted(self.cameras)}")
        for cam, (h, w) in self.cameras.items():
            _check_array(where, f"images[{cam!r}]", batch.images[cam], (n, h, w, 3), np.uint8)
        if self.env_state_dim:
            if batch.env_state is None:
                raise SpecMismatch(f"{where}: env_state missing, expected ({n}, {self.env_state_dim})")
            _check_array(where, "env_state", batch.env_state, (n, self.env_state_dim), None)
        elif batch.env_state is not None:
            raise SpecMismatch(f"{where}: env_state given but this learner reads none")
        return n


def _check_array(where: str, name: str, value, shape: tuple[int, ...], dtype) -> None:
    if not isinstance(value, np.ndarray):
        raise SpecMismatch(f"{where}: {name} is {type(value).__name__}, expected an array of shape {shape}")
    if value.shape != shape:
        raise SpecMismatch(f"{where}: {name} has shape {value.shape}, expected {shape}")
    if dtype is not None and value.dtype != dtype:
        raise SpecMismatch(f"{where}: {name} has dtype {value.dtype}, expected {np.dtype(dtype)}")
    if value.dtype.kind not in "biuf":
        raise SpecMismatch(f"{where}: {name} has dtype {value.dtype}, expected a numeric array")
