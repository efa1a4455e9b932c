"""lerobot policies (ACT, Diffusion, and the VLAs of `vla.py`) behind the `ChunkPolicy` protocol.

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

Batches (`BatchedPolicy`): `predict_chunks` answers many robots with one forward pass
(`predict_chunk` is the batch of one). ACT's chunk is a function of its inputs, so a
robot's chunk is the same in a batch as alone (within float tolerance). Diffusion starts
every robot from its own noise, seeded by (seed, tick); the denoising steps of lerobot's
DDPM scheduler then draw more noise for the whole batch, so a batched Diffusion chunk is
a sample from the same distribution, equal to the lone one only with DDIM.

RTC: ACT and Diffusion have no RTC guidance, so an observation with an RTC prefix
(`prefix_rad`, sent in the executor's vlash+rtc and sync+rtc modes) is refused with a
ValueError, never silently ignored. lerobot's VLAs (pi0, pi0.5, SmolVLA) pass it to lerobot's
own RTC guidance and split into fast and slow pathways where they can (`vla.py`, `split.py`).

Devices: `from_pretrained(path, device=...)` loads the model onto `device` whatever
device the checkpoint was trained on (a `lerobot-train` folder from a GPU box says
`"device": "cuda"` in `config.json` and `policy_preprocessor.json`): lerobot's
`device_processor` step of the pre-processor is overridden to the serving device, the
post-processor's to the CPU. Images travel to the device as uint8 and become float there.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from robotrl.core.errors import ConfigError
from robotrl.core.policy import ActionChunk, PolicyMetadata, PolicyObservation
from robotrl.core.seeds import tick_seed
from robotrl.hardware.lerobot_arm.convention import RADIANS, JointConvention
from robotrl.policies.device import module_device, to_device, torch_device
from robotrl.policies.lerobot_adapter.offline import VLA_TYPES
from robotrl.policies.lerobot_adapter.units import checkpoint_convention

STATE_KEY = "observation.state"
ENV_KEY = "observation.environment_state"
IMAGE_PREFIX = "observation.images."
ACTION_KEY = "action"
DEVICE_STEP = "device_processor"
"""lerobot's processor step that moves a batch to a device (registry name)."""


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
        _point_device_steps(self.preprocessor, self.device)  # inputs go where the model is

    @classmethod
    def from_pretrained(
        cls, path: Path, *, control_rate_hz: float = 30.0, seed: int = 0, device: str | torch.device = "cpu"
    ) -> LerobotChunkPolicy:
        """Load a local lerobot `pretrained_model` folder (no hub access) onto `device`,
        whatever device it was trained on (an instance of `cls`; pi0, pi0.5 and SmolVLA
        folders load with `load_policy`, which picks their class: `split.adapter_class`)."""
        return cls._load(Path(path), control_rate_hz=control_rate_hz, seed=seed, device=device)

    @classmethod
    def _load(cls, path: Path, *, control_rate_hz: float, seed: int, device: str | torch.device):
        """`from_pretrained` as an instance of `cls`, with its `_offline_overrides` and
        `_check_weights`."""
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"no lerobot pretrained_model folder at {path} (missing config.json)")
        device = torch_device(device)
        config = PreTrainedConfig.from_pretrained(str(path))
        if config.type in VLA_TYPES and not cls.serves_vlas:
            raise ConfigError(
                f"{path} holds a lerobot {config.type} policy: load it with robotrl.policies.loading.load_policy"
            )
        config.device = str(device)  # lerobot reads the weights onto it
        overrides = _device_override(path / "policy_preprocessor.json", device) | cls._offline_overrides(config, path)
        policy = get_policy_class(config.type).from_pretrained(str(path), config=config)
        cls._check_weights(policy, path)
        pre, post = make_pre_post_processors(
            config,
            pretrained_path=str(path),
            preprocessor_overrides=overrides,
            postprocessor_overrides=_device_override(path / "policy_postprocessor.json", torch.device("cpu")),
        )
        joints = checkpoint_convention(path, pre)
        return cls(policy, pre, post, control_rate_hz=control_rate_hz, seed=seed, joints=joints)

    serves_vlas = False
    """Whether this class serves lerobot's VLAs (`vla.py`)."""

    @classmethod
    def _offline_overrides(cls, config, path: Path) -> dict:
        """Pre-processor overrides (and config changes) that make `path` load offline."""
        return {}

    @classmethod
    def _check_weights(cls, policy, path: Path) -> None:
        """Raise when the loaded weights do not fit (lerobot's own loaders check ACT's)."""

    @property
    def device(self) -> torch.device:
        """Where the model runs."""
        return module_device(self.policy)

    def to(self, device: str | torch.device) -> LerobotChunkPolicy:
        """Move the model to `device`, and the pre-processor's device step with it (the
        post-processor still hands actions back on the CPU); returns the policy."""
        device = torch_device(device)
        self.policy.to(device)
        self.config.device = str(device)
        _point_device_steps(self.preprocessor, device)
        return self

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
            follows_rtc_prefix=self.follows_rtc_prefix,
        )

    follows_rtc_prefix = False
    """ACT and Diffusion have no RTC guidance (the VLA subclass has lerobot's)."""

    @property
    def horizon(self) -> int:
        """Rows per chunk: ACT returns chunk_size rows, Diffusion n_action_steps."""
        if self.config.type == "diffusion":
            return int(self.config.n_action_steps)
        return int(getattr(self.config, "chunk_size", getattr(self.config, "n_action_steps", 1)))

    def reset(self) -> None:
        self.policy.reset()

    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
        return self.predict_chunks([obs])[0]

    @torch.no_grad()
    def predict_chunks(self, observations: list[PolicyObservation]) -> list[ActionChunk]:
        """One forward pass for the observations of many robots: (H, A) chunks in radians,
        each starting at its observation's `tick + delay_ticks` (see the module docstring).
        ACT and Diffusion have no RTC guidance: an observation with a prefix is refused."""
        for obs in observations:
            if self._prefix_rows(obs):
                raise ValueError(
                    f"lerobot {self.config.type} policies have no RTC guidance, so they cannot follow the "
                    "RTC prefix sent: run the robot in vlash or sync mode, not vlash+rtc or sync+rtc"
                )
        batch = self.preprocessor(self._batch(observations))
        n_obs = int(getattr(self.config, "n_obs_steps", 1))
        if n_obs > 1:
            batch = {
                k: v.unsqueeze(1).expand(-1, n_obs, *v.shape[1:]) if torch.is_tensor(v) else v for k, v in batch.items()
            }
        torch.manual_seed(tick_seed(self.seed, observations[0].tick))  # diffusion's step noise: same obs, same chunk
        self.policy.reset()  # stateless: never serve from lerobot's internal action queue
        kwargs = {"noise": self._noise(observations)} if self.config.type == "diffusion" else {}
        actions = self.postprocessor(self.policy.predict_action_chunk(batch, **kwargs))
        return self._chunks(actions, observations)

    def _chunks(self, actions: torch.Tensor, observations: list[PolicyObservation]) -> list[ActionChunk]:
        """(B, H, A) post-processed actions in the checkpoint's units -> chunks in radians."""
        rows = actions.detach().float().cpu().numpy().astype(np.float64)
        if rows.ndim == 2:
            rows = rows[None]
        return [
            ActionChunk(self.joints.to_radians(r), obs.tick + obs.delay_ticks, self.version)
            for r, obs in zip(rows, observations)
        ]

    def _prefix_rows(self, obs: PolicyObservation) -> int:
        """P, rows of `obs.prefix_rad` the chunk is guided toward (at most H); 0 without."""
        prefix = obs.prefix_rad
        if prefix is None or len(prefix) == 0:
            return 0
        if np.ndim(prefix) != 2 or np.shape(prefix)[1] != self._action_dim:
            raise ValueError(f"prefix_rad has shape {np.shape(prefix)}, expected (P, {self._action_dim})")
        return min(len(prefix), self.horizon)

    def _noise(self, observations: list[PolicyObservation]) -> torch.Tensor:
        """(B, horizon, A) initial diffusion noise, each row from its own (seed, tick), drawn
        on the CPU (the same noise on every device)."""
        shape = (1, int(self.config.horizon), self._action_dim)
        seeds = [tick_seed(self.seed, obs.tick) for obs in observations]
        rows = [torch.randn(shape, generator=torch.Generator().manual_seed(s)) for s in seeds]
        return torch.cat(rows).to(self.device)

    def _batch(self, observations: list[PolicyObservation], *, with_images: bool = True, prefix_rows: int = 0) -> dict:
        """The lerobot batch of `observations` on the model's device: (B, S) state, per
        camera (B, 3, h, w) float in [0, 1] (none without `with_images`), (B, E) env_state, B
        task strings, and with `prefix_rows` P > 0 the first P rows of every RTC prefix as
        (B, P, A) `action` in the checkpoint's units (the pre-processor normalises it as it
        does training targets)."""
        device = self.device
        states = np.stack([self._state(obs) for obs in observations])
        batch: dict = {STATE_KEY: to_device(torch.from_numpy(states), device)}
        batch["task"] = [obs.instruction for obs in observations]
        if prefix_rows:
            prefix = [
                self.joints.from_radians(np.asarray(o.prefix_rad, np.float64)[:prefix_rows]) for o in observations
            ]
            batch[ACTION_KEY] = to_device(torch.from_numpy(np.stack(prefix).astype(np.float32)), device)
        for key in self._image_keys if with_images else ():
            cam = key[len(IMAGE_PREFIX) :]
            images = [self._image(obs, cam) for obs in observations]
            batch[key] = _to_chw_float(images, self._image_shapes[key], device)
        if self._uses_env:
            if any(obs.env_state is None for obs in observations):
                raise ValueError(f"this policy reads {ENV_KEY}; the observation has no env_state")
            env = np.stack([np.asarray(obs.env_state, dtype=np.float32) for obs in observations])
            batch[ENV_KEY] = to_device(torch.from_numpy(env), device)
        return batch

    def _state(self, obs: PolicyObservation) -> np.ndarray:
        state = np.asarray(obs.state_rad, dtype=np.float32)
        if state.shape != (self._state_dim,):
            raise ValueError(f"state_rad has shape {state.shape}, expected ({self._state_dim},)")
        return self.joints.from_radians(state).astype(np.float32)

    def _image(self, obs: PolicyObservation, camera: str) -> np.ndarray:
        if camera not in obs.images:
            raise ValueError(
                f"observation has no image from camera {camera!r} (the policy reads "
                f"{[k[len(IMAGE_PREFIX) :] for k in self._image_keys]})"
            )
        image = np.asarray(obs.images[camera])
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ValueError(f"image {camera!r} has shape {image.shape} {image.dtype}, expected (H, W, 3) uint8")
        return np.ascontiguousarray(image)


