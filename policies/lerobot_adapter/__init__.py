"""lerobot policies (ACT, Diffusion) served as `ChunkPolicy`; see `policy.py`."""

from robotrl.policies.lerobot_adapter.policy import LerobotChunkPolicy

__all__ = ["LerobotChunkPolicy"]
