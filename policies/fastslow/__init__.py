"""Fast/slow VLA: a slow vision-language encoder and a flow-matching action expert.

`FastSlowPolicy` implements `ChunkPolicy`; train it with `robotrl train`.
"""

from robotrl.policies.fastslow.config import FastSlowConfig
from robotrl.policies.fastslow.policy import POLICY_TYPE, FastSlowPolicy

__all__ = ["POLICY_TYPE", "FastSlowConfig", "FastSlowPolicy"]
