"""`SacNetConfig`: the shape of a SAC actor/critic, saved in its checkpoint."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from robotrl.core.errors import ConfigError


@dataclass(frozen=True)
class SacNetConfig:
    """Networks of a SAC policy over joint-delta actions.

    The action a in [-1, 1]^A is a per-tick joint delta: target_rad = state_rad[:A] +
    a * max_step_rad. Layout follows lerobot's gaussian_actor (so `robotrl bench learner`
    compares equal networks): per input a Linear/LayerNorm/Tanh encoder to `latent_dim`,
    images through a small CNN + learned spatial embeddings, MLP heads.
    """

    state_dim: int
    """S, proprioceptive state length (radians)."""
    action_dim: int
    """A, joints per action (radians)."""
    env_state_dim: int = 0
    """E, privileged features read by the encoder (0: none)."""
    cameras: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Camera name -> (h, w) of the uint8 images the encoder reads (empty: state only)."""
    latent_dim: int = 256
    """Width of each input's encoding."""
    hidden_dims: tuple[int, ...] = (256, 256)
    """Hidden layers of the actor and of each critic head."""
    cnn_channels: int = 32
    """Channels of the 4 conv layers of the image encoder (kernels 7, 5, 3, 3, stride 2)."""
    spatial_features: int = 8
    """Learned spatial embeddings per channel after the CNN."""
    num_critics: int = 2
    """Critic ensemble size."""
    max_step_rad: float = 0.05
    """Joint delta per tick at |a| = 1, radians."""
    horizon: int = 2
    """Rows per served chunk (the delta integrated: row i = state + (i + 1) * delta)."""
    control_rate_hz: float = 30.0
    """Rate at which chunk rows are executed."""
    log_std_min: float = -5.0
    """Lower bound of the actor's log standard deviation."""
    log_std_max: float = 2.0
    """Upper bound of the actor's log standard deviation."""

    def __post_init__(self) -> None:
        for name in (
            "state_dim",
            "action_dim",
            "latent_dim",
            "cnn_channels",
            "spatial_features",
            "num_critics",
            "horizon",
        ):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"SacNetConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_step_rad <= 0:
            raise ConfigError(f"SacNetConfig.max_step_rad must be > 0, got {self.max_step_rad}")
        if self.env_state_dim < 0:
            raise ConfigError("SacNetConfig.env_state_dim must be >= 0")
        object.__setattr__(self, "hidden_dims", tuple(int(h) for h in self.hidden_dims))
        object.__setattr__(self, "cameras", {k: (int(v[0]), int(v[1])) for k, v in self.cameras.items()})

    def to_dict(self) -> dict:
        d = asdict(self)
        return {**d, "hidden_dims": list(self.hidden_dims), "cameras": {k: list(v) for k, v in self.cameras.items()}}

    @classmethod
    def from_dict(cls, data: dict) -> SacNetConfig:
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"unknown SacNetConfig fields {unknown} (checkpoint from a newer version?)")
        return cls(**data)
