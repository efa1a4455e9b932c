"""Resumable training state next to a checkpoint: optimizer moments, step, RNG states.

`training_state.safetensors` holds the tensors (optimizer state, torch RNG);
`training_state.json` the rest (step, optimizer hyper-parameters, numpy RNG, history).
No pickle: both files are plain data.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from robotrl.core.errors import ConfigError

TENSORS_FILE = "training_state.safetensors"
JSON_FILE = "training_state.json"


def optimizer_to_flat(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Optimizer state dict -> ({"state.<param>.<name>": tensor}, JSON-able rest)."""
    sd = optimizer.state_dict()
    tensors, scalars = {}, {}
    for idx, entry in sd["state"].items():
        for name, value in entry.items():
            if torch.is_tensor(value):
                tensors[f"state.{idx}.{name}"] = value.detach().cpu().clone().contiguous()
            else:
                scalars[f"{idx}.{name}"] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def optimizer_from_flat(tensors: dict[str, torch.Tensor], rest: dict) -> dict:
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith("state."):
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = value
    for key, value in rest.get("scalars", {}).items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = value
    return {"state": state, "param_groups": rest["param_groups"]}


def save_training_state(
    path: Path, optimizer: torch.optim.Optimizer, step: int, rng: np.random.Generator, extra: dict | None = None
) -> None:
    tensors, rest = optimizer_to_flat(optimizer)
    tensors["torch_rng"] = torch.get_rng_state()
    doc = {"step": step, "optimizer": rest, "numpy_rng": rng.bit_generator.state, **(extra or {})}
    path = Path(path)
    tmp = path / (TENSORS_FILE + ".tmp")
    save_file(tensors, str(tmp))
    os.replace(tmp, path / TENSORS_FILE)
    tmp = path / (JSON_FILE + ".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path / JSON_FILE)


def load_training_state(path: Path, optimizer: torch.optim.Optimizer, rng: np.random.Generator) -> dict:
    """Restore optimizer, torch and numpy RNG in place; return the JSON document."""
    path = Path(path)
    if not (path / TENSORS_FILE).is_file() or not (path / JSON_FILE).is_file():
        raise ConfigError(
            f"{path} has no training state to resume from ({TENSORS_FILE}, {JSON_FILE}); train without --resume"
        )
    tensors = load_file(str(path / TENSORS_FILE))
    doc = json.loads((path / JSON_FILE).read_text())
    torch.set_rng_state(tensors.pop("torch_rng"))
    optimizer.load_state_dict(optimizer_from_flat(tensors, doc["optimizer"]))
    rng.bit_generator.state = doc["numpy_rng"]
    return doc
