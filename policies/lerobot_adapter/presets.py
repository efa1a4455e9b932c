"""lerobot VLAs with random weights from a local config, for tests and benchmarks.

`build_vla(kind, size, folder)` makes a pi0, pi05 or smolvla `LerobotChunkPolicy` with no
network: it writes what lerobot would fetch by hub id into `folder` (a word-level tokenizer
with PaliGemma's or SmolVLM's special tokens; SmolVLA's VLM config and processor) and builds
the policy and its pre/post-processors from a config.

- `full`: the real architecture and size (pi0 / pi0.5: PaliGemma 2B + Gemma 300M expert,
  224 px, 10 flow steps, 50-row chunks; SmolVLA: SmolVLM2-500M cut to 16 layers, 512 px, 10
  steps). SmolVLM2's config comes from the HF cache when it is there, else from the values in
  `SMOLVLM2_500M` (the published config's architecture fields). Only sensible on a GPU.
- `tiny`: the same code at toy widths (a few layers of width 8-32), for CPU tests. lerobot
  fixes PaliGemma's sizes by variant name, so `tiny_pi_architecture()` swaps the sizes it
  looks up while a pi model is built or loaded.

The tokenizer's words mean nothing; only token counts shape the compute.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from robotrl.policies.lerobot_adapter.vla import LerobotVlaPolicy

SMOLVLM2 = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"
SIZES = ("tiny", "full")
KINDS = ("pi0", "pi05", "smolvla")

TINY_GEMMA = {"gemma_2b": (16, 2, 32), "gemma_300m": (8, 2, 16)}
"""Variant -> (width, depth, mlp width) of the tiny pi models (8 heads of 4: lerobot's
attention code assumes 8 heads)."""
TINY_SIGLIP = {"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2}
SMOLVLM2_500M = {
    "text_config": {
        "model_type": "llama",
        "hidden_size": 960,
        "intermediate_size": 2560,
        "num_hidden_layers": 32,
        "num_attention_heads": 15,
        "num_key_value_heads": 5,
        "head_dim": 64,
        "vocab_size": 49280,
        "rms_norm_eps": 1e-5,
        "rope_theta": 100000.0,
        "max_position_embeddings": 8192,
    },
    "vision_config": {
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "image_size": 512,
        "patch_size": 16,
        "layer_norm_eps": 1e-6,
    },
    "scale_factor": 4,
    "tie_word_embeddings": False,
}
"""The architecture fields of HuggingFaceTB/SmolVLM2-500M-Video-Instruct's config.json
(SmolLM2-360M text model: 32 layers of 960, 15 heads over 5 KV heads of 64, SwiGLU 2560,
RMSNorm eps 1e-5 - transformers' LlamaConfig defaults to 1e-6 -, RoPE base 1e5, 49280
tokens, untied LM head; SigLIP-B/16 vision tower at 512 px: 12 layers of 768, 12 heads, MLP
3072; pixel shuffle 4, so (512 / 16)^2 / 4^2 = 64 tokens per image, the processor's
`image_seq_len`). SmolVLA keeps the first `num_vlm_layers` = 16 text layers and adds a
0.75-wide expert: 450.0 M parameters in all, lerobot's SmolVLA (tests)."""
TINY_SMOLVLM = {
    "text_config": {
        "model_type": "llama",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
    },
    "vision_config": {
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "image_size": 32,
        "patch_size": 8,
    },
    "scale_factor": 2,
}
SPECIAL = ["<pad>", "<unk>", "<bos>", "<eos>", "<fake_token_around_image>", "<global-img>", "<image>", "<video>"]
WORDS = "Task State Action pick place touch up down the a red blue green cube ball box it on in to".split()
PUNCTUATION = [":", ",", ";", ".", "-"]
_patch_lock = threading.Lock()


