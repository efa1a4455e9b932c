"""Crash-safe learner checkpoints: a folder replaced atomically, never half written.

A checkpoint folder holds `state.safetensors` (every tensor / numpy array of the nested
state dict, under its dotted path, e.g. `critic.q1.fc.weight`, `critic_optimizer.state.0.exp_avg`),
`state.json` (the structure of the state dict with every other leaf: numbers, strings,
lists, numpy RNG states) and `meta.json` (counters, config, code version: plain JSON).
No pickle: both formats are plain data.

Writing (`save_checkpoint`): everything goes to a fresh sibling `<dir>.tmp-XXXX`, each file
is fsynced, then the old `<dir>` is renamed to `<dir>.prev`, the new folder renamed to
`<dir>`, the parent fsynced and only then `<dir>.prev` removed. A crash at any moment
leaves either `<dir>` or `<dir>.prev` complete; `load_checkpoint` falls back to `.prev`.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from robotrl.core.errors import ConfigError
from robotrl.fsutil import fsync_file, replace_dir

log = logging.getLogger(__name__)

TENSORS_FILE = "state.safetensors"
STATE_FILE = "state.json"
META_FILE = "meta.json"
FILES = (TENSORS_FILE, STATE_FILE, META_FILE)


def save_checkpoint(path: Path | str, state: dict, meta: dict) -> Path:
    """Write `state` (nested dict of tensors, arrays, numbers, str, lists) and `meta` (JSON-able
    dict) to the folder `path`, replacing any previous checkpoint there atomically. Returns `path`.

    Raises `TypeError` naming the dotted path of a leaf that is neither (e.g. bytes, objects).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    tree = _encode(state, "", tensors)
    meta_text = json.dumps(meta, indent=1)
    _remove_stale_tmp(path)
    tmp = Path(tempfile.mkdtemp(prefix=f"{path.name}.tmp-", dir=path.parent))
    prev = path.with_name(path.name + ".prev")
    try:
        save_file(tensors, str(tmp / TENSORS_FILE))
        (tmp / STATE_FILE).write_text(json.dumps(tree))
        (tmp / META_FILE).write_text(meta_text)
        for name in FILES:
            fsync_file(tmp / name)
        replace_dir(tmp, path, prev)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def load_checkpoint(path: Path | str) -> tuple[dict, dict]:
    """(state, meta) saved by `save_checkpoint` at `path`; tensors on the CPU.

    If `path` is missing or incomplete (a crash between the two renames) the `<path>.prev`
    copy is loaded with a warning. Raises `ConfigError` if neither holds a checkpoint.
    """
    path = Path(path)
    source = path
    if not is_checkpoint(path):
        source = path.with_name(path.name + ".prev")
        if not is_checkpoint(source):
            raise ConfigError(f"no checkpoint at {path} (expected {', '.join(FILES)}); start without --resume")
        log.warning("checkpoint %s incomplete; loading the previous one %s", path, source)
    tensors = load_file(str(source / TENSORS_FILE), device="cpu")
    tree = json.loads((source / STATE_FILE).read_text())
    meta = json.loads((source / META_FILE).read_text())
    return _decode(tree, tensors), meta


def is_checkpoint(path: Path | str) -> bool:
    """True if `path` is a folder holding all checkpoint files."""
    path = Path(path)
    return all((path / name).is_file() for name in FILES)


def checkpoint_exists(path: Path | str) -> bool:
    """True if `load_checkpoint(path)` would find a checkpoint (at `path` or `<path>.prev`)."""
    path = Path(path)
    return is_checkpoint(path) or is_checkpoint(path.with_name(path.name + ".prev"))


def _encode(value: Any, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    """JSON node of `value`; tensors and arrays go to `tensors` under `key` (dotted path).

    Nodes: JSON scalars as themselves; {"tensor": name}, {"ndarray": name},
    {"dict": [[key, node], ...]} (keys str/int/float/bool, order kept), {"list": [...]},
    {"tuple": [...]}.
    """
    if isinstance(value, torch.Tensor):
        return {"tensor": _store(value.detach().cpu(), key, tensors)}
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise TypeError(f"checkpoint: {key or 'state'} is a {value.dtype} array; only numeric arrays are stored")
        return {"ndarray": _store(torch.from_numpy(np.ascontiguousarray(value)), key, tensors)}
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            if not isinstance(k, (str, int, float, bool)):
                raise TypeError(
                    f"checkpoint: key {k!r} under {key or 'state'} is a {type(k).__name__}; keys must be str or int"
                )
            items.append([k, _encode(v, f"{key}.{k}" if key else str(k), tensors)])
        return {"dict": items}
    if isinstance(value, (list, tuple)):
        nodes = [_encode(v, f"{key}.{i}" if key else str(i), tensors) for i, v in enumerate(value)]
        return {"tuple" if isinstance(value, tuple) else "list": nodes}
    raise TypeError(
        f"checkpoint: {key or 'state'} is a {type(value).__name__}; "
        "store tensors, arrays, numbers, str, lists and dicts only"
    )


def _store(tensor: torch.Tensor, key: str, tensors: dict[str, torch.Tensor]) -> str:
    name, i = key or "state", 1
    while name in tensors:  # dotted paths can collide when keys contain dots
        name, i = f"{key}#{i}", i + 1
    tensors[name] = tensor.clone().contiguous()
    return name


def _decode(node: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if not isinstance(node, dict):
        return node
    if "tensor" in node:
        return tensors[node["tensor"]]
    if "ndarray" in node:
        return tensors[node["ndarray"]].numpy()
    if "dict" in node:
        return {k: _decode(v, tensors) for k, v in node["dict"]}
    if "tuple" in node:
        return tuple(_decode(v, tensors) for v in node["tuple"])
    return [_decode(v, tensors) for v in node["list"]]


def _remove_stale_tmp(path: Path) -> None:
    """Delete `<path>.tmp-*` folders left by a crash during an earlier save."""
    for stale in path.parent.glob(f"{path.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
