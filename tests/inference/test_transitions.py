"""`TransitionStreamer` to a real `TransitionInbox` on loopback, and a full simulated actor
episode (the episode runner with a `TransitionRecorder`) streaming to it with the scripted intervener."""

from __future__ import annotations

import numpy as np
import pytest

from robotrl.buffer.spec import SpecMismatch, TransitionSpec
from robotrl.inference.executor import Executor, LocalChunkSource
from robotrl.inference.runner import EpisodeRunner
from robotrl.inference.stepped import ExpertChunkPolicy
from robotrl.inference.transitions import TransitionRecorder, TransitionStreamer, resize_image
from robotrl.wire.messages import TransitionBatch
from robotrl.wire.transitions import TransitionInbox

SPEC = TransitionSpec(state_dim=3, action_dim=3, cameras={"wrist": (24, 32)}, env_state_dim=2)


@pytest.fixture
def inbox():
    with TransitionInbox("tcp://127.0.0.1:*") as box:
        yield box


def receive(inbox: TransitionInbox, spec: TransitionSpec) -> list[TransitionBatch]:
    """Batches until the one with episode_done (bounded waits), each checked against `spec`."""
    batches = []
    while not batches or not batches[-1].episode_done:
        taken = inbox.take(10.0, 1)
        assert taken, "no transition batch within 10 s"
        spec.check(taken[0])
        batches += taken
    return batches


def record_rows(streamer: TransitionStreamer, n: int, image_hw=(48, 64)) -> None:
    for t in range(n):
        image = np.full((*image_hw, 3), t % 256, np.uint8)
        streamer.record(
            t,
            np.full(3, t, np.float64),
            {"wrist": image},
            np.array([t, -t], np.float64),
            np.full(3, t + 0.5),
            np.full(3, t + 0.25),
            reward=-t / 10,
            intervention=t % 5 == 0,
            version=t // 8,
            delay_ticks=2,
        )


def test_batches_every_k_rows_pass_the_spec_and_concatenate_to_the_episode(inbox):
    with TransitionStreamer(inbox.endpoint, "arm0", SPEC, every_ticks=8) as streamer:
        episode_id = streamer.begin_episode("stack it")
        record_rows(streamer, 20)
        streamer.end_episode(success=True)
        batches = receive(inbox, SPEC)
    assert [len(b.ticks) for b in batches] == [8, 8, 4] and [b.seq for b in batches] == [0, 8, 16]
    assert [b.episode_done for b in batches] == [False, False, True] and batches[-1].success
    assert {b.episode_id for b in batches} == {episode_id} and batches[0].instruction == "stack it"
    ticks = np.concatenate([b.ticks for b in batches])
    np.testing.assert_array_equal(ticks, np.arange(20))
    np.testing.assert_array_equal(np.concatenate([b.state for b in batches])[:, 0], np.arange(20))
    np.testing.assert_allclose(np.concatenate([b.action for b in batches])[:, 1], np.arange(20) + 0.5)
    np.testing.assert_allclose(np.concatenate([b.reward for b in batches]), -np.arange(20) / 10, rtol=1e-6)
    assert np.concatenate([b.intervention for b in batches]).sum() == 4  # ticks 0, 5, 10, 15
    images = np.concatenate([b.images["wrist"] for b in batches])
    assert images.shape == (20, 24, 32, 3) and images.dtype == np.uint8
    np.testing.assert_array_equal(images[:, 0, 0, 0], np.arange(20))  # a flat image stays flat (INTER_AREA)
    assert streamer.sender.sent_batches == 3 and streamer.sent_rows == 20 and streamer.sender.dropped_batches == 0


def test_episode_ids_are_unique_and_increase_across_restarts(inbox):
    endpoint = inbox.endpoint
    ids = []
    for _ in range(2):  # a robot restarted: a new streamer
        with TransitionStreamer(endpoint, "arm0", SPEC) as streamer:
            ids += [streamer.begin_episode(), streamer.begin_episode()]
    assert all(a < b for a, b in zip(ids, ids[1:]))


