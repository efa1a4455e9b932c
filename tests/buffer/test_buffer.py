"""Online buffer: the episode log commits and recovers byte-identical episodes (also
after kill -9 of a writer), corrupt segments are skipped, seq order is repaired, the
cache keeps uint8 images and evicts whole episodes, the sampler mixes and caps as
specified, demos load from a LeRobotDataset."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from robotrl.buffer.episode import ROW_FIELDS, Episode
from robotrl.buffer.log import EpisodeLog
from robotrl.buffer.online import OnlineBuffer
from robotrl.buffer.spec import SpecMismatch, TransitionSpec
from robotrl.wire.messages import TransitionBatch

SPEC = TransitionSpec(state_dim=3, action_dim=2, cameras={"front": (8, 6)}, env_state_dim=2)


def make_batch(
    robot: str,
    episode: int,
    seq: int,
    n: int,
    *,
    done: bool = False,
    success: bool = False,
    version: int = 0,
    intervention: bool = False,
) -> TransitionBatch:
    """Deterministic rows: every value is a function of (episode, row index)."""
    t = np.arange(seq, seq + n)
    base = (episode * 1000 + t).astype(np.float32)
    return TransitionBatch(
        robot_id=robot,
        episode_id=episode,
        seq=seq,
        ticks=t.astype(np.int64),
        state=np.stack([base, base + 0.25, base + 0.5], 1),
        action=np.stack([base, -base], 1),
        policy_action=np.stack([base + 1, -base], 1),
        reward=np.full(n, 0.5, np.float32),
        intervention=np.full(n, intervention),
        version=np.full(n, version, np.int64),
        delay_ticks=np.full(n, 2, np.int64),
        images={"front": _pixels(episode, t)},
        env_state=np.stack([base, base * 2], 1),
        instruction=f"task {episode % 2}",
        episode_done=done,
        success=success,
    )


def _pixels(episode: int, t: np.ndarray) -> np.ndarray:
    """(n, 8, 6, 3) uint8, a different pattern per (episode, row)."""
    pattern = np.arange(8 * 6 * 3).reshape(8, 6, 3) * 13
    return ((t[:, None, None, None] * 37 + episode * 101 + pattern) % 256).astype(np.uint8)


def add_episode(buf, robot: str, episode: int, n: int, *, per_batch: int = 4, **kw) -> None:
    for seq in range(0, n, per_batch):
        k = min(per_batch, n - seq)
        buf.add(make_batch(robot, episode, seq, k, done=seq + k == n, **kw))


def expected_episode(robot: str, episode: int, n: int, **kw) -> TransitionBatch:
    return make_batch(robot, episode, 0, n, done=True, **kw)


def assert_same_rows(ep: Episode, batch: TransitionBatch) -> None:
    for name, dtype in ROW_FIELDS.items():
        got, want = getattr(ep, name), np.asarray(getattr(batch, name), dtype)
        assert got.dtype == dtype and got.tobytes() == want.tobytes(), name
    assert ep.images["front"].tobytes() == batch.images["front"].tobytes()
    assert ep.env_state.tobytes() == batch.env_state.tobytes()
    assert ep.instruction == batch.instruction


def test_commit_and_recover_golden(tmp_path):
    log = EpisodeLog(tmp_path, fsync=True)
    add_episode(_Appender(log), "arm0", 7, 10, success=True)
    _Appender(log).add(make_batch("arm1", 3, 0, 4))  # in progress
    assert sorted(p.name for p in (tmp_path / "segments").iterdir()) == ["00000000.seg"]
    assert [p.name.split("__")[1] for p in (tmp_path / "journal").iterdir()] == ["3.jnl"]
    log.close()
    assert log.committed_transitions == 10 and log.committed_episodes == 1

    reopened = EpisodeLog(tmp_path)
    committed, partial = reopened.recover()
    assert len(committed) == 1 and committed[0].success and committed[0].done and committed[0].n == 10
    assert_same_rows(committed[0], expected_episode("arm0", 7, 10))
    assert len(partial) == 1 and partial[0].key == ("arm1", 3) and not partial[0].done
    assert_same_rows(partial[0], make_batch("arm1", 3, 0, 4))
    # The in-progress episode continues where it stopped.
    assert reopened.append(make_batch("arm1", 3, 4, 2, done=True)) is not None
    assert reopened.committed_episodes == 2 and reopened.committed_transitions == 16
    assert list((tmp_path / "journal").iterdir()) == []


class _Appender:
    """`add` of an EpisodeLog, so that `add_episode` drives logs and buffers alike."""

    def __init__(self, log: EpisodeLog) -> None:
        self.add = log.append


def test_duplicates_overlaps_gaps_and_late_batches(tmp_path, caplog):
    log = EpisodeLog(tmp_path, fsync=False)
    log.append(make_batch("a", 1, 4, 4))  # out of order: rows 4..7 first
    log.append(make_batch("a", 1, 0, 4))  # rows 0..3
    log.append(make_batch("a", 1, 0, 4))  # exact duplicate: ignored
    log.append(make_batch("a", 1, 6, 4))  # overlap: only rows 8, 9 are new
    with caplog.at_level(logging.WARNING):
        ep = log.append(make_batch("a", 1, 12, 2, done=True))  # rows 10, 11 lost
    assert "rows 10..11 never arrived" in caplog.text
    assert ep.n == 12 and list(ep.ticks) == [*range(10), 12, 13]
    assert_same_rows(
        Episode(
            **{
                **vars(ep),
                "ticks": ep.ticks[:10],
                **{k: getattr(ep, k)[:10] for k in ROW_FIELDS},
                "images": {"front": ep.images["front"][:10]},
                "env_state": ep.env_state[:10],
            }
        ),
        make_batch("a", 1, 0, 10),
    )
    with caplog.at_level(logging.WARNING):
        assert log.append(make_batch("a", 1, 10, 2)) is None  # straggler after the commit
    assert "already committed" in caplog.text and log.committed_transitions == 12


def test_final_batch_journalled_but_not_committed_is_committed_on_open(tmp_path):
    log = EpisodeLog(tmp_path, fsync=False)
    log.append(make_batch("a", 2, 0, 4))
    log._journal(("a", 2), make_batch("a", 2, 4, 3, done=True))  # crash before the segment write
    log.close()
    (tmp_path / "segments" / "00000005.seg.tmp").write_bytes(b"half a segment")
    reopened = EpisodeLog(tmp_path)
    (ep,), partial = reopened.recover()
    assert partial == [] and ep.done and ep.n == 7
    assert_same_rows(ep, expected_episode("a", 2, 7))
    assert sorted(p.name for p in (tmp_path / "segments").iterdir()) == ["00000000.seg"]


def test_truncated_journal_tail_is_cut_and_appends_continue(tmp_path, caplog):
    log = EpisodeLog(tmp_path, fsync=False)
    log.append(make_batch("a", 4, 0, 3))
    log.append(make_batch("a", 4, 3, 3))
    log.close()
    (journal,) = (tmp_path / "journal").iterdir()
    journal.write_bytes(journal.read_bytes()[:-10])  # the second record lost its last 10 bytes
    with caplog.at_level(logging.WARNING):
        reopened = EpisodeLog(tmp_path, fsync=False)
    assert "dropped" in caplog.text
    _, (partial,) = reopened.recover()
    assert partial.n == 3
    reopened.append(make_batch("a", 4, 3, 4))
    reopened.close()
    _, (partial,) = EpisodeLog(tmp_path).recover()  # the record after the cut reads back
    assert_same_rows(partial, make_batch("a", 4, 0, 7))


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from test_buffer import SPEC, add_episode, make_batch
    from robotrl.buffer.online import OnlineBuffer
    buf = OnlineBuffer({root!r}, SPEC, capacity=10_000, fsync=True)
    for ep in range(10_000):
        add_episode(buf, "w", ep, 9 + ep % 5, per_batch=3)
        print(ep, flush=True)
        buf.add(make_batch("w", 100_000 + ep, 0, 3))  # an episode left in progress
""")


