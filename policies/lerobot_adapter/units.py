"""The joint convention of a lerobot `pretrained_model` folder.

A lerobot checkpoint keeps no joint names, only the statistics of its training data. Its
convention is that of the dataset it was trained on: `train_config.json` names the dataset
(`dataset.root`, else `$HF_LEROBOT_HOME/<dataset.repo_id>`), whose `meta/info.json` says it
(`hardware/lerobot_arm/convention.py`). Without that dataset on this machine, the state
statistics decide what they can: radians of an SO arm never leave [-2 pi, 2 pi], so
statistics beyond that are degrees; degrees need the dataset's `robot_type` to map onto a
URDF, so such a checkpoint is refused with one line naming where the dataset was looked for.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from robotrl.core.errors import ConfigError
from robotrl.hardware.lerobot_arm.convention import RADIANS, JointConvention, dataset_convention

STATE_KEY = "observation.state"
RADIAN_BOUND = 2 * math.pi
"""No joint of an SO arm reads beyond this many radians from zero."""


def state_extent(preprocessor) -> float | None:
    """Largest |value| of `observation.state` in the pre-processor's normaliser statistics
    (min/max, else mean +- 3 std); None when it holds none."""
    for step in getattr(preprocessor, "steps", ()):
        if not hasattr(step, "state_dict") or not hasattr(step, "norm_map"):
            continue
        stats = {k: v.cpu().numpy() for k, v in step.state_dict().items() if k.startswith(STATE_KEY + ".")}
        if f"{STATE_KEY}.min" in stats and f"{STATE_KEY}.max" in stats:
            return float(max(np.abs(stats[f"{STATE_KEY}.min"]).max(), np.abs(stats[f"{STATE_KEY}.max"]).max()))
        if f"{STATE_KEY}.mean" in stats and f"{STATE_KEY}.std" in stats:
            return float((np.abs(stats[f"{STATE_KEY}.mean"]) + 3 * stats[f"{STATE_KEY}.std"]).max())
    return None


def dataset_roots(path: Path) -> list[Path]:
    """Where the training dataset of checkpoint `path` may lie, per its `train_config.json`."""
    config_file = path / "train_config.json"
    if not config_file.is_file():
        return []
    try:
        dataset = json.loads(config_file.read_text()).get("dataset") or {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{config_file} is not valid JSON: {exc}") from exc
    roots = [Path(dataset["root"]).expanduser()] if dataset.get("root") else []
    if dataset.get("repo_id"):
        from lerobot.utils.constants import HF_LEROBOT_HOME

        roots.append(HF_LEROBOT_HOME / dataset["repo_id"])
    return roots


def checkpoint_convention(path: Path, preprocessor) -> JointConvention:
    """The convention the lerobot checkpoint at `path` reads and writes joints in."""
    roots = dataset_roots(path)
    extent = state_extent(preprocessor)
    for root in roots:
        info = root / "meta" / "info.json"
        if info.is_file():
            meta = json.loads(info.read_text())
            where = f"dataset {root} of {path}"
            convention = dataset_convention(meta["features"], meta.get("robot_type"), (STATE_KEY, "action"), where)
            check_extent(convention, extent, path)
            return convention
    if extent is not None and extent <= RADIAN_BOUND:
        return JointConvention(RADIANS, "so101")
    looked = ", ".join(str(r) for r in roots) or f"nowhere: {path} has no train_config.json"
    raise ConfigError(
        f"cannot tell the joint units of lerobot policy {path}: its state statistics reach "
        f"{'unknown values' if extent is None else f'{extent:.1f}'} and its training dataset is not here "
        f"(looked in {looked}); copy the dataset's meta/ folder there"
    )


def check_extent(convention: JointConvention, extent: float | None, path: Path) -> None:
    """ConfigError when statistics in radians reach values no arm joint has."""
    if convention.name == RADIANS and extent is not None and extent > RADIAN_BOUND:
        raise ConfigError(
            f"lerobot policy {path}: its dataset says radians but its state statistics reach {extent:.1f}, "
            f"beyond {RADIAN_BOUND:.2f} rad: it was trained on other units"
        )