def test_a_dead_learner_never_blocks_record_and_a_returning_one_gets_the_queue():
    import socket
    import time

    with socket.socket() as probe:  # a port nobody listens on, for now
        probe.bind(("127.0.0.1", 0))
        endpoint = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    streamer = TransitionStreamer(endpoint, "arm0", SPEC, every_ticks=1, queue_batches=4, linger_s=0.0)
    t0 = time.monotonic()
    record_rows(streamer, 300, image_hw=(24, 32))
    streamer.end_episode(success=False)
    assert time.monotonic() - t0 < 5.0  # (300 rows, no waiting for the learner)
    assert streamer.sender.dropped_batches == 296 and streamer.sender.queued_batches == 4
    assert streamer.sender.sent_batches == 0 and not streamer.sender.connected
    with TransitionInbox(endpoint) as late:  # the learner starts: the 4 newest batches arrive
        assert streamer.sender.flush(10.0)
        batches = [b for _ in range(4) for b in late.take(10.0, 1)]
    streamer.close()
    assert [int(b.ticks[0]) for b in batches] == [296, 297, 298, 299] and batches[-1].episode_done


def test_bad_rows_are_refused_clearly(inbox):
    with TransitionStreamer(inbox.endpoint, "arm0", SPEC, every_ticks=1) as streamer:
        with pytest.raises(ValueError, match="no image from cameras \\['wrist'\\]"):
            streamer.record(0, np.zeros(3), {}, np.zeros(2), np.zeros(3), np.zeros(3), 0.0, False, 0, 0)
        streamer.record(
            0,
            np.zeros(4),
            {"wrist": np.zeros((24, 32, 3), np.uint8)},
            np.zeros(2),
            np.zeros(3),
            np.zeros(3),
            0.0,
            False,
            0,
            0,
        )
        with pytest.raises(SpecMismatch, match="state has shape \\(1, 4\\), expected \\(1, 3\\)"):
            streamer.end_episode(success=False)
    with pytest.raises(ValueError, match="uint8"):
        resize_image(np.zeros((4, 4, 3), np.float32), (2, 2))


def test_actor_episode_streams_what_was_executed_with_interventions(inbox):
    from robotrl.sim.env import TaskEnv
    from robotrl.sim.intervener import ScriptedIntervener

    env = TaskEnv("reach", cameras=())
    spec = TransitionSpec(state_dim=6, action_dim=6, env_state_dim=3)
    env.reset(1)
    policy = ExpertChunkPolicy(env.make_expert(), 8, env.spec, version=3)
    intervener = ScriptedIntervener(env, takeover_m=0.03, handback_m=0.01, min_ticks=4)
    try:
        with TransitionStreamer(inbox.endpoint, "arm0", spec, every_ticks=8) as streamer:
            # a delay of 6 ticks makes the expert-as-policy lag behind the shadow expert
            executor = Executor(env.robot, LocalChunkSource(policy, 6), 8, intervener=intervener)
            runner = EpisodeRunner(env.robot, env, executor, env.clock, observers=[TransitionRecorder(streamer)])
            episode = runner.run(1)
            batches = receive(inbox, spec)
    finally:
        env.close()
    flags = np.concatenate([b.intervention for b in batches])
    assert len(flags) == episode.ticks == env.tick
    np.testing.assert_array_equal(flags, [r.intervened for r in episode.trace])
    assert episode.intervention_ticks == flags.sum() > 0 and episode.takeovers >= 1
    np.testing.assert_allclose(
        np.concatenate([b.action for b in batches]), np.stack([r.sent_rad for r in episode.trace]), atol=1e-6
    )
    assert episode.versions == [3] and set(np.concatenate([b.version for b in batches])) <= {-1, 3}
    assert batches[-1].success == episode.success


def test_encrypted_transitions_are_heard_only_from_allowed_keys(curve_folders):
    """A learner with keys takes batches from an allowed actor, never from a stranger."""
    from robotrl.wire.keys import client_keys, server_keys

    learner, allowed, stranger = curve_folders
    spec = TransitionSpec(state_dim=6, action_dim=6)
    with TransitionInbox("tcp://127.0.0.1:*", curve=server_keys(learner)) as inbox:
        for folder, robot in ((stranger, "stranger"), (allowed, "allowed")):
            with TransitionStreamer(inbox.endpoint, robot, spec, every_ticks=4, curve=client_keys(folder)) as streamer:
                streamer.begin_episode("reach")
                for t in range(6):
                    streamer.record(t, np.zeros(6), {}, None, np.zeros(6), np.zeros(6), 0.0, False, 0, 1)
                streamer.end_episode(True)
                delivered = streamer.sender.flush(2.0)
            assert delivered == (robot == "allowed")  # the stranger never got a hello reply
        batches = receive(inbox, spec)
        assert {b.robot_id for b in batches} == {"allowed"} and sum(len(b.ticks) for b in batches) == 6
        assert inbox.take(0.5, 10) == []  # nothing from the stranger, ever