def test_kill_9_writer_loses_no_committed_episode(tmp_path):
    root = tmp_path / "buf"
    script = WRITER.format(tests=str(Path(__file__).parent), root=str(root))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        reported = [int(proc.stdout.readline()) for _ in range(12)]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert reported == list(range(12))
    buf = OnlineBuffer(root, SPEC, capacity=10_000)
    committed, _ = buf.log.recover()
    ids = [ep.episode_id for ep in committed]
    assert ids == list(range(len(ids))) and len(ids) >= 12  # every reported commit, in order
    for ep in committed:
        assert_same_rows(ep, expected_episode("w", ep.episode_id, 9 + ep.episode_id % 5))
    assert buf.committed_transitions == sum(9 + i % 5 for i in ids) == buf.cache.online_transitions
    assert all(not p.done for p in buf.partial_episodes)


def test_corrupt_segment_is_skipped_with_a_warning(tmp_path, caplog):
    buf = OnlineBuffer(tmp_path, SPEC, capacity=1000, fsync=False)
    for ep in range(3):
        add_episode(buf, "a", ep, 6)
    buf.close()
    seg = tmp_path / "segments" / "00000001.seg"
    data = bytearray(seg.read_bytes())
    data[-5] ^= 0xFF  # one image byte
    seg.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        reopened = OnlineBuffer(tmp_path, SPEC, capacity=1000)
    assert "00000001.seg: payload checksum" in caplog.text
    assert reopened.committed_episodes == 2 and reopened.committed_transitions == 12 == len(reopened)
    (tmp_path / "segments" / "00000002.seg").write_bytes(b"RRLSEG")  # truncated header
    with caplog.at_level(logging.WARNING):
        again = OnlineBuffer(tmp_path, SPEC, capacity=1000)
    assert "truncated header" in caplog.text and again.committed_episodes == 1 and len(again) == 6


