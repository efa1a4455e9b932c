"""The `Algorithm` protocol of the online learner, shared update helpers, and
`make_algorithm(name, spec, preset=...)` with the named presets of every algorithm.

An algorithm samples its own batches from the `OnlineBuffer` (transitions or chunks),
takes one update step, and exposes the weights of the policy the servers run.
`state_dict()` is a nested dict whose leaves are tensors, numbers or strings (the
learner's checkpoint flattens it: tensors to safetensors, the rest to JSON).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from robotrl.core.errors import ConfigError
from robotrl.core.learning import Sampler
from robotrl.core.policy import SavablePolicy
from robotrl.train.state import optimizer_from_flat, optimizer_to_flat


@runtime_checkable
class Algorithm(Protocol):
    name: str

    def update(self, buffer: Sampler, learner_version: int, rng: np.random.Generator) -> dict[str, float]:
        """One update step from batches of `buffer` (an OnlineBuffer) sampled with `rng`.
        Metrics include the loss terms, "ess" (ESS/B of the example weights; 1.0 when
        unweighted), "staleness_mean" and "grad_norm"."""
        ...

    def policy_weights(self) -> bytes:
        """Safetensors bytes that the served policy's `load_weights` accepts."""
        ...

    def served_policy(self) -> SavablePolicy:
        """A policy with the current weights (a copy: training does not change it)."""
        ...

    def state_dict(self) -> dict:
        """Everything needed to resume bitwise: networks, targets, optimizers, temperature,
        the algorithm's torch random state, counters."""
        ...

    def load_state_dict(self, state: dict) -> None: ...


# --- pure helpers ----------------------------------------------------------------------


def ess_fraction(weights: np.ndarray | torch.Tensor) -> float:
    """Effective sample size over batch size of non-negative weights:
    (sum w)^2 / (B sum w^2); 1.0 for equal weights, 1/B when one weight dominates, 0.0
    when all are zero."""
    w = np.asarray(weights.detach() if torch.is_tensor(weights) else weights, dtype=np.float64).ravel()
    denom = w.size * float((w**2).sum())
    return float(w.sum() ** 2 / denom) if denom > 0 else 0.0


def soft_update(target: torch.nn.Module, source: torch.nn.Module, tau: float) -> None:
    """Polyak averaging: target <- tau * source + (1 - tau) * target."""
    with torch.no_grad():
        for t, s in zip(target.parameters(), source.parameters(), strict=True):
            t.lerp_(s, tau)


def optimizer_state(optimizer: torch.optim.Optimizer) -> dict:
    """Optimizer state as {"tensors": {dotted name: tensor}, "json": str}."""
    tensors, rest = optimizer_to_flat(optimizer)
    return {"tensors": tensors, "json": json.dumps(rest)}


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    optimizer.load_state_dict(optimizer_from_flat(dict(state["tensors"]), json.loads(state["json"])))


def module_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A module's tensors, copied to the CPU (a checkpoint must not alias live weights, and
    loads on any device)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}


def config_json(config) -> str:
    """A frozen config dataclass as the JSON string a `state_dict` stores."""
    return json.dumps(dataclasses.asdict(config))


def check_saved_config(state: dict, config, name: str) -> None:
    """Raise `ConfigError` unless `state` (a `state_dict` of algorithm `name`) was written
    with `config`."""
    if json.loads(state["config"]) != json.loads(config_json(config)):
        raise ConfigError(f"the checkpoint was written with another {name} config; resume with the same preset")


def batch_metrics(staleness: np.ndarray, intervention: np.ndarray, is_demo: np.ndarray) -> dict[str, float]:
    """Data metrics of a sampled batch: staleness mean/max over online rows, intervention
    and demo fractions."""
    online = ~np.asarray(is_demo, bool)
    stale = np.asarray(staleness)[online]
    return {
        "staleness_mean": float(stale.mean()) if stale.size else 0.0,
        "staleness_max": float(stale.max()) if stale.size else 0.0,
        "intervention_frac": float(np.asarray(intervention, bool).mean()),
        "demo_frac": float((~online).mean()),
    }
