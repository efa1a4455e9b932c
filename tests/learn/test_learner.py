"""Learner process: the learner loop with real sockets, spec rejection, kill -9 and
--resume, the learner command."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from robotrl.bringup.probes import learner_report
from robotrl.learn.checkpoint import checkpoint_exists, load_checkpoint
from robotrl.learn.metrics import (
    read_csv,
)

SPEC_DICT = {"state_dim": 2, "action_dim": 2, "cameras": {"front": [8, 8]}, "env_state_dim": 0}
ROWS = 20  # rows per episode
BATCH = 5  # rows per TransitionBatch


class FakeAlgorithm:
    """Moves a weight vector w (A,) toward the mean sampled action with Adam; one update
    per call. Its weights are safetensors {"w": w}."""

    name = "fake"

    def __init__(self, sleep_s: float = 0.0) -> None:
        self.w = torch.zeros(2, requires_grad=True)
        self.optimizer = torch.optim.Adam([self.w], lr=0.05)
        self.sleep_s, self.calls = sleep_s, 0

    def update(self, buffer, learner_version, rng):
        import time

        s = buffer.sample_transitions(8, learner_version, rng)
        loss = ((self.w - torch.from_numpy(s.action).mean(0)) ** 2).sum()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.calls += 1
        time.sleep(self.sleep_s)
        return {"loss": float(loss.detach()), "ess": 1.0, "staleness_mean": float(s.staleness.mean()), "grad_norm": 0.0}

    def policy_weights(self) -> bytes:
        from safetensors.torch import save

        return save({"w": self.w.detach().clone()})

    def served_policy(self):
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {"w": self.w.detach().clone(), "optimizer": self.optimizer.state_dict(), "calls": self.calls}

    def load_state_dict(self, state: dict) -> None:
        with torch.no_grad():
            self.w.copy_(state["w"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.calls = state["calls"]


def _spec():
    from robotrl.buffer.spec import TransitionSpec

    return TransitionSpec.from_dict(SPEC_DICT)


def _episode_batches(robot_id: str, episode_id: int, interventions: int, success: bool, state_dim: int = 2):
    """ROWS rows in batches of BATCH; the first `interventions` rows intervened; action = 1 + episode_id / 10."""
    from robotrl.wire.messages import TransitionBatch

    out = []
    for seq in range(0, ROWS, BATCH):
        t = np.arange(seq, seq + BATCH)
        out.append(
            TransitionBatch(
                robot_id=robot_id,
                episode_id=episode_id,
                seq=seq,
                ticks=t,
                state=np.full((BATCH, state_dim), 0.1, np.float32),
                action=np.full((BATCH, 2), 1 + episode_id / 10, np.float32),
                policy_action=np.zeros((BATCH, 2), np.float32),
                reward=np.where(t == ROWS - 1, 1.0, 0.0).astype(np.float32),
                intervention=t < interventions,
                version=np.zeros(BATCH, np.int64),
                delay_ticks=np.ones(BATCH, np.int64),
                images={"front": np.full((BATCH, 8, 8, 3), episode_id, np.uint8)},
                episode_done=seq + BATCH == ROWS,
                success=success,
            )
        )
    return out


def _sender(endpoint: str, robot_id: str = "arm0"):
    from robotrl.wire.transitions import TransitionSender

    return TransitionSender(endpoint, robot_id)


def _send(sender, batches) -> None:
    for b in batches:
        sender.send(b)
    assert sender.flush(10.0), f"{sender.queued_batches} batches not sent within 10 s"


def _raw_dealer(endpoint: str):
    import zmq

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 2000)
    sock.connect(endpoint)
    return sock


def _wait(predicate, timeout_s: float = 20.0, what: str = "condition") -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _check_health(run, staleness_mean: float) -> None:
    """The end-to-end run's live health file (30 updates, version 6, 80 transitions, CPU)
    and a supervisor's view of the run folder (`learner_report`)."""
    health = json.loads((run / "health.json").read_text())
    assert (health["updates"], health["version"], health["buffer_transitions"], health["buffer_samplable"]) == (
        30,
        6,
        80,
        80,
    )
    assert health["staleness_mean"] == pytest.approx(staleness_mean, abs=1e-3)  # the last update's batch
    assert health["gpu"] == {"device": "cpu", "memory_used_mb": None, "memory_total_mb": None, "utilization_pct": None}
    report = learner_report(run)
    assert (report["updates"], report["transitions"], report["episodes"]) == (30, 80, 4)
    assert report["intervention_rate"] == pytest.approx(6 / 80)  # 0 + 1 + 2 + 3 of 4 x 20 ticks


