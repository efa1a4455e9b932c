"""The `toy` fixture: the toy dataset (toy_data.py) and a policy trained on it briefly,
built once for the training tests."""

from __future__ import annotations

import pytest
from toy_data import TINY, write_toy_dataset

from robotrl.record.dataset import load_frames
from robotrl.train.trainer import TrainConfig, Trainer


@pytest.fixture(scope="module")
def toy_dataset(tmp_path_factory):
    """(dataset root, FrameTable) of the toy dataset; Hugging Face's caches stay in the
    module's own folder while its tests run."""
    base = tmp_path_factory.mktemp("toy")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HOME", str(base / "hf"))
        mp.setenv("HF_DATASETS_CACHE", str(base / "hf" / "datasets"))
        root = base / "toy_ds"
        write_toy_dataset(root)
        yield root, load_frames(root, image_size_px=32, progress=False)


@pytest.fixture(scope="module")
def toy(toy_dataset):
    """(dataset root, FrameTable, a Trainer trained 400 steps on it)."""
    root, frames = toy_dataset
    cfg = TrainConfig(
        dataset=root,
        out=root.parent / "ckpt",
        steps=400,
        batch_size=16,
        lr=2e-3,
        warmup_steps=20,
        k_max=2,
        latent_delay_max=3,
        flow_samples=2,
        save_every=10_000,
        policy=TINY,
    )
    trainer = Trainer(cfg, frames, progress=False)
    trainer.train()
    return root, frames, trainer
