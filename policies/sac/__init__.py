"""Small state(+env_state)+image SAC actor/critic (HIL-SERL / RLPD) served as a `ChunkPolicy`."""

from robotrl.policies.sac.config import SacNetConfig
from robotrl.policies.sac.policy import SacChunkPolicy

__all__ = ["SacChunkPolicy", "SacNetConfig"]
