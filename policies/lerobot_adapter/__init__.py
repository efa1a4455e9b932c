"""lerobot policies served as `ChunkPolicy`: ACT and Diffusion (`policy.py`), pi0, pi0.5 and
SmolVLA (`vla.py`, split into fast and slow pathways in `split.py`)."""

from robotrl.policies.lerobot_adapter.policy import LerobotChunkPolicy

__all__ = ["LerobotChunkPolicy"]