def test_spec_mismatch_stores_nothing(tmp_path):
    buf = OnlineBuffer(tmp_path, SPEC, capacity=100, fsync=False)
    bad = make_batch("arm9", 1, 0, 4)
    bad.images["front"] = np.zeros((4, 8, 8, 3), np.uint8)
    with pytest.raises(
        SpecMismatch,
        match=r"robot 'arm9'.*images\['front'\] has shape \(4, 8, 8, 3\), "
        r"expected \(4, 8, 6, 3\)",
    ):
        buf.add(bad)
    wrong_state = make_batch("arm9", 1, 0, 4)
    wrong_state.state = wrong_state.state[:, :2]
    with pytest.raises(SpecMismatch, match="state has shape"):
        buf.add(wrong_state)
    assert list((tmp_path / "journal").iterdir()) == [] and len(buf) == 0


def test_cache_is_uint8_and_evicts_whole_oldest_episodes(tmp_path):
    buf = OnlineBuffer(tmp_path, SPEC, capacity=25, fsync=False)
    for ep in range(4):
        add_episode(buf, "a", ep, 10)
    # 25 slots hold 2 episodes of 10: adding the 3rd evicted episode 0, the 4th episode 1.
    assert len(buf) == 20 and buf.committed_transitions == 40
    assert set(buf.cache.online.arrays["state"][buf.cache.online.eligible(None)][:, 0] // 1000) == {2.0, 3.0}
    assert buf.cache.online.images["front"].dtype == np.uint8
    # per slot: state 12 + env 8 + action 8 + reward 4 + intervention 1 + version 8 + glob 8 + ep_start 8
    # + ep_end 8 + 3 episode flags 3 + ep_return 4 + instr 4 + image 8*6*3 = 144 -> 220 bytes
    assert buf.cache.bytes_per_transition == 220
    sample = buf.sample_transitions(64, learner_version=0, rng=np.random.default_rng(0))
    assert sample.images["front"].dtype == np.uint8 and sample.next_images["front"].dtype == np.uint8
    # Episode 2 was written across the ring's end (slots 20..24, 0..4): next rows still follow.
    rows = sample.state[:, 0] % 1000
    np.testing.assert_array_equal(sample.next_state[:, 0] % 1000, np.where(sample.done, rows, rows + 1))
    assert np.all(sample.done == (rows == 9))
    reopened = OnlineBuffer(tmp_path, SPEC, capacity=25)  # only the newest episodes are read back
    assert len(reopened) == 20 and reopened.committed_transitions == 40


def _mixed_buffer(tmp_path) -> OnlineBuffer:
    """Online episodes 0..9 made by weight version = episode id (10 rows each; episode 9's
    rows are interventions), plus 2 demo episodes of 10 rows."""
    buf = OnlineBuffer(tmp_path, SPEC, capacity=1000, online_ratio=0.75, staleness_cap=3, fsync=False)
    for ep in range(10):
        add_episode(buf, "a", ep, 10, version=ep, intervention=ep == 9)
    demos = []
    for i in range(2):
        b = make_batch("demo", 50 + i, 0, 10, done=True, success=True)
        demos.append(
            Episode(
                "demo",
                50 + i,
                **{k: np.asarray(getattr(b, k), d) for k, d in ROW_FIELDS.items()},
                images=b.images,
                env_state=b.env_state,
                instruction="demo",
                success=True,
                source="demo",
            )
        )
    assert buf.add_demo_episodes(demos) == 20
    return buf


def test_sampler_mixes_online_and_prior_pools_and_caps_staleness(tmp_path):
    buf = _mixed_buffer(tmp_path)
    s = buf.sample_transitions(4000, learner_version=10, rng=np.random.default_rng(1))
    episode = (s.state[:, 0] // 1000).astype(int)
    # 3000 online rows (0.75 * 4000): versions 7, 8, 9 only (staleness <= 3), ~1000 each.
    online = ~s.is_demo
    assert set(episode[:3000]) == {7, 8, 9} and np.all(s.staleness[:3000] == 10 - episode[:3000])
    assert np.all(np.bincount(episode[:3000])[7:] > 900)
    # 1000 prior rows: demo rows (20) + intervention rows of episode 9 (10) -> 2/3 demo.
    prior_demo = s.is_demo[3000:].mean()
    assert 0.62 < prior_demo < 0.72 and set(episode[3000:][~s.is_demo[3000:]]) == {9}
    assert np.all(s.staleness[s.is_demo] == 0) and np.all(s.version[s.is_demo] == -1)
    assert np.all(s.intervention == (episode == 9)) and np.all(s.staleness[online] <= 3)
    # No cap: every online episode appears.
    buf.staleness_cap = None
    s = buf.sample_transitions(4000, learner_version=10, rng=np.random.default_rng(2))
    assert set((s.state[:3000, 0] // 1000).astype(int)) == set(range(10))


def test_sample_chunks_golden(tmp_path):
    buf = _mixed_buffer(tmp_path)
    c = buf.sample_chunks(500, horizon=4, learner_version=10, rng=np.random.default_rng(3))
    t = (c.state[:, 0] % 1000).astype(int)
    ep = (c.state[:, 0] // 1000).astype(int)
    # actions[:, k, 0] = episode*1000 + min(t + k, 9); mask = t + k <= 9.
    k = np.arange(4)
    np.testing.assert_array_equal(c.actions[:, :, 0], ep[:, None] * 1000 + np.minimum(t[:, None] + k, 9))
    np.testing.assert_array_equal(c.mask, t[:, None] + k <= 9)
    np.testing.assert_array_equal(c.intervention, (ep == 9)[:, None] & c.mask)
    assert np.all(c.episode_return == 5.0)  # 10 rows of reward 0.5
    np.testing.assert_array_equal(c.episode_success, c.is_demo)  # online episodes ended without success
    np.testing.assert_array_equal(c.episode_intervened, ep == 9)
    assert c.instruction[0] == f"task {ep[0] % 2}" and c.instruction[-1] == "demo"
    assert c.images["front"].shape == (500, 8, 6, 3) and np.all(c.staleness <= 3)
    # Chunk TD: rewards 0.5 on real rows; next_* at row min(t + 4, 9); every episode is finished.
    nxt = np.minimum(t + 4, 9)
    np.testing.assert_array_equal(c.reward, np.where(c.mask, 0.5, 0.0))
    assert c.reward.dtype == np.float32 and c.done.dtype == bool
    np.testing.assert_array_equal(c.next_state[:, 0], ep * 1000 + nxt)
    np.testing.assert_array_equal(c.next_env_state[:, 1], 2 * (ep * 1000 + nxt))
    for i in (0, 250, 499):
        assert c.next_images["front"][i].tobytes() == _pixels(ep[i], nxt[i : i + 1]).tobytes()
    np.testing.assert_array_equal(c.done, t + 4 >= 10)


def test_sample_chunks_td_fields_golden(tmp_path):
    """One finished online episode of 6 rows with rewards 1..6 and one unfinished demo of
    6 rows with rewards 10..60, horizon 4: per start row t the exact chunk-TD fields."""
    buf = OnlineBuffer(tmp_path, SPEC, capacity=100, fsync=False)
    online = make_batch("a", 3, 0, 6, done=True)
    online.reward = np.arange(1, 7, dtype=np.float32)
    buf.add(online)
    b = make_batch("demo", 4, 0, 6)
    buf.add_demo_episodes(
        [
            Episode(
                "demo",
                4,
                **{k: np.asarray(getattr(b, k), d) for k, d in ROW_FIELDS.items() if k != "reward"},
                reward=10 * np.arange(1, 7, dtype=np.float32),
                images=b.images,
                env_state=b.env_state,
                done=False,
                source="demo",
            )
        ]
    )
    c = buf.sample_chunks(200, horizon=4, learner_version=0, rng=np.random.default_rng(0))
    online_td = {
        0: ([1, 2, 3, 4], 4, False),
        1: ([2, 3, 4, 5], 5, False),
        2: ([3, 4, 5, 6], 5, True),
        3: ([4, 5, 6, 0], 5, True),
        5: ([6, 0, 0, 0], 5, True),
    }
    t = (c.state[:, 0] % 1000).astype(int)
    for demo, table in (
        (False, online_td),
        (True, {k: ([10 * r for r in rs], n, False) for k, (rs, n, _) in online_td.items()}),
    ):
        for start, (rewards, next_row, done) in table.items():
            (rows,) = np.nonzero((t == start) & (c.is_demo == demo))
            assert len(rows) > 0, (demo, start)
            ep = 4 if demo else 3
            np.testing.assert_array_equal(c.reward[rows], np.tile(rewards, (len(rows), 1)))
            np.testing.assert_array_equal(
                c.next_state[rows], np.tile(make_batch("x", ep, next_row, 1).state, (len(rows), 1))
            )
            np.testing.assert_array_equal(c.next_env_state[rows, 1], 2 * (ep * 1000 + next_row))
            assert c.next_images["front"][rows[0]].tobytes() == _pixels(ep, np.array([next_row])).tobytes()
            assert np.all(c.done[rows] == done), (demo, start)  # the unfinished demo never ends a chunk


def test_sample_chunks_gives_each_camera_its_past_frames_from_the_same_episode(tmp_path):
    """With past_ticks (3, 6) every chunk's start row t and next row carry the camera's
    images of rows t - 3 and t - 6 of their own episode (its first row before that), across
    the ring's wrap-around and for demo rows alike, as a policy reading past frames gets them."""
    buf = OnlineBuffer(tmp_path, SPEC, capacity=25, fsync=False, past_ticks=(3, 6))
    for ep in range(3):  # episode 2 is written across the ring's end (slots 20..24, 0..4)
        add_episode(buf, "a", ep, 10)
    b = make_batch("demo", 7, 0, 10, done=True)
    buf.add_demo_episodes(
        [
            Episode(
                "demo",
                7,
                **{k: np.asarray(getattr(b, k), d) for k, d in ROW_FIELDS.items()},
                images=b.images,
                env_state=b.env_state,
                source="demo",
            )
        ]
    )
    c = buf.sample_chunks(400, horizon=4, learner_version=0, rng=np.random.default_rng(0))
    assert sorted(c.images) == ["front", "front@past", "front@past2"] and sorted(c.next_images) == sorted(c.images)
    ep = (c.state[:, 0] // 1000).astype(int)
    t = (c.state[:, 0] % 1000).astype(int)
    nxt = np.minimum(t + 4, 9)
    assert set(ep) == {1, 2, 7} and set(t) == set(range(10))
    for i in range(len(t)):
        for key, back in (("front", 0), ("front@past", 3), ("front@past2", 6)):
            assert c.images[key][i].tobytes() == _pixels(ep[i], np.array([max(t[i] - back, 0)])).tobytes()
            assert c.next_images[key][i].tobytes() == _pixels(ep[i], np.array([max(nxt[i] - back, 0)])).tobytes()
    assert list(buf.sample_transitions(4, 0, np.random.default_rng(0)).images) == ["front"]


def test_empty_buffer_sampling_is_a_clear_error(tmp_path):
    buf = OnlineBuffer(tmp_path, SPEC, capacity=10, staleness_cap=0, fsync=False)
    with pytest.raises(ValueError, match="no committed transitions"):
        buf.sample_transitions(8, 0, np.random.default_rng(0))
    add_episode(buf, "a", 0, 5, version=0)
    with pytest.raises(ValueError, match="within the staleness cap"):
        buf.sample_chunks(8, 2, learner_version=1, rng=np.random.default_rng(0))


def test_demo_dataset_loads_resized_with_reward_and_success(tmp_path, monkeypatch):
    from robotrl.core.robot import CameraSpec, RobotSpec
    from robotrl.hardware.lerobot_arm.convention import RADIANS, JointConvention
    from robotrl.record import features as F
    from robotrl.record.writer import DatasetWriter

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    joints = JointConvention(RADIANS, "so101")
    names, ones = tuple(joints.names), np.ones(6)
    robot = RobotSpec("so101", names, -ones, ones, ones, 30.0, cameras=(CameraSpec("front", 16, 16),))
    writer = DatasetWriter(tmp_path / "ds", F.dataset_features(robot, joints, env_state_dim=2), 30, joints)
    for ep in range(2):
        for t in range(6):
            q = np.full(6, ep + t / 10, np.float32)
            writer.add_frame(
                {
                    F.STATE: q,
                    F.ACTION: q + 0.05,
                    F.TELEOP_ACTION: q,
                    F.MEASURED_TIME: np.zeros(1, np.float32),
                    F.REWARD: np.array([t / 10], np.float32),
                    F.SUCCESS: np.array([ep == 1 and t == 5]),
                    F.ENV_STATE: np.zeros(2, np.float32),
                    F.image_key("front"): np.full((16, 16, 3), 200, np.uint8),
                    F.CAMERA_AGE: np.zeros(1, np.float32),
                    "task": "reach",
                }
            )
        writer.save_episode()
    writer.close()
    spec = TransitionSpec(6, 6, {"front": (8, 6)}, 2)
    buf = OnlineBuffer(tmp_path / "buf", spec, capacity=100, fsync=False)
    assert buf.add_demo_dataset(tmp_path / "ds") == 12 and buf.cache.demo_transitions == 12
    c = buf.sample_chunks(64, 3, learner_version=0, rng=np.random.default_rng(0))
    assert np.all(c.is_demo) and c.images["front"].shape == (64, 8, 6, 3) and c.images["front"].dtype == np.uint8
    assert abs(int(np.median(c.images["front"])) - 200) <= 3  # lossy video, flat grey
    ep = np.floor(c.state[:, 0]).astype(int)
    np.testing.assert_allclose(c.episode_return, 1.5)  # 0 + 0.1 + ... + 0.5
    np.testing.assert_array_equal(c.episode_success, ep == 1)
    assert set(c.instruction) == {"reach"} and buf.committed_transitions == 0
    np.testing.assert_allclose(c.actions[:, 0], c.state + 0.05, atol=1e-6)  # executed: the column "action"
    # A policy trained on a DART recording's clean labels learns online from them too.
    clean = OnlineBuffer(tmp_path / "clean", spec, capacity=100, fsync=False)
    assert clean.add_demo_dataset(tmp_path / "ds", action_key=F.TELEOP_ACTION) == 12
    c = clean.sample_chunks(64, 3, learner_version=0, rng=np.random.default_rng(0))
    np.testing.assert_allclose(c.actions[:, 0], c.state, atol=1e-6)