def _to_chw_float(images: list[np.ndarray], shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """(H, W, 3) uint8 images -> (B, 3, h, w) float in [0, 1] on `device` (moved as uint8,
    resized there to the configured (3, h, w))."""
    size = tuple(shape[1:])
    if len({image.shape for image in images}) == 1:  # one transfer, one resize for the batch
        x = to_device(torch.from_numpy(np.stack(images)), device).permute(0, 3, 1, 2).float() / 255.0
        if len(images) == 1:  # the strides a lone image always had (conv kernels choose by layout)
            x = x[0].unsqueeze(0)
        if tuple(x.shape[2:]) != size:  # contiguous, as a lone image's resize is (same kernels, same numbers)
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=False).contiguous()
        return x
    return torch.cat([_to_chw_float([image], shape, device) for image in images])


def _device_override(processor_file: Path, device: torch.device) -> dict:
    """`{"device_processor": {"device": ...}}` when the saved pipeline has that step, else
    {} (lerobot refuses an override of a step the pipeline lacks)."""
    try:
        steps = json.loads(processor_file.read_text()).get("steps", [])
    except (OSError, ValueError):
        return {}  # lerobot's loader says what is wrong with the file
    if any(step.get("registry_name") == DEVICE_STEP for step in steps if isinstance(step, dict)):
        return {DEVICE_STEP: {"device": str(device)}}
    return {}


def _point_device_steps(pipeline, device: torch.device) -> None:
    """Point every lerobot device step of `pipeline` at `device`."""
    from lerobot.processor.device_processor import DeviceProcessorStep

    for step in getattr(pipeline, "steps", ()):
        if isinstance(step, DeviceProcessorStep):
            step.device = str(device)
            step.__post_init__()
