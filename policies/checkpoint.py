"""Policy checkpoints: a folder with `model.safetensors` (weights) and `config.json`
(policy type, config, normalisation statistics, vocabulary, code version).

Weights are only ever read with safetensors: no pickle, no `torch.load`. They are written
from the CPU and read onto the CPU whatever device made them (a policy then moves itself),
so a checkpoint made on a GPU loads on a CPU-only machine.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load, load_file, save, save_file

from robotrl.core.errors import ConfigError

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
FORMAT_VERSION = 1
JOINT_UNITS = "radians"
"""robotrl checkpoints read and write URDF joint radians (datasets are converted on load)."""


def code_version() -> str:
    """robotrl's version, plus the git commit of the source tree when there is one."""
    from robotrl import __version__

    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return f"robotrl {__version__}" + (f" ({sha})" if sha else "")


def write_checkpoint(path: Path, policy_type: str, tensors: dict[str, torch.Tensor], payload: dict) -> None:
    """Write weights and config.json into folder `path` (created); each file atomically."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    doc = {
        "policy_type": policy_type,
        "format_version": FORMAT_VERSION,
        "code_version": code_version(),
        "joint_units": JOINT_UNITS,
        **payload,
    }
    cpu = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    _atomic(path / WEIGHTS_FILE, lambda p: save_file(cpu, str(p)))
    _atomic(path / CONFIG_FILE, lambda p: p.write_text(json.dumps(doc, indent=2)))


def read_config(path: Path) -> dict:
    """config.json of checkpoint folder `path`."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    file = path / CONFIG_FILE
    if not file.is_file():
        raise ConfigError(f"{path} is not a policy checkpoint: it has no {CONFIG_FILE}")
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{file} is not valid JSON: {exc}") from exc


def read_checkpoint(path: Path, policy_type: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config.json, weights) of a checkpoint that must hold a `policy_type` policy."""
    doc = read_config(path)
    found = doc.get("policy_type")
    if found != policy_type:
        raise ConfigError(
            f"checkpoint {path} holds a {found!r} policy, not {policy_type!r}; "
            "load it with robotrl.policies.loading.load_policy"
        )
    if doc.get("format_version", 0) > FORMAT_VERSION:
        raise ConfigError(
            f"checkpoint {path} has format version {doc['format_version']}; "
            f"this robotrl reads up to {FORMAT_VERSION}: upgrade robotrl"
        )
    if doc.get("joint_units", JOINT_UNITS) != JOINT_UNITS:
        raise ConfigError(f"checkpoint {path} is in {doc['joint_units']!r} joint units; robotrl reads {JOINT_UNITS}")
    weights = Path(path) / WEIGHTS_FILE
    if not weights.is_file():
        raise ConfigError(f"checkpoint {path} has no {WEIGHTS_FILE}")
    return doc, load_file(str(weights), device="cpu")


def save_weights_bytes(tensors: dict[str, torch.Tensor]) -> bytes:
    """Weights as safetensors bytes (live weight updates: learner -> policy server)."""
    return save({k: v.detach().contiguous().cpu() for k, v in tensors.items()})


def load_weights_bytes(data: bytes, expected: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tensors from safetensors `data`, checked against `expected` (a state_dict): the same
    names, shapes and dtypes, or a one-line ConfigError naming the first difference."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ConfigError(f"weights must be safetensors bytes, got {type(data).__name__}")
    try:
        tensors = load(bytes(data))
    except (SafetensorError, ValueError) as exc:
        raise ConfigError(f"weights are not valid safetensors bytes: {exc}") from exc
    missing, unexpected = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise ConfigError(f"weights do not fit this policy: missing {missing[:3]}, unexpected {unexpected[:3]}")
    for name, ref in expected.items():
        got = tensors[name]
        if got.shape != ref.shape or got.dtype != ref.dtype:
            raise ConfigError(
                f"weights do not fit this policy: {name} is {tuple(got.shape)} {got.dtype}, "
                f"expected {tuple(ref.shape)} {ref.dtype}"
            )
    return tensors


def _atomic(target: Path, write) -> None:
    tmp = target.with_name(target.name + ".tmp")
    write(tmp)
    os.replace(tmp, target)
