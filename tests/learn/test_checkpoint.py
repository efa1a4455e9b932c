"""Crash-safe learner checkpoints: exact round trips, refused values, crashes between renames."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from robotrl.learn.checkpoint import checkpoint_exists, load_checkpoint, save_checkpoint


def _state(seed: int = 0) -> dict:
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    torch.manual_seed(seed)
    for p in net.parameters():
        torch.nn.init.normal_(p)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net(torch.ones(5, 3)).sum().backward()
    opt.step()
    rng = np.random.default_rng(seed)
    return {
        "actor": net.state_dict(),
        "actor_optimizer": opt.state_dict(),
        "log_alpha": torch.tensor(-1.5),
        "rng": {"numpy": rng.bit_generator.state, "torch": torch.get_rng_state()},
        "counts": np.arange(4, dtype=np.int64),
        "name": "sac",
        "betas": (0.9, 0.999),
    }


def _assert_same(a, b, path="state"):
    if isinstance(a, dict):  # an OrderedDict (module state_dict) comes back as a plain dict
        assert isinstance(b, dict), path
        assert list(a) == list(b), path
        for k in a:
            _assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{path}.{i}")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), path
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), path
    else:
        assert type(a) is type(b) and a == b, path


def test_checkpoint_round_trip_is_exact(tmp_path):
    state = _state()
    save_checkpoint(tmp_path / "ckpt", state, {"updates": 7, "version": 2})
    loaded, meta = load_checkpoint(tmp_path / "ckpt")
    assert meta == {"updates": 7, "version": 2}
    _assert_same(state, loaded)
    # optimizer state dicts (int keys under "state") load back into a fresh optimizer
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    opt.load_state_dict(loaded["actor_optimizer"])
    assert torch.equal(opt.state_dict()["state"][0]["exp_avg"], state["actor_optimizer"]["state"][0]["exp_avg"])
    # the numpy RNG resumes the same stream
    rng = np.random.default_rng()
    rng.bit_generator.state = loaded["rng"]["numpy"]
    assert rng.random() == np.random.default_rng(0).random()
    assert not list(tmp_path.glob("ckpt.*"))  # no .tmp-* or .prev left behind


def test_checkpoint_rejects_unstorable_values(tmp_path):
    with pytest.raises(TypeError, match=r"actor\.blob is a bytes"):
        save_checkpoint(tmp_path / "ckpt", {"actor": {"blob": b"x"}}, {})
    assert not checkpoint_exists(tmp_path / "ckpt")


def test_crash_before_rename_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ckpt"
    save_checkpoint(path, {"w": torch.ones(2)}, {"updates": 1})

    def crash(*args):
        raise KeyboardInterrupt("killed between the tmp write and the rename")

    monkeypatch.setattr(os, "rename", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, {"w": torch.zeros(2)}, {"updates": 2})
    monkeypatch.undo()
    state, meta = load_checkpoint(path)
    assert meta["updates"] == 1 and torch.equal(state["w"], torch.ones(2))


def test_crash_between_the_two_renames_loads_prev(tmp_path, monkeypatch):
    path = tmp_path / "ckpt"
    save_checkpoint(path, {"w": torch.ones(2)}, {"updates": 1})
    real_rename, calls = os.rename, []

    def rename_then_crash(src, dst):
        calls.append(dst)
        if len(calls) == 2:  # old -> .prev done, new tmp -> ckpt not yet
            raise KeyboardInterrupt("killed")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename_then_crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, {"w": torch.zeros(2)}, {"updates": 2})
    monkeypatch.undo()
    assert not path.exists() and checkpoint_exists(path)
    state, meta = load_checkpoint(path)
    assert meta["updates"] == 1
    # a torn tmp folder (crash mid-write) is never loaded and is cleaned up by the next save
    torn = tmp_path / "ckpt.tmp-torn"
    torn.mkdir()
    (torn / "state.safetensors").write_bytes(b"\x00" * 5)
    save_checkpoint(path, {"w": torch.full((2,), 3.0)}, {"updates": 3})
    assert load_checkpoint(path)[1]["updates"] == 3 and not torn.exists()
    assert not (tmp_path / "ckpt.prev").exists()