def write_tokenizer(folder: Path) -> Path:
    """A word-level tokenizer in `folder` (PaliGemma's and SmolVLM's special tokens, the
    numbers 0..255 of pi0.5's state prompt, a few task words); returns `folder`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = SPECIAL + WORDS + PUNCTUATION + [str(i) for i in range(256)]
    model = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    model.pre_tokenizer = pre_tokenizers.Whitespace()
    extra = {
        "fake_image_token": "<fake_token_around_image>",
        "global_image_token": "<global-img>",
        "image_token": "<image>",
        "video_token": "<video>",
    }
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=model,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<bos>",
        eos_token="<eos>",
        extra_special_tokens=extra,
    )
    tokenizer.save_pretrained(folder)
    return folder


def write_smolvlm(folder: Path, size: str) -> Path:
    """SmolVLA's VLM folder (config, processor, tokenizer) at `size`; returns it."""
    from transformers import AutoTokenizer, SmolVLMConfig, SmolVLMImageProcessor, SmolVLMProcessor
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor

    tokenizer = AutoTokenizer.from_pretrained(write_tokenizer(folder))
    shape = copy.deepcopy(SMOLVLM2_500M if size == "full" else TINY_SMOLVLM)
    shape["text_config"].setdefault("vocab_size", len(tokenizer))
    shape |= {"image_token_id": tokenizer.convert_tokens_to_ids("<image>"), "pad_token_id": 0}
    config = SmolVLMConfig(**shape)
    config.save_pretrained(folder)
    vision = shape["vision_config"]
    seq_len = (vision["image_size"] // vision["patch_size"]) ** 2 // shape["scale_factor"] ** 2
    SmolVLMProcessor(
        image_processor=SmolVLMImageProcessor(),
        tokenizer=tokenizer,
        video_processor=SmolVLMVideoProcessor(),
        image_seq_len=seq_len,
    ).save_pretrained(folder)
    return folder


@contextlib.contextmanager
def _patched(patches: list[tuple[object, str, object]]):
    """Set each (module, name, value) while inside, then restore; one caller at a time."""
    with _patch_lock:
        saved = [(module, name, getattr(module, name)) for module, name, _ in patches]
        try:
            for module, name, value in patches:
                setattr(module, name, value)
            yield
        finally:
            for module, name, value in saved:
                setattr(module, name, value)


def tiny_pi_architecture():
    """A context in which pi0 / pi0.5 models built or loaded are tiny (see the module
    docstring): lerobot's `get_gemma_config` and PaliGemma's vision sizes are swapped for the
    tiny ones, then restored."""
    from lerobot.policies.pi0 import modeling_pi0
    from lerobot.policies.pi05 import modeling_pi05

    def gemma(variant: str):
        width, depth, mlp = TINY_GEMMA[variant]
        return modeling_pi0.GemmaConfig(width, depth, mlp, num_heads=8, num_kv_heads=1, head_dim=4)

    paligemma = "PaliGemmaForConditionalGenerationWithPiGemma"
    patches = []
    for module in (modeling_pi0, modeling_pi05):
        patches += [(module, "get_gemma_config", gemma), (module, paligemma, _tiny_vision(getattr(module, paligemma)))]
    return _patched(patches)


def _tiny_vision(paligemma):
    def build(config):
        vision = config.vision_config
        for key, value in TINY_SIGLIP.items():
            setattr(vision, key, value)
        vision.projection_dim = config.text_config.hidden_size  # image tokens enter the language model
        return paligemma(config)

    return build


def _local_pi_tokenizer(folder: Path):
    """lerobot's pi processors name the PaliGemma tokenizer by hub id: a context in which
    they are built with the one in `folder`, saved under the hub id as lerobot saves it."""
    from lerobot.policies.pi0 import processor_pi0
    from lerobot.policies.pi05 import processor_pi05
    from lerobot.processor import TokenizerProcessorStep

    def step(tokenizer_name: str, **kwargs):
        made = TokenizerProcessorStep(tokenizer_name=str(folder), **kwargs)
        made.tokenizer_name = tokenizer_name
        return made

    return _patched([(module, "TokenizerProcessorStep", step) for module in (processor_pi0, processor_pi05)])


def vla_config(kind: str, size: str, folder: Path, *, cameras: tuple[str, ...], state_dim: int, device: str):
    """The lerobot config of `kind` at `size` (random weights; SmolVLA's VLM in `folder`)."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import make_policy_config

    full = size == "full"
    image_px = {"pi0": 224, "pi05": 224, "smolvla": 512}[kind] if full else {"smolvla": 32}.get(kind, 28)
    inputs = {"observation.state": PolicyFeature(FeatureType.STATE, (state_dim,))}
    inputs |= {
        f"observation.images.{cam}": PolicyFeature(FeatureType.VISUAL, (3, image_px, image_px)) for cam in cameras
    }
    outputs = {"action": PolicyFeature(FeatureType.ACTION, (state_dim,))}
    options: dict = {} if full else {"chunk_size": 10, "n_action_steps": 10, "max_state_dim": 8, "max_action_dim": 8}
    if kind == "smolvla":
        options |= {"vlm_model_name": str(folder), "load_vlm_weights": False}
        options |= {} if full else {"num_steps": 3, "num_vlm_layers": 4, "tokenizer_max_length": 16}
        options["resize_imgs_with_padding"] = (image_px, image_px)
    else:
        options |= {"dtype": "bfloat16" if full and device.startswith("cuda") else "float32"}
        options |= {"image_resolution": (image_px, image_px)}
        options |= {} if full else {"num_inference_steps": 3, "tokenizer_max_length": 32}
    return make_policy_config(kind, input_features=inputs, output_features=outputs, device=device, **options)


def unit_stats(state_dim: int, cameras: tuple[str, ...]) -> dict:
    """Normalisation statistics of mean 0, std 1, range and 1-99 % quantiles [-1, 1]
    (radians as they are; pi0.5 normalises by quantiles)."""
    joints = {"mean": torch.zeros(state_dim), "std": torch.ones(state_dim)}
    joints |= {"min": -torch.ones(state_dim), "max": torch.ones(state_dim)}
    joints |= {"q01": -torch.ones(state_dim), "q99": torch.ones(state_dim)}
    image = {"mean": torch.zeros(3, 1, 1), "std": torch.ones(3, 1, 1)}
    image |= {"min": torch.zeros(3, 1, 1), "max": torch.ones(3, 1, 1)}
    stats = {"observation.state": joints, "action": dict(joints)}
    return stats | {f"observation.images.{cam}": dict(image) for cam in cameras}


def build_vla(
    kind: str,
    size: str,
    folder: Path,
    *,
    cameras: tuple[str, ...] = ("front",),
    state_dim: int = 6,
    device: str = "cpu",
    stats: dict | None = None,
    seed: int = 0,
) -> LerobotVlaPolicy:
    """A `LerobotChunkPolicy` of lerobot `kind` at `size` with random weights (torch seed
    `seed`); writes its tokenizer (and SmolVLA's VLM) into `folder`."""
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    from robotrl.policies.lerobot_adapter.split import adapter_class

    if kind not in KINDS or size not in SIZES:
        raise ValueError(f"build_vla: kind one of {KINDS}, size one of {SIZES}; got {kind!r}, {size!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vlm = _smolvlm_folder(folder, size) if kind == "smolvla" else write_tokenizer(folder)
    config = vla_config(kind, size, vlm, cameras=cameras, state_dim=state_dim, device=device)
    torch.manual_seed(seed)
    tiny = kind != "smolvla" and size == "tiny"
    with tiny_pi_architecture() if tiny else contextlib.nullcontext():
        policy = get_policy_class(kind)(config)
    with _local_pi_tokenizer(folder):
        pre, post = make_pre_post_processors(config, dataset_stats=stats or unit_stats(state_dim, cameras))
    return adapter_class(kind)(policy, pre, post)


def _smolvlm_folder(folder: Path, size: str) -> Path:
    """SmolVLM2's own folder from the HF cache at full size when cached, else one written."""
    if size == "full":
        from robotrl.policies.lerobot_adapter.offline import VLM_FILE, find_folder

        cached = find_folder(SMOLVLM2, folder, VLM_FILE, in_checkpoint=False).folder
        if cached is not None:
            return cached
    return write_smolvlm(folder / "vlm", size)
