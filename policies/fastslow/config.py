"""`FastSlowConfig`: everything that shapes a fast/slow policy, saved in its checkpoint."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from robotrl.core.errors import ConfigError

ACTION_MODES = ("delta", "absolute", "ee_delta", "ee_absolute")
EE_MODES = ("ee_delta", "ee_absolute")
"""Modes whose rows are end-effector rows (IK back to joints)."""
DELTA_MODES = ("delta", "ee_delta")
"""Modes whose rows are measured from the state the chunk starts from."""
LEGACY_DEFAULTS = {"text_gates_fresh": False}
"""Values of fields a checkpoint's config.json may predate (the behaviour before them)."""


@dataclass(frozen=True)
class FastSlowConfig:
    """Shape of a fast/slow flow-matching policy. Dimensions come from the dataset."""

    state_dim: int = 6
    """Length of the proprioceptive state (radians)."""
    action_dim: int = 6
    """A, joints per action row (radians)."""
    horizon: int = 16
    """H, rows per predicted chunk."""
    execute_steps: int = 4
    """s, rows executed before the next chunk in synchronous execution (also RTC's s)."""
    control_rate_hz: float = 30.0
    """Rate at which chunk rows are executed."""
    action_key: str = "action"
    """The dataset column the policy learnt its actions from (`robotrl train --action-key`),
    e.g. a DART recording's clean "teleop.action": how the online learner labels
    demonstrations for it, also after a learner served it."""
    start_state_rad: tuple[float, ...] = ()
    """(state_dim,) median first measured state of the training episodes, radians: where a
    real arm is put before each episode (`robotrl.inference.start_pose`); () unknown."""
    instructions: tuple[str, ...] = ()
    """The training episodes' instructions, sorted: what a real arm's episodes may tell the
    policy (`robotrl.inference.arm.policy_instruction`); () unknown (a checkpoint saved
    before this field)."""
    cameras: tuple[str, ...] = ("front", "wrist")
    """Camera names read by the slow pathway, in order."""
    image_size_px: int = 64
    """Images are resized to this square size before the image encoder."""
    past_frame_ticks: int = 0
    """G > 0: each camera's encoder also reads that camera's frames from G, 2 G, .. P G
    ticks earlier (stacked on the channels), so the latent can see motion, e.g. the ball's
    velocity on `track`; 0: the newest frame only."""
    past_frames: int = 1
    """P, past frames a camera gives with `past_frame_ticks` (3 frames in all with P = 2
    show the path's curvature as well as its velocity)."""
    use_env_state: bool = False
    """Give the fast pathway the privileged `env_state` (sim only) as a fresh feature."""
    env_state_dim: int = 0
    """Length of `env_state` when `use_env_state`."""
    estimate_env_state: bool = False
    """With `use_env_state`: the fast pathway gets the slow pathway's estimate of env_state
    from the images (an auxiliary head trained on the privileged env_state), never the
    env_state itself, so the policy reads only cameras, joints and the instruction. In
    training the fast pathway reads the env_state plus noise of 0.5 cm (0.5 cm/s on
    velocities) on every feature (robotrl.train.loss.ESTIMATE_NOISE)."""
    env_blob_cameras: tuple[str, ...] = ()
    """With `estimate_env_state`: env_state is the red object's track in these cameras'
    recorded frames (image position, size and their velocities, 6 per camera:
    `robotrl.record.blob`) instead of the simulator's, so a real arm's recording trains
    the estimate (`robotrl train --blob-target`); () = sim.environment_state."""
    env_object_dim: int = 0
    """Read env_state as objects of this many numbers each (pick_place: 3, the xyz of each
    cube and of the bin); the instruction attends over them and the named object joins
    the fast pathway (robotrl.policies.fastslow.objects). 0: off."""
    relative_objects: bool = False
    """With env_object_dim (>= 3) and ee_features_arm: every object slot also gets its xyz
    minus the gripper's, in decimetres (a metric offset for the final approach)."""
    ee_features_arm: str = ""
    """Arm model (e.g. "so101") whose forward kinematics give the fast pathway end-effector
    features of the state (position and gripper axes); "" = joints only."""
    width: int = 128
    """Width of latent tokens and of the text/image encoders."""
    cnn_channels: tuple[int, ...] = (16, 32, 32, 32)
    """Channels of the image encoder's conv layers (the first two halve the resolution)."""
    max_words: int = 12
    """Instruction tokens kept (longer instructions are truncated)."""
    expert_hidden: int = 256
    """Hidden width of the flow-matching action expert (residual MLP)."""
    expert_blocks: int = 3
    """Residual blocks of the action expert."""
    flow_steps: int = 10
    """Euler steps from noise (tau = 0) to data (tau = 1) at inference."""
    action_mode: str = "delta"
    """"delta": the expert predicts rows minus the (forwarded) state, normalised per row and
    joint; "absolute": it predicts the targets themselves, normalised per joint;
    "ee_delta" / "ee_absolute": the same over end-effector rows, the commanded gripper
    position (metres) in place of the three placing joints, IK back to joints (needs
    ee_features_arm; see robotrl.policies.fastslow.ee_actions). Outputs are absolute
    joint targets in radians."""
    text_gates_fresh: bool = True
    """FiLM the fast pathway's fresh features (state, env_state, EE) with the instruction's
    text token, so the instruction can select among object features (which cube's
    position matters); without it they only meet additively and pick_place policies
    ignored which cube the instruction named (0/50). Checkpoints without the field: False."""
    max_age_ticks: int = 32
    """Largest latent age the age embedding distinguishes (older ages are clipped)."""
    latent_delay_max: int | None = None
    """J of training (`--latent-delay-max`): the oldest latent, in ticks before the
    request's observation, the fast pathway was trained on; a server re-encodes an older
    one with the request (`LatentCache`). None: not recorded."""
    rtc_train: bool = False
    """Trained with clean prefixes (training-time RTC): at inference a prefix is given to
    the expert as clean rows instead of guiding the sampler."""
    rtc_beta: float = 5.0
    """Guidance weight cap of inference-time RTC."""

    def __post_init__(self) -> None:
        for name in (
            "state_dim",
            "action_dim",
            "horizon",
            "execute_steps",
            "image_size_px",
            "width",
            "max_words",
            "expert_hidden",
            "expert_blocks",
            "flow_steps",
        ):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"FastSlowConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.execute_steps > self.horizon:
            raise ConfigError(
                f"FastSlowConfig.execute_steps ({self.execute_steps}) must be <= horizon ({self.horizon})"
            )
        if self.action_mode not in ACTION_MODES:
            raise ConfigError(f"FastSlowConfig.action_mode must be one of {ACTION_MODES}, got {self.action_mode!r}")
        if self.action_mode in EE_MODES and not self.ee_features_arm:
            raise ConfigError(
                f"FastSlowConfig.action_mode {self.action_mode!r} needs ee_features_arm (the arm model for IK)"
            )
        if self.use_env_state and self.env_state_dim < 1:
            raise ConfigError("FastSlowConfig.use_env_state needs env_state_dim >= 1")
        if self.estimate_env_state and (not self.use_env_state or not self.cameras):
            raise ConfigError("FastSlowConfig.estimate_env_state needs use_env_state and at least one camera")
        if self.env_blob_cameras and (
            not self.estimate_env_state or set(self.env_blob_cameras) - set(self.cameras) or self.env_object_dim
        ):
            raise ConfigError(
                f"FastSlowConfig.env_blob_cameras {list(self.env_blob_cameras)} needs estimate_env_state, "
                f"cameras among {list(self.cameras)} and no env_object_dim"
            )
        if self.env_object_dim < 0 or (
            self.env_object_dim and (not self.use_env_state or self.env_state_dim % self.env_object_dim)
        ):
            raise ConfigError(
                f"FastSlowConfig.env_object_dim ({self.env_object_dim}) needs use_env_state and "
                f"must divide env_state_dim ({self.env_state_dim})"
            )
        if self.relative_objects and (self.env_object_dim < 3 or not self.ee_features_arm):
            raise ConfigError("FastSlowConfig.relative_objects needs env_object_dim >= 3 and ee_features_arm")
        if len(self.cnn_channels) < 2:
            raise ConfigError("FastSlowConfig.cnn_channels needs at least 2 layers")
        if self.past_frame_ticks < 0 or (self.past_frame_ticks and not self.cameras):
            raise ConfigError(
                f"FastSlowConfig.past_frame_ticks ({self.past_frame_ticks}) must be >= 0, and > 0 only with cameras"
            )
        if self.past_frames < 1 or (self.past_frames > 1 and not self.past_frame_ticks):
            raise ConfigError(
                f"FastSlowConfig.past_frames ({self.past_frames}) must be >= 1, and > 1 only with past_frame_ticks"
            )
        if self.max_age_ticks < 0 or (self.latent_delay_max is not None and self.latent_delay_max < 0):
            raise ConfigError("FastSlowConfig.max_age_ticks and latent_delay_max must be >= 0")
        if self.start_state_rad and len(self.start_state_rad) != self.state_dim:
            raise ConfigError(
                f"FastSlowConfig.start_state_rad has {len(self.start_state_rad)} joints, state_dim is {self.state_dim}"
            )
        object.__setattr__(self, "start_state_rad", tuple(float(q) for q in self.start_state_rad))
        object.__setattr__(self, "cameras", tuple(self.cameras))
        object.__setattr__(self, "env_blob_cameras", tuple(self.env_blob_cameras))
        object.__setattr__(self, "instructions", tuple(str(i) for i in self.instructions))
        object.__setattr__(self, "cnn_channels", tuple(int(c) for c in self.cnn_channels))

    @property
    def reads_env_state(self) -> bool:
        """Whether a request must carry env_state (privileged: simulation only)."""
        return self.use_env_state and not self.estimate_env_state

    @property
    def relative_object_dim(self) -> int:
        """Numbers per object slot when slots get their offset from the gripper, else 0."""
        return self.env_object_dim if self.relative_objects else 0

    @property
    def fresh_dim(self) -> int:
        """Length of the fast pathway's fresh features: state [+ env_state] [+ EE features]
        [+ 3 per object slot: its offset from the gripper]."""
        from robotrl.policies.fastslow.features import EE_FEATURES

        slots = self.env_state_dim // self.env_object_dim if self.relative_objects else 0
        return (
            self.state_dim
            + (self.env_state_dim if self.use_env_state else 0)
            + (EE_FEATURES if self.ee_features_arm else 0)
            + 3 * slots
        )

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_checkpoint(cls, doc: dict) -> FastSlowConfig:
        """The config in a checkpoint's config.json `doc`; a field saved before the config
        held it comes from the checkpoint's training section (`train_config`)."""
        trained = doc.get("training", {}).get("train_config", {})
        data = dict(doc.get("config", {}))
        for key in ("latent_delay_max", "action_key"):
            if key not in data and key in trained:
                data[key] = trained[key]
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict) -> FastSlowConfig:
        known = {f.name for f in fields(cls)}
        data = {**LEGACY_DEFAULTS, **data}  # checkpoints from before those fields
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown FastSlowConfig fields {unknown} (checkpoint from a newer version?)")
        return cls(**data)
