"""Where a lerobot VLA checkpoint's extra pieces come from, with no network.

lerobot's pi0 / pi0.5 pre-processors load the PaliGemma tokenizer by hub id
(`policy_preprocessor.json`: `tokenizer_processor.tokenizer_name`, "google/paligemma-3b-pt-224");
SmolVLA builds its VLM from `config.vlm_model_name` (`AutoConfig` + `AutoProcessor`, even
with `load_vlm_weights=False`) and its tokenizer from the same name. Here each name is
resolved to a local folder before lerobot sees it, looking, in order:

- tokenizers: the checkpoint folder itself (`tokenizer_config.json` next to
  `config.json`: `tokenizer.save_pretrained(folder)`), then the name as a folder
  (absolute, or relative to the checkpoint), then the HF cache (`$HF_HUB_CACHE`) for the
  name as a hub id;
- SmolVLA's VLM (`config.json` + processor and tokenizer files): the name as a folder
  (absolute, or relative to the checkpoint), then the HF cache.

lerobot then reads only local paths, so nothing is fetched whether `HF_HUB_OFFLINE` is set
or not. A piece found nowhere is one `ConfigError` line naming the file and every place
looked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from robotrl.core.errors import ConfigError

VLA_TYPES = ("pi0", "pi05", "smolvla")
"""lerobot policy types that need a tokenizer (and SmolVLA a VLM) found here."""
TOKENIZER_STEP = "tokenizer_processor"
"""Registry name of lerobot's `TokenizerProcessorStep`."""
TOKENIZER_FILE = "tokenizer_config.json"
VLM_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class Found:
    folder: Path | None
    """The folder holding the file, or None."""
    looked: tuple[str, ...]
    """Every place looked, in order (for the error)."""


def find_folder(name: str, checkpoint: Path, filename: str, *, in_checkpoint: bool) -> Found:
    """The local folder holding `filename` for the model `name` (see the module docstring)."""
    looked: list[str] = []
    candidates = [checkpoint] if in_checkpoint else []
    given = Path(name).expanduser()
    candidates += [given] if given.is_absolute() else [checkpoint / given, Path.cwd() / given]
    for folder in dict.fromkeys(candidates):
        looked.append(str(folder))
        if (folder / filename).is_file():
            return Found(folder.resolve(), tuple(looked))
    cached = _hf_cache(name, filename)
    looked.append(f"the HF cache {_hf_cache_dir()} for {name!r}")
    return Found(cached, tuple(looked))


def _hf_cache(name: str, filename: str) -> Path | None:
    """The cached snapshot folder of hub repo `name` that holds `filename`, or None (never
    downloads)."""
    from huggingface_hub import try_to_load_from_cache

    if name.count("/") != 1 or name.startswith(("/", ".", "~")):
        return None  # not a hub id
    try:
        hit = try_to_load_from_cache(name, filename)
    except ValueError:  # not a valid repo id
        return None
    return Path(hit).parent if isinstance(hit, str) else None


def _hf_cache_dir() -> str:
    from huggingface_hub.constants import HF_HUB_CACHE

    return str(HF_HUB_CACHE)


def missing(what: str, filename: str, found: Found, checkpoint: Path, fix: str) -> ConfigError:
    """One line: which file is missing, where it was looked for, what to do."""
    return ConfigError(
        f"lerobot policy {checkpoint}: no {filename} of its {what} (looked in {'; '.join(found.looked)}); {fix}"
    )


def tokenizer_name(processor_file: Path) -> str | None:
    """The `tokenizer_name` of the tokenizer step saved in `policy_preprocessor.json`, or
    None when the pipeline has no such step."""
    try:
        steps = json.loads(processor_file.read_text()).get("steps", [])
    except (OSError, ValueError):
        return None  # lerobot's loader says what is wrong with the file
    for step in steps:
        if isinstance(step, dict) and step.get("registry_name") == TOKENIZER_STEP:
            return (step.get("config") or {}).get("tokenizer_name")
    return None


def tokenizer_override(checkpoint: Path, processor_file: Path, *, fallback: Path | None = None) -> dict:
    """`{"tokenizer_processor": {"tokenizer_name": <local folder>}}` for a pre-processor
    that tokenizes by name, {} for one that does not tokenize; `fallback` (SmolVLA's VLM
    folder, which holds its tokenizer) is used when the name is found nowhere else."""
    name = tokenizer_name(processor_file)
    if name is None:
        return {}
    found = find_folder(name, checkpoint, TOKENIZER_FILE, in_checkpoint=True)
    if found.folder is None and fallback is not None and (fallback / TOKENIZER_FILE).is_file():
        found = Found(fallback, found.looked)
    if found.folder is None:
        fix = f"save the tokenizer {name!r} into {checkpoint} (tokenizer.save_pretrained) or into the HF cache"
        raise missing(f"tokenizer {name!r}", TOKENIZER_FILE, found, checkpoint, fix)
    return {TOKENIZER_STEP: {"tokenizer_name": str(found.folder)}}


def vlm_folder(checkpoint: Path, name: str) -> Path:
    """The local folder of SmolVLA's VLM `name` (its config, processor and tokenizer)."""
    found = find_folder(name, checkpoint, VLM_FILE, in_checkpoint=False)
    if found.folder is None:
        fix = (
            f"put the VLM's config, processor and tokenizer files in one of them, or set vlm_model_name "
            f"in {checkpoint / 'config.json'} to a local folder that has them"
        )
        raise missing(f"VLM {name!r}", VLM_FILE, found, checkpoint, fix)
    return found.folder


def require_weights(checkpoint: Path) -> None:
    """lerobot's pi0 / pi0.5 loaders fall back to random weights without `model.safetensors`;
    refuse instead."""
    if not (checkpoint / WEIGHTS_FILE).is_file():
        raise ConfigError(f"lerobot policy {checkpoint}: no {WEIGHTS_FILE} in {checkpoint}; copy the checkpoint again")


def check_weights(policy, checkpoint: Path) -> None:
    """ConfigError when `model.safetensors` was saved from another architecture than the
    one its config built (lerobot's pi loaders print a warning and serve what they have)."""
    from safetensors import safe_open

    expected = {name: tuple(t.shape) for name, t in policy.state_dict().items()}
    matched = 0
    with safe_open(str(checkpoint / WEIGHTS_FILE), framework="pt") as f:
        for key in f.keys():
            name = key if key.startswith("model.") else f"model.{key}"
            if name not in expected:
                continue
            shape = tuple(f.get_slice(key).get_shape())
            if shape != expected[name]:
                raise ConfigError(
                    f"lerobot policy {checkpoint}: {WEIGHTS_FILE} holds {key} with shape {shape}, but its "
                    f"config.json builds {expected[name]}: the weights belong to another architecture"
                )
            matched += 1
    if not matched:
        raise ConfigError(f"lerobot policy {checkpoint}: no tensor of {WEIGHTS_FILE} belongs to this model")
