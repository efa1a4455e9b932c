"""`SteppedRemoteSource` (a simulated arm on a stepped clock through a real server) when
the server dies and comes back on the same endpoint: the arm holds while it is away and
takes chunks again once it is back (what `robotrl up` relies on when it restarts a
server under stepped actors)."""

from __future__ import annotations

import threading

import numpy as np

from robotrl.core.clock import SimClock
from robotrl.core.errors import WireError
from robotrl.inference.executor import Executor
from robotrl.inference.remote import RemoteChunkSource, SteppedRemoteSource
from robotrl.inference.runner import EpisodeRunner
from robotrl.inference.server import PolicyServer, ServerConfig
from robotrl.inference.stepped import ExpertChunkPolicy
from robotrl.sim.env import TaskEnv
from robotrl.wire.client import ClientSocket

H = 8


def _ticks(runner: EpisodeRunner, n: int, timeout_s: float = 20.0) -> None:
    """`n` runner ticks in a thread; fails (instead of hanging) if they take over `timeout_s`."""
    done = threading.Event()

    def work() -> None:
        for _ in range(n):
            runner.tick()
        done.set()

    threading.Thread(target=work, daemon=True).start()
    assert done.wait(timeout_s), f"{n} stepped ticks did not finish within {timeout_s} s: the source is stuck"


def test_stepped_arm_holds_while_the_server_is_away_then_takes_chunks_again():
    env = TaskEnv("reach", cameras=(), clock=SimClock())
    env.reset(5)
    policy = ExpertChunkPolicy(env.make_expert(), H, env.spec)
    server = PolicyServer(policy, ServerConfig(endpoint="tcp://127.0.0.1:*", warmup_calls=0))
    server.start()
    endpoint = server.endpoint
    client = ClientSocket(endpoint, robot_id="arm0", heartbeat_s=0.1, missed_heartbeats=2)
    client.connect(timeout_s=5)
    source = SteppedRemoteSource(RemoteChunkSource(client, "arm0", 6, reply_timeout_s=0.5), delay_ticks=2)
    executor = Executor(env.robot, source, H, initial_delay_ticks=2, lost_errors=(WireError,))
    runner = EpisodeRunner(env.robot, env, executor, env.clock)
    runner.begin(5)
    try:
        _ticks(runner, 20)
        assert not executor.trace[-1].paused
        server.stop()
        stopped_at = len(executor.trace)
        _ticks(runner, 10)  # a tick waits at most the reply timeout (0.5 s) for the dead server
        assert executor.lost
        # the queued rows run out (or the loss is noticed) within a few ticks; then the arm holds
        first_pause = next(i for i in range(stopped_at, len(executor.trace)) if executor.trace[i].paused)
        held = executor.trace[first_pause:]
        assert len(held) >= 3 and all(r.paused for r in held)
        np.testing.assert_allclose([r.requested_rad for r in held], [held[0].requested_rad] * len(held))
        server = PolicyServer(policy, ServerConfig(endpoint=endpoint, warmup_calls=0))
        server.start()
        _ticks(runner, 40)
        assert not executor.lost
        assert not executor.trace[-1].paused  # chunks again from the restarted server
        np.testing.assert_array_less(-1, [r.version for r in executor.trace[-5:]])
    finally:
        client.close()
        server.stop()
        env.close()
