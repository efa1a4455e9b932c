"""lerobot policies (ACT, Diffusion, ...) behind the `ChunkPolicy` protocol.

`LerobotChunkPolicy` wraps a lerobot `PreTrainedPolicy` with its pre-processor
(rename, batch, normalise) and post-processor (unnormalise): `predict_chunk` returns the
policy's `predict_action_chunk` as an (H, A) array in radians, never normalised. A policy
trained in lerobot's units (degrees, gripper 0..100: any `lerobot-record` or robotrl
real-arm dataset) gets its state converted to them and its actions back to radians; the
convention comes from its training dataset (`units.py`).

Serving your own checkpoint: lerobot's trainer writes
`outputs/train/<run>/checkpoints/<step>/pretrained_model/` with `config.json`,
`model.safetensors`, `policy_preprocessor.json` and `policy_postprocessor.json` (+ their
`.safetensors` statistics). Point robotrl at that folder:

    from robotrl.policies.lerobot_adapter import LerobotChunkPolicy
    policy = LerobotChunkPolicy.from_pretrained("outputs/train/act_so101/checkpoints/last/pretrained_model")

or `robotrl.policies.loading.load_policy(path)` / `robotrl bench policy --policy PATH`,
which recognise such a folder. Nothing is downloaded: set `HF_HUB_OFFLINE=1`, and build
image backbones with `pretrained_backbone_weights=None` when making a config from scratch.

Observation mapping: `state_rad` -> `observation.state`, `images[cam]` (H, W, 3) uint8 ->
`observation.images.<cam>` float (3, H, W) in [0, 1] (resized to the configured shape),
`env_state` -> `observation.environment_state` when the policy reads it, `instruction` ->
`task`. Policies with `n_obs_steps > 1` (Diffusion's default is 2) are given the current
observation repeated, as lerobot does at an episode's start: the adapter is stateless,
so serve them with `n_obs_steps=1` when history matters.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from robotrl.core.errors import ConfigError
from robotrl.core.policy import ActionChunk, PolicyMetadata, PolicyObservation
from robotrl.core.seeds import tick_seed
from robotrl.hardware.lerobot_arm.convention import RADIANS, JointConvention
from robotrl.policies.lerobot_adapter.units import checkpoint_convention

STATE_KEY = "observation.state"
ENV_KEY = "observation.environment_state"
IMAGE_PREFIX = "observation.images."


class LerobotChunkPolicy:
    def __init__(
        self,
        policy,
        preprocessor,
        postprocessor,
        *,
        control_rate_hz: float = 30.0,
        seed: int = 0,
        version: int = 0,
        joints: JointConvention | None = None,
    ) -> None:
        """`joints`: the units the policy was trained in; None: radians."""
        self.policy = policy.eval()
        self.joints = joints or JointConvention(RADIANS, "so101")
        self.config = policy.config
        self.preprocessor = preprocessor
        self.postprocessor = postprocessor
        self.seed = seed
        self.version = version
        self._control_rate_hz = control_rate_hz
        feats = self.config.input_features
        if STATE_KEY not in feats:
            raise ConfigError(
                f"lerobot policy {self.config.type!r} reads no {STATE_KEY!r}; robotrl serves "
                "policies conditioned on the joint state"
            )
        self._image_keys = [k for k in feats if k.startswith(IMAGE_PREFIX)]
        self._image_shapes = {k: tuple(feats[k].shape) for k in self._image_keys}
        self._state_dim = int(feats[STATE_KEY].shape[0])
        self._action_dim = int(self.config.output_features["action"].shape[0])
        self._uses_env = ENV_KEY in feats

    @classmethod
    def from_pretrained(cls, path: Path, *, control_rate_hz: float = 30.0, seed: int = 0) -> LerobotChunkPolicy:
        """Load a local lerobot `pretrained_model` folder (no hub access)."""
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        path = Path(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"no lerobot pretrained_model folder at {path} (missing config.json)")
        config = PreTrainedConfig.from_pretrained(str(path))
        config.device = "cpu"
        policy = get_policy_class(config.type).from_pretrained(str(path), config=config)
        pre, post = make_pre_post_processors(config, pretrained_path=str(path))
        joints = checkpoint_convention(path, pre)
        return cls(policy, pre, post, control_rate_hz=control_rate_hz, seed=seed, joints=joints)

    @property
    def metadata(self) -> PolicyMetadata:
        cams = tuple(k[len(IMAGE_PREFIX) :] for k in self._image_keys)
        size = self._image_shapes[self._image_keys[0]][-1] if cams else 0
        env_dim = int(self.config.input_features[ENV_KEY].shape[0]) if self._uses_env else 0
        return PolicyMetadata(
            f"lerobot_{self.config.type}",
            self.horizon,
            self._action_dim,
            self._control_rate_hz,
            self._state_dim,
            cams,
            size,
            "",
            env_state_dim=env_dim,
        )

    @property
    def horizon(self) -> int:
        """Rows per chunk: ACT returns chunk_size rows, Diffusion n_action_steps."""
        if self.config.type == "diffusion":
            return int(self.config.n_action_steps)
        return int(getattr(self.config, "chunk_size", getattr(self.config, "n_action_steps", 1)))

    def reset(self) -> None:
        self.policy.reset()

    @torch.no_grad()
    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
        batch = self.preprocessor(self._frame(obs))
        n_obs = int(getattr(self.config, "n_obs_steps", 1))
        if n_obs > 1:
            batch = {
                k: v.unsqueeze(1).expand(-1, n_obs, *v.shape[1:]) if torch.is_tensor(v) else v for k, v in batch.items()
            }
        torch.manual_seed(tick_seed(self.seed, obs.tick))  # diffusion noise: same obs, same chunk
        self.policy.reset()  # stateless: never serve from lerobot's internal action queue
        actions = self.postprocessor(self.policy.predict_action_chunk(batch))
        actions = actions.detach().cpu().numpy().astype(np.float64)
        if actions.ndim == 3:
            actions = actions[0]
        return ActionChunk(self.joints.to_radians(actions), obs.tick + obs.delay_ticks, self.version)

    def _frame(self, obs: PolicyObservation) -> dict:
        state = np.asarray(obs.state_rad, dtype=np.float32)
        if state.shape != (self._state_dim,):
            raise ValueError(f"state_rad has shape {state.shape}, expected ({self._state_dim},)")
        stored = self.joints.from_radians(state).astype(np.float32)
        frame: dict = {STATE_KEY: torch.from_numpy(stored), "task": obs.instruction}
        for key in self._image_keys:
            cam = key[len(IMAGE_PREFIX) :]
            if cam not in obs.images:
                raise ValueError(
                    f"observation has no image from camera {cam!r} (the policy reads "
                    f"{[k[len(IMAGE_PREFIX) :] for k in self._image_keys]})"
                )
            frame[key] = _to_chw_float(np.asarray(obs.images[cam]), self._image_shapes[key], cam)
        if self._uses_env:
            if obs.env_state is None:
                raise ValueError(f"this policy reads {ENV_KEY}; the observation has no env_state")
            frame[ENV_KEY] = torch.as_tensor(np.asarray(obs.env_state, dtype=np.float32))
        return frame


def _to_chw_float(image: np.ndarray, shape: tuple[int, ...], camera: str) -> torch.Tensor:
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"image {camera!r} has shape {image.shape} {image.dtype}, expected (H, W, 3) uint8")
    x = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float() / 255.0
    if tuple(x.shape[1:]) != tuple(shape[1:]):
        x = F.interpolate(x[None], size=tuple(shape[1:]), mode="bilinear", align_corners=False)[0]
    return x
