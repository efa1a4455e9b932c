"""The learners by name: `ALGORITHMS`, their presets and `make_algorithm`.

Kept apart from `robotrl.learn.algorithm` (the protocol and the helpers every learner
uses) so that no learner module imports the registry that imports it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from robotrl.buffer.spec import TransitionSpec
from robotrl.core.errors import ConfigError
from robotrl.learn.algorithm import Algorithm
from robotrl.learn.dsrl import DSRL_PRESETS, Dsrl
from robotrl.learn.hil_flow import HIL_FLOW_PRESETS, HilFlow
from robotrl.learn.sac import SAC_PRESETS, Sac
from robotrl.policies.device import torch_device
from robotrl.policies.fastslow.policy import FastSlowPolicy

ALGORITHMS = ("sac", "hil-flow", "dsrl")


def presets() -> dict[str, dict[str, Any]]:
    """Algorithm name -> preset name -> config (frozen dataclass)."""
    return {"sac": SAC_PRESETS, "hil-flow": HIL_FLOW_PRESETS, "dsrl": DSRL_PRESETS}


def make_algorithm(
    name: str,
    spec: TransitionSpec,
    *,
    policy_path: Path | None = None,
    preset: str = "default",
    overrides: dict | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> Algorithm:
    """Algorithm `name` for transitions shaped like `spec`, configured by `preset` (then
    `overrides`, field -> value), training on `device`. hil-flow and dsrl start from the
    FastSlowPolicy at `policy_path`; sac builds fresh networks."""
    if name not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm {name!r}; choose one of {', '.join(ALGORITHMS)}")
    table = presets()[name]
    if preset not in table:
        raise ConfigError(f"algorithm {name!r} has no preset {preset!r}; presets: {', '.join(table)}")
    try:
        config = dataclasses.replace(table[preset], **(overrides or {}))
    except TypeError as exc:
        raise ConfigError(f"bad override for {name!r}: {exc}") from exc
    device = torch_device(device)
    if name == "sac":
        return Sac(spec, config, seed=seed, device=device)
    if policy_path is None:
        raise ConfigError(f"algorithm {name!r} fine-tunes a flow policy: give its checkpoint (--policy PATH)")
    policy = FastSlowPolicy.load(Path(policy_path), seed=seed)
    if name == "hil-flow":
        return HilFlow(spec, policy, config, seed=seed, device=device)
    return Dsrl(spec, policy, config, seed=seed, device=device)
