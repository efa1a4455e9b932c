"""The learner's prefetching sampler: the same batches in the same order as the buffer
alone (also across version changes, other batch kinds, RNG use between draws and a
changing buffer), the same SAC updates in a learner loop, images gathered into the memory
an `ImageAlloc` gives. The pinned CUDA path is in tests/gpu."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from robotrl.buffer.online import OnlineBuffer
from robotrl.buffer.spec import TransitionSpec
from robotrl.learn.prefetch import Prefetcher
from robotrl.wire.messages import TransitionBatch

SPEC = TransitionSpec(state_dim=3, action_dim=2, cameras={"front": (8, 6)}, env_state_dim=2)
CPU = torch.device("cpu")


def _episode(episode: int, n: int, version: int) -> TransitionBatch:
    """One whole episode in one batch; every value a function of (episode, row)."""
    t = np.arange(n)
    base = (episode * 1000 + t).astype(np.float32)
    return TransitionBatch(
        robot_id="arm",
        episode_id=episode,
        seq=0,
        ticks=t.astype(np.int64),
        state=np.stack([base, base + 0.25, base + 0.5], 1),
        action=np.stack([base, -base], 1),
        policy_action=np.zeros((n, 2), np.float32),
        reward=np.full(n, 0.5, np.float32),
        intervention=t % 5 == 0,
        version=np.full(n, version, np.int64),
        delay_ticks=np.full(n, 2, np.int64),
        images={"front": ((t[:, None, None, None] * 37 + episode * 101 + np.zeros((8, 6, 3))) % 256).astype(np.uint8)},
        env_state=np.stack([base, base * 2], 1),
        instruction=f"task {episode % 2}",
        episode_done=True,
        success=episode % 2 == 1,
    )


def _buffer(root, episodes: int = 6) -> OnlineBuffer:
    buffer = OnlineBuffer(root, SPEC, 10_000, fsync=False)
    for k in range(episodes):
        buffer.add(_episode(k, 30 + k, version=k))
    return buffer


def _fields(sample) -> dict:
    """Every field of a sample as numpy (images per camera), for comparing."""
    out = {}
    for f in dataclasses.fields(sample):
        value = getattr(sample, f.name)
        if isinstance(value, dict):
            out.update({f"{f.name}.{k}": np.asarray(v) for k, v in value.items()})
        else:
            out[f.name] = value if isinstance(value, list) else np.asarray(value)
    return out


def _script(sampler, rng: np.random.Generator, change) -> list:
    """A learner-like sequence of draws: repeats (hits), a new version, RNG use between
    draws, a buffer change (`change()`), another batch kind."""
    draws = [sampler.sample_transitions(16, 3, rng) for _ in range(5)]  # 1 miss, 4 hits
    draws += [sampler.sample_transitions(16, 4, rng) for _ in range(3)]  # version 3 -> 4: 1 miss, 2 hits
    rng.random()  # the caller used its RNG: the batch drawn ahead is not what it would draw now
    draws.append(sampler.sample_transitions(16, 4, rng))  # 1 miss
    change()
    draws.append(sampler.sample_transitions(16, 4, rng))  # the buffer changed: 1 miss
    draws += [sampler.sample_chunks(8, 4, 4, rng) for _ in range(3)]  # another kind: 1 miss, 2 hits
    return draws


def test_prefetched_batches_equal_the_buffers_own_in_order(tmp_path):
    plain_buffer, ahead_buffer = _buffer(tmp_path / "a"), _buffer(tmp_path / "b")
    plain_rng, ahead_rng = np.random.default_rng(7), np.random.default_rng(7)
    plain = _script(plain_buffer, plain_rng, lambda: plain_buffer.add(_episode(50, 40, 4)))
    prefetcher = Prefetcher(ahead_buffer, CPU, generation=lambda: (ahead_buffer.committed_episodes, len(ahead_buffer)))

    def change() -> None:
        assert prefetcher._job is not None
        prefetcher._job.future.result()  # drawn ahead before the change: must not be used after it
        with prefetcher.lock:
            ahead_buffer.add(_episode(50, 40, 4))

    try:
        ahead = _script(prefetcher, ahead_rng, change)
    finally:
        prefetcher.close()
    assert len(ahead) == len(plain) == 13
    for p, a in zip(plain, ahead):
        assert type(p) is type(a)
        pf, af = _fields(p), _fields(a)
        assert pf.keys() == af.keys()
        for k in pf:
            assert np.array_equal(pf[k], af[k]), k
    assert plain_rng.bit_generator.state == ahead_rng.bit_generator.state  # later draws agree too
    assert (prefetcher.hits, prefetcher.misses) == (8, 5)


def test_prefetch_of_an_empty_buffer_raises_as_the_buffer_does(tmp_path):
    buffer = OnlineBuffer(tmp_path / "empty", SPEC, 100, fsync=False)
    prefetcher = Prefetcher(buffer, CPU)
    try:
        with pytest.raises(ValueError, match="no committed transitions"):
            prefetcher.sample_transitions(4, 0, np.random.default_rng(0))
        assert prefetcher._job is None  # nothing drawn ahead after a failed draw
    finally:
        prefetcher.close()


def test_sampled_images_are_gathered_into_the_memory_an_image_alloc_gives(tmp_path):
    buffer = _buffer(tmp_path / "buf")
    plain = buffer.sample_transitions(16, 5, np.random.default_rng(1))
    handed: list[np.ndarray] = []

    def alloc(shape):
        out = np.full(shape, 255, np.uint8)
        handed.append(out)
        return out, ("handle", out)

    buffer.image_alloc = alloc
    sample = buffer.sample_transitions(16, 5, np.random.default_rng(1))
    assert [s.shape for s in handed] == [(16, 8, 6, 3)] * 2  # images and next_images
    for name in ("images", "next_images"):
        handle = getattr(sample, name)["front"]
        assert handle[0] == "handle" and np.array_equal(handle[1], getattr(plain, name)["front"])
    chunks = buffer.sample_chunks(4, 3, 5, np.random.default_rng(2))
    assert chunks.images["front"][0] == "handle" and chunks.next_images["front"][0] == "handle"


def _learner_run(tmp_path, name: str, prefetch: bool) -> tuple[dict, list, object]:
    """30 updates of a small SAC in a learner loop on the same buffer content (its batches
    carry images it does not read); the final algorithm state, the published weights and
    the learner."""
    from robotrl.learn.learner import Learner, LearnerConfig
    from robotrl.learn.registry import make_algorithm

    spec = TransitionSpec(state_dim=3, action_dim=2, cameras={"front": (48, 48)}, env_state_dim=2)
    buffer = OnlineBuffer(tmp_path / f"{name}-buf", spec, 10_000, fsync=False)
    for k in range(4):
        batch = _episode(k, 30, version=0)
        img = np.resize(batch.images["front"], (30, 48, 48, 3))
        buffer.add(_with_images(batch, img))
    overrides = {"batch_size": 16, "utd_ratio": 2}
    algo = make_algorithm("sac", spec, preset="tiny", overrides=overrides, seed=3)
    published: list[tuple[int, bytes]] = []

    class Publisher:
        def publish(self, version: int, data: bytes) -> None:
            published.append((version, data))

    cfg = LearnerConfig(
        out=tmp_path / name,
        transitions_endpoint="tcp://127.0.0.1:*",
        min_transitions=1,
        publish_every=5,
        checkpoint_every=100,
        log_every=100,  # no updates.csv rows: no plot to draw at the end
        max_updates=30,
        prefetch=prefetch,
    )
    with Learner(algo, buffer, Publisher(), cfg) as learner:
        learner.run()
    buffer.close()
    return algo.state_dict(), published, learner


def _with_images(batch: TransitionBatch, images: np.ndarray) -> TransitionBatch:
    import msgspec

    return msgspec.structs.replace(batch, images={"front": images})


@pytest.fixture
def one_thread():
    """One torch thread: two on this shared 2-core machine make small updates 50x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_learner_with_prefetch_makes_the_same_updates(tmp_path, one_thread):
    plain_state, plain_published, plain = _learner_run(tmp_path, "plain", prefetch=False)
    ahead_state, ahead_published, ahead = _learner_run(tmp_path, "ahead", prefetch=True)
    assert plain.prefetch_counts is None
    counts = ahead.prefetch_counts
    assert counts is not None and counts["hits"] + counts["misses"] == 60  # utd 2: two batches per update
    assert counts["misses"] <= 1 + 30 // 5  # the first, and one per new version
    assert [v for v, _ in ahead_published] == [v for v, _ in plain_published] == list(range(7))
    assert [d for _, d in ahead_published] == [d for _, d in plain_published]
    for key in ("actor", "critic", "critic_target"):
        for name, tensor in plain_state[key].items():
            assert torch.equal(tensor, ahead_state[key][name]), f"{key}.{name}"
    rate, share = ahead.loop_clock.updates_per_s, ahead.loop_clock.update_share
    assert rate is not None and rate > 0 and share is not None and 0 < share <= 1


