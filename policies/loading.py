"""`load_policy(path)`: any checkpoint folder robotrl can serve, as a `ChunkPolicy`.

- robotrl checkpoints (`config.json` with a `policy_type`: "fastslow_flow", "sac", "dsrl");
- lerobot `pretrained_model` folders (`config.json` with a lerobot `type`, e.g. "act"; the
  VLAs "pi0", "pi05" and "smolvla" load offline through `lerobot_adapter/vla.py`).
"""

from __future__ import annotations

from pathlib import Path

from robotrl.core.errors import ConfigError
from robotrl.core.policy import ChunkPolicy
from robotrl.policies.checkpoint import read_config
from robotrl.policies.lerobot_adapter.offline import VLA_TYPES

POLICY_TYPES = ("fastslow_flow", "sac", "dsrl")


def load_policy(path: Path, *, seed: int = 0, device: str = "cpu", noise_scale: float = 1.0) -> ChunkPolicy:
    """Load the checkpoint folder at `path` onto `device` (auto, cpu, cuda, cuda:N),
    whatever device it was made on; the folder alone is enough. A folder whose files
    cannot be read (truncated, corrupt, from another version) is a `ConfigError` naming
    the folder and the reason. `noise_scale` scales a flow-matching policy's initial noise
    (`FastSlowPolicy.noise_scale`; 0: its deterministic central chunk); a checkpoint of
    another type is a `ConfigError` unless it is 1."""
    from safetensors import SafetensorError

    if not noise_scale >= 0:
        raise ConfigError(f"noise scale must be >= 0, got {noise_scale}")
    try:
        return _load(Path(path), seed, device, noise_scale)
    except (SafetensorError, OSError, KeyError, RuntimeError, ValueError) as exc:
        if isinstance(exc, (ConfigError, FileNotFoundError)):  # already say what is wrong
            raise
        raise ConfigError(
            f"cannot load the checkpoint {path}: {type(exc).__name__}: {exc} "
            "(truncated or corrupt? train or copy it again)"
        ) from None


def _load(path: Path, seed: int, device: str, noise_scale: float) -> ChunkPolicy:
    doc = read_config(path)
    policy_type = doc.get("policy_type")
    if policy_type == "fastslow_flow":
        from robotrl.policies.fastslow.policy import FastSlowPolicy

        return FastSlowPolicy.load(path, seed=seed, device=device, noise_scale=noise_scale)
    if noise_scale != 1.0:
        kind = policy_type or f"lerobot {doc.get('type')!r}"
        raise ConfigError(
            f"checkpoint {path} is a {kind} policy: a noise scale applies to robotrl's flow-matching "
            "policies (fastslow_flow) only"
        )
    if policy_type == "sac":
        from robotrl.policies.sac.policy import SacChunkPolicy

        return SacChunkPolicy.load(path, seed=seed, device=device)
    if policy_type == "dsrl":
        from robotrl.policies.sac.noise_policy import DsrlChunkPolicy

        return DsrlChunkPolicy.load(path, seed=seed, device=device)
    if policy_type is None and doc.get("type") in VLA_TYPES:
        from robotrl.policies.lerobot_adapter.split import adapter_class

        return adapter_class(doc["type"]).from_pretrained(path, seed=seed, device=device)
    if policy_type is None and "type" in doc:
        from robotrl.policies.lerobot_adapter.policy import LerobotChunkPolicy

        return LerobotChunkPolicy.from_pretrained(path, seed=seed, device=device)
    raise ConfigError(
        f"checkpoint {path} holds an unknown policy type {policy_type!r}; "
        f"robotrl serves {', '.join(POLICY_TYPES)} and lerobot pretrained_model folders"
    )