def test_learner_end_to_end_publishes_logs_and_rejects_bad_spec(tmp_path, caplog):
    import threading

    import msgspec

    from robotrl.buffer.online import OnlineBuffer
    from robotrl.learn.learner import Learner, LearnerConfig
    from robotrl.wire.weights import WeightPublisher, WeightSubscriber

    caplog.set_level("ERROR", logger="robotrl")
    buffer = OnlineBuffer(tmp_path / "buf", _spec(), 10_000, fsync=False)
    publisher = WeightPublisher("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
    algo = FakeAlgorithm()
    cfg = LearnerConfig(
        out=tmp_path / "run",
        transitions_endpoint="tcp://127.0.0.1:*",
        min_transitions=4 * ROWS,
        publish_every=5,
        checkpoint_every=10,
        log_every=5,
        max_updates=30,
        poll_ms=10,
    )
    learner = Learner(algo, buffer, publisher, cfg)
    received = {}
    subscriber = WeightSubscriber(
        publisher.pub_endpoint, publisher.latest_endpoint, lambda v, data: received.__setitem__(v, data), refresh_s=0.2
    )
    # bad input first: a robot with a 3-joint state, bytes that are no message at all, a
    # robot on another protocol version and a robot sending for another one
    _send(bad := _sender(learner.transitions_endpoint, "bad"), _episode_batches("bad", 99, 0, False, state_dim=3)[:1])
    garbage = _raw_dealer(learner.transitions_endpoint)
    garbage.send(b"\x00garbage")
    future = msgspec.structs.replace(_episode_batches("arm9", 98, 0, True)[0], protocol_version=99)
    _send(arm9 := _sender(learner.transitions_endpoint, "arm9"), [future])
    _send(thief := _sender(learner.transitions_endpoint, "thief"), _episode_batches("arm0", 97, 0, True)[:1])
    arm0 = _sender(learner.transitions_endpoint)
    for k in range(4):  # episode k: k intervention rows of 20, success on odd episodes
        _send(arm0, _episode_batches("arm0", k, k, bool(k % 2)))
    with subscriber:
        thread = threading.Thread(target=learner.run)
        thread.start()
        thread.join(timeout=60)
        assert not thread.is_alive()
        _wait(lambda: 6 in received, what="weights version 6 at the subscriber")
    for sock in (bad, garbage, arm9, thief, arm0):
        sock.close()

    assert (learner.updates, learner.version, learner.rejected, learner.episodes) == (30, 6, 4, 4)
    assert learner.refused_on_the_wire == {"protocol": 1, "protocol version": 1, "wrong robot id": 1}
    assert buffer.committed_transitions == 4 * ROWS and algo.calls == 30
    assert received[6] == algo.policy_weights()  # what the subscriber got is the final w
    assert sorted(received)[-1] == 6 and sorted(received) == sorted(set(received))
    errors = [r.getMessage() for r in caplog.records]
    assert any("robot 'bad'" in m and "state has shape (5, 3), expected (5, 2)" in m for m in errors), errors
    assert any("protocol, 1 so far" in m and "invalid message" in m for m in errors), errors
    assert any("robot 'arm9'" in m and "the peer speaks 99" in m for m in errors), errors
    assert any("'thief'; it may not send for 'arm0'" in m for m in errors), errors

    episodes = read_csv(tmp_path / "run" / "episodes.csv")
    assert [float(r["intervention_rate"]) for r in episodes] == [0.0, 0.05, 0.1, 0.15]  # k / 20
    assert [r["success"] for r in episodes] == ["0", "1", "0", "1"]
    assert [float(r["episode_return"]) for r in episodes] == [1.0] * 4
    updates = read_csv(tmp_path / "run" / "updates.csv")
    assert [int(r["updates"]) for r in updates] == [5, 10, 15, 20, 25, 30]
    # 8 online rows per update, all made by version 0: staleness = learner version at the time
    assert int(updates[0]["stale_0_1"]) == 5 * 8 and int(updates[1]["stale_1_2"]) == 5 * 8
    assert (tmp_path / "run" / "curves.png").is_file()
    _check_health(tmp_path / "run", float(updates[-1]["staleness_mean"]))
    state, meta = load_checkpoint(tmp_path / "run" / "checkpoint")
    assert meta["updates"] == 30 and meta["version"] == 6 and meta["buffer_cursor"]["committed_transitions"] == 80
    assert torch.equal(state["algorithm"]["w"], algo.w.detach())
    learner.close()
    publisher.close()
    buffer.close()
    with pytest.raises(FileExistsError, match="--resume"):
        Learner(FakeAlgorithm(), buffer, publisher, cfg)


LEARNER_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from robotrl.buffer.online import OnlineBuffer
from robotrl.learn.learner import Learner, LearnerConfig
from robotrl.wire.weights import WeightPublisher
from test_learner import FakeAlgorithm, _spec
buffer = OnlineBuffer(Path({root!r}) / "buf", _spec(), 10_000, fsync=True)
publisher = WeightPublisher("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
cfg = LearnerConfig(out=Path({root!r}) / "run", transitions_endpoint="tcp://127.0.0.1:*", min_transitions=40,
                    publish_every=5, checkpoint_every=10, log_every=5, poll_ms=10)
learner = Learner(FakeAlgorithm(sleep_s=0.01), buffer, publisher, cfg)
print(learner.transitions_endpoint, flush=True)
learner.run()
"""


def test_kill_9_then_resume_restores_counters_and_loses_no_committed_transition(tmp_path):
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from robotrl.buffer.online import OnlineBuffer
    from robotrl.learn.learner import Learner, LearnerConfig, resume_version
    from robotrl.wire.weights import WeightPublisher

    script = LEARNER_SCRIPT.format(tests=str(Path(__file__).parent), root=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        endpoint = proc.stdout.readline().strip()
        assert endpoint.startswith("tcp://"), endpoint
        push = _sender(endpoint)
        for k in range(4):
            _send(push, _episode_batches("arm0", k, 0, True))
        _send(push, _episode_batches("arm0", 4, 0, True)[:2])  # in progress at the kill: journalled only
        episodes_csv = tmp_path / "run" / "episodes.csv"
        _wait(lambda: episodes_csv.is_file() and len(read_csv(episodes_csv)) == 4, what="4 committed episodes")
        _wait(
            lambda: (
                checkpoint_exists(tmp_path / "run" / "checkpoint")
                and load_checkpoint(tmp_path / "run" / "checkpoint")[1]["updates"] >= 20
            ),
            what="a checkpoint at 20",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        push.close()
    finally:
        proc.kill()
        proc.stdout.close()
    saved_state, saved = load_checkpoint(tmp_path / "run" / "checkpoint")

    buffer = OnlineBuffer(tmp_path / "buf", _spec(), 10_000, fsync=False)
    assert buffer.committed_transitions == 4 * ROWS and buffer.committed_episodes == 4  # nothing committed lost
    publisher = WeightPublisher("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
    algo = FakeAlgorithm()
    cfg = LearnerConfig(
        out=tmp_path / "run",
        transitions_endpoint="tcp://127.0.0.1:*",
        min_transitions=40,
        publish_every=5,
        checkpoint_every=10,
        log_every=5,
        poll_ms=10,
        max_updates=saved["updates"] + 10,
    )
    with Learner(algo, buffer, publisher, cfg, resume=True) as learner:
        assert learner.updates == saved["updates"] and learner.episodes == 4
        assert learner.received_batches == saved["received_batches"]
        # versions published after the checkpoint are unknown: restart above them (10 / 5 + 1 = 3 more)
        assert learner.version == resume_version(saved["version"], 10, 5) == saved["version"] + 3
        assert torch.equal(algo.w.detach(), saved_state["algorithm"]["w"]) and algo.calls == saved["updates"]
        learner.run()
        assert learner.updates == saved["updates"] + 10 and algo.calls == saved["updates"] + 10
        assert publisher.latest_version == saved["version"] + 3 + 2
    publisher.close()
    buffer.close()
    assert load_checkpoint(tmp_path / "run" / "checkpoint")[1]["updates"] == saved["updates"] + 10


def _free_port_pair() -> int:
    """A port p with p and p + 1 free (the weights PUB and latest-weights sockets)."""
    import socket

    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
                return port
    raise RuntimeError("no two consecutive free ports")


def test_cli_learn_sac_updates_checkpoints_and_resumes(tmp_path, capsys):
    import msgspec

    from robotrl.buffer.online import OnlineBuffer
    from robotrl.buffer.spec import TransitionSpec
    from robotrl.cli import main

    spec = TransitionSpec(2, 2)  # state only: the buffer is filled before the learner starts
    buffer = OnlineBuffer(tmp_path / "buf", spec, 1000, fsync=False)
    for k in range(2):
        for b in _episode_batches("arm0", k, 5, True):
            buffer.add(msgspec.structs.replace(b, images={}))
    buffer.close()
    args = [
        "learner",
        "--algo",
        "sac",
        "--preset",
        "tiny",
        "--buffer",
        str(tmp_path / "buf"),
        "--out",
        str(tmp_path / "run"),
        "--state-dim",
        "2",
        "--action-dim",
        "2",
        "--cameras",
        "",
        "--transitions",
        "tcp://127.0.0.1:*",
        "--weights",
        f"tcp://127.0.0.1:{_free_port_pair()}",
        "--min-transitions",
        "20",
        "--publish-every",
        "2",
        "--checkpoint-every",
        "2",
        "--set",
        "batch_size=8",
        "--set",
        "hidden_dims=[16, 16]",
        "--set",
        "latent_dim=16",
        "--no-fsync",
    ]
    assert main([*args, "--max-updates", "3"]) == 0
    assert "3 updates, weights version 1" in capsys.readouterr().out
    start = [*args[: args.index("--out") + 1], str(tmp_path / "start"), *args[args.index("--out") + 2 :]]
    assert main([*start, "--max-updates", "0"]) == 0  # the same seed: the weights the run started from
    served = {name: load_file(tmp_path / name / "served" / "model.safetensors") for name in ("run", "start")}
    assert served["run"].keys() == served["start"].keys()
    assert any(not torch.equal(served["run"][k], served["start"][k]) for k in served["run"])  # the final weights
    assert load_checkpoint(tmp_path / "run" / "checkpoint")[1]["updates"] == 3
    assert main([*args, "--max-updates", "4"]) == 2  # the run exists: --resume or another --out
    assert "--resume" in capsys.readouterr().err
    assert main([*args, "--max-updates", "4", "--resume"]) == 0
    meta = load_checkpoint(tmp_path / "run" / "checkpoint")[1]
    assert meta["updates"] == 4 and meta["spec"] == spec.to_dict() and meta["algo"] == "sac"


def test_cli_learner_every_option_has_help():
    import argparse

    from robotrl.commands.learner import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert len(options) >= 25 and all(a.help for a in options), [a.dest for a in options if not a.help]


class RejectingAlgorithm(FakeAlgorithm):
    """Draws a batch and, like hil-flow with no demo, success or intervention row in it,
    learns nothing from it (metric "skipped")."""

    def update(self, buffer, learner_version, rng):
        buffer.sample_transitions(8, learner_version, rng)
        self.calls += 1
        return {"loss": 0.0, "ess": 0.0, "staleness_mean": 0.0, "grad_norm": 0.0, "skipped": 1.0}


def test_updates_that_learn_nothing_are_not_counted_or_published(tmp_path):
    """Failed, unassisted episodes only: every draw is rejected, and the learner waits
    `poll_ms` for transitions between draws instead of publishing its unchanged weights
    as new versions (it published 240 a second before)."""
    from robotrl.buffer.online import OnlineBuffer
    from robotrl.learn.learner import Learner, LearnerConfig

    class Publications:
        def __init__(self) -> None:
            self.versions: list[int] = []

        def publish(self, version, data):
            self.versions.append(version)

    buffer = OnlineBuffer(tmp_path / "buf", _spec(), 1000, fsync=False)
    for episode in range(4):
        for batch in _episode_batches("arm0", episode, interventions=0, success=False):
            buffer.add(batch)
    cfg = LearnerConfig(
        out=tmp_path / "run",
        transitions_endpoint="tcp://127.0.0.1:*",
        min_transitions=4 * ROWS,
        publish_every=1,
        max_wall_s=1.0,
        poll_ms=50,
    )
    algo, publisher = RejectingAlgorithm(), Publications()
    with Learner(algo, buffer, publisher, cfg) as learner:
        learner.run()
        assert (learner.updates, learner.version, publisher.versions) == (0, 0, [0])
    assert 5 <= algo.calls <= 1.0 / 0.05 + 5  # it kept drawing, one draw per poll
    buffer.close()


def test_transition_streamer_feeds_the_learner(tmp_path):
    """The robot-side streamer (inference/transitions.py) -> the learner's inbox -> committed episodes."""
    from robotrl.buffer.online import OnlineBuffer
    from robotrl.inference.transitions import TransitionStreamer
    from robotrl.learn.learner import Learner, LearnerConfig

    class NullPublisher:
        def publish(self, version, data):
            pass

    buffer = OnlineBuffer(tmp_path / "buf", _spec(), 1000, fsync=False)
    cfg = LearnerConfig(out=tmp_path / "run", transitions_endpoint="tcp://127.0.0.1:*", min_transitions=10**6)
    with (
        Learner(FakeAlgorithm(), buffer, NullPublisher(), cfg) as learner,
        TransitionStreamer(learner.transitions_endpoint, "arm7", _spec(), every_ticks=4) as streamer,
    ):
        for episode in range(2):
            streamer.begin_episode("pick")
            for tick in range(10):  # camera frames at 16 x 16, resized to the spec's 8 x 8
                streamer.record(
                    tick,
                    np.zeros(2, np.float32),
                    {"front": np.zeros((16, 16, 3), np.uint8)},
                    None,
                    np.ones(2, np.float32),
                    np.ones(2, np.float32),
                    0.0,
                    tick < 3,
                    0,
                    1,
                )
            streamer.end_episode(success=episode == 1)
        _wait(lambda: learner.receive(20) >= 0 and learner.episodes == 2, what="2 committed episodes")
        assert learner.rejected == 0 and buffer.committed_transitions == 20
    rows = read_csv(tmp_path / "run" / "episodes.csv")
    assert [(r["robot_id"], r["ticks"], r["success"], float(r["intervention_rate"])) for r in rows] == [
        ("arm7", "10", "0", 0.3),
        ("arm7", "10", "1", 0.3),
    ]
    buffer.close()


def test_resume_before_the_first_checkpoint_starts_fresh_on_the_buffer(tmp_path, caplog):
    from robotrl.buffer.online import OnlineBuffer
    from robotrl.learn.learner import Learner, LearnerConfig

    buffer = OnlineBuffer(tmp_path / "buf", _spec(), 1000, fsync=False)
    for b in _episode_batches("arm0", 0, 0, True):
        buffer.add(b)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "episodes.csv").write_text("episode,wall_s,success,intervention_rate\n0,12.5,1,0\n")
    cfg = LearnerConfig(out=tmp_path / "run", transitions_endpoint="tcp://127.0.0.1:*")
    with pytest.raises(FileExistsError, match="--resume"):
        Learner(FakeAlgorithm(), buffer, None, cfg)
    caplog.set_level("WARNING", logger="robotrl.learn.learner")
    with Learner(FakeAlgorithm(), buffer, None, cfg, resume=True) as learner:
        assert (learner.updates, learner.version, learner.episodes) == (0, 0, 1)
        assert learner.wall_s >= 12.5  # run time continues from the logs
    assert "no checkpoint" in caplog.text and "20 committed transitions" in caplog.text
    buffer.close()