def test_algorithms_take_images_as_tensors_as_they_take_numpy(tmp_path, tiny_flow):
    """The GPU path hands the algorithms uint8 tensors (on the device) instead of numpy: the
    SAC observations and the flow batch built from tensors equal those built from numpy."""
    from robotrl.learn.hil_flow import flow_batch, offset_chunks
    from robotrl.policies.sac.config import SacNetConfig
    from robotrl.policies.sac.policy import observation_tensors

    buffer = _buffer(tmp_path / "buf")
    sample = buffer.sample_chunks(8, 4, 5, np.random.default_rng(0))
    as_tensors = dataclasses.replace(sample, images={k: torch.from_numpy(v) for k, v in sample.images.items()})
    config = SacNetConfig(3, 2, 2, {"front": (8, 6)})
    for key, value in observation_tensors(sample.state, sample.env_state, sample.images, config).items():
        got = observation_tensors(sample.state, sample.env_state, as_tensors.images, config)[key]
        assert torch.equal(got, value), key
    policy = tiny_flow(cameras=("front",), horizon=4, image_size_px=16)
    idx = np.array([0, 3, 5])
    chunks = offset_chunks(sample, np.zeros(8, np.int64), 4)
    numpy_batch, tensor_batch = flow_batch(policy, sample, chunks, idx), flow_batch(policy, as_tensors, chunks, idx)
    assert all(torch.equal(a, b) for a, b in zip(numpy_batch.images, tensor_batch.images))
    assert torch.equal(numpy_batch.chunk, tensor_batch.chunk)
