"""The server with several requests in flight per robot: request slots, model workers
running side by side, weight swaps between them, the remote source and the executor's
side of it (threshold and requests in flight from the served policy)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from server_doubles import H, RampPolicy, request

from robotrl.core.policy import PolicyMetadata, PolicyObservation
from robotrl.inference.executor import ExecutorConfig
from robotrl.inference.remote import RemoteChunkSource, remote_executor
from robotrl.inference.server import PolicyServer, ServerConfig
from robotrl.sim.env import TaskEnv
from robotrl.wire.client import ClientSocket


class GatedPolicy(RampPolicy):
    """Each call waits at `gate` (a `threading.Barrier` or `Event`-like `wait()`) before it
    answers, so a test decides when (and whether side by side) chunks are computed."""

    def __init__(self, gate) -> None:
        super().__init__()
        self.gate = gate
        self.warm = False  # the server's warm-up calls pass straight through

    def predict_chunks(self, observations):
        if self.warm:
            self.gate.wait()
        return super().predict_chunks(observations)


def send_until_computed(server: PolicyServer, client: ClientSocket) -> None:
    """Send request 1 of robot "arm" and return once a model worker is computing it."""
    client.send(request("arm", 1, np.zeros(6), tick=1))
    deadline = time.monotonic() + 5
    while server._running == 0 and time.monotonic() < deadline:
        time.sleep(0.005)


def test_a_robot_asking_faster_than_the_model_gets_its_newest_request_answered():
    release = threading.Event()
    policy = GatedPolicy(release)
    with PolicyServer(policy, ServerConfig(endpoint="tcp://127.0.0.1:*", batch_wait_ms=0)) as server:
        policy.warm = True
        with (
            ClientSocket(server.endpoint, robot_id="arm") as client,
            ClientSocket(server.endpoint, robot_id="other") as other,
        ):
            client.connect(timeout_s=5)
            other.connect(timeout_s=5)
            send_until_computed(server, client)
            for i in range(2, 6):  # four more while the model is busy: only the newest waits
                client.send(request("arm", i, np.zeros(6), tick=i))
            other.send(request("other", 7, np.zeros(6), tick=3))
            deadline = time.monotonic() + 5
            health = server.health()
            while (health["superseded_requests"] < 3 or health["queued_requests"] < 2) and time.monotonic() < deadline:
                time.sleep(0.005)  # the other robot's request may arrive after the arm's last
                health = server.health()
            assert (health["superseded_requests"], health["queued_requests"]) == (3, 2)  # one per robot
            release.set()
            answered = [client.recv(timeout_s=5).request_id for _ in range(2)]
            assert other.recv(timeout_s=5).request_id == 7
            assert client.poll(0.2) is None  # requests 2, 3 and 4 are never answered
    assert answered == [1, 5]


def test_model_workers_answer_one_robots_requests_side_by_side():
    # each call waits until a second one is inside the model too: one worker would never answer
    policy = GatedPolicy(threading.Barrier(2, timeout=5))
    config = ServerConfig(endpoint="tcp://127.0.0.1:*", batch_wait_ms=0, model_workers=2)
    with PolicyServer(policy, config) as server:
        policy.warm = True
        with ClientSocket(server.endpoint, robot_id="arm") as client:
            client.connect(timeout_s=5)
            send_until_computed(server, client)
            client.send(request("arm", 2, np.zeros(6), tick=2))
            replies = {client.recv(timeout_s=5).request_id for _ in range(2)}
            assert server.health()["threads_alive"] == {
                "robotrl-server-io": True,
                "robotrl-server-model-0": True,
                "robotrl-server-model-1": True,
            }
    assert replies == {1, 2} and policy.batches == [1, 1, 1, 1, 1]  # 3 warm-up calls, then one each
    assert server.errors == {}


def test_a_weight_swap_waits_for_the_batches_running_on_other_workers():
    gate = threading.Event()
    policy = GatedPolicy(gate)
    config = ServerConfig(endpoint="tcp://127.0.0.1:*", batch_wait_ms=0, model_workers=2)
    with PolicyServer(policy, config, version=1) as server:
        policy.warm = True
        with ClientSocket(server.endpoint, robot_id="arm") as client:
            client.connect(timeout_s=5)
            send_until_computed(server, client)
            server.set_weights(2, "v2")
            client.send(request("arm", 2, np.zeros(6), tick=2))  # the other worker must wait to swap
            time.sleep(0.1)
            assert policy.version_seen == [] and server.version == 1
            gate.set()
            replies = {r.request_id: r.version for r in (client.recv(timeout_s=5), client.recv(timeout_s=5))}
    assert replies == {1: 1, 2: 2} and policy.version_seen == ["v2"]


def test_the_remote_source_takes_a_reply_as_superseding_the_requests_before_it():
    policy = RampPolicy()
    with PolicyServer(policy, ServerConfig(endpoint="tcp://127.0.0.1:*")) as server:
        with ClientSocket(server.endpoint, robot_id="arm") as client:
            client.connect(timeout_s=5)
            remote = RemoteChunkSource(client, "arm", 6)
            for tick in (1, 2, 3):
                remote.request(PolicyObservation(np.zeros(6), tick=tick))
            chunks = []
            deadline = time.monotonic() + 5
            while remote.waiting and time.monotonic() < deadline:
                chunk = remote.poll(0, wait_s=0.05)
                if chunk is not None:
                    chunks.append(chunk.start_tick)
            # the server answered the newest waiting request and whatever it had already
            # begun; every reply is newer than the one before, none is given twice
            assert chunks[-1] == 3 and chunks == sorted(set(chunks))
            assert remote.stats.count("rtt") == len(chunks)


def test_a_stepped_arm_refuses_several_requests_in_flight():
    from robotrl.core.errors import UserError

    env = TaskEnv("reach", cameras=())
    try:
        with pytest.raises(UserError, match="one request in flight"):
            remote_executor(
                env.robot, None, {"horizon": H}, ExecutorConfig("vlash", max_in_flight=2), robot_id="a", stepped_delay=2
            )  # type: ignore[arg-type]
    finally:
        env.close()


def test_a_deployed_arm_re_plans_after_the_rows_the_served_policy_was_trained_to_run():
    class TwoRows(RampPolicy):
        @property
        def metadata(self) -> PolicyMetadata:
            return PolicyMetadata("ramp", H, 6, 30.0, 6, execute_steps=2)

    env = TaskEnv("reach", cameras=())
    try:
        with PolicyServer(TwoRows(), ServerConfig(endpoint="tcp://127.0.0.1:*")) as server:
            with ClientSocket(server.endpoint, robot_id="arm") as client:
                info = client.connect(timeout_s=5)
                own = remote_executor(env.robot, client, info, ExecutorConfig("vlash"), robot_id="arm")
                set_by_user = remote_executor(env.robot, client, info, ExecutorConfig("vlash", 0.5), robot_id="arm")
    finally:
        env.close()
    assert info["execute_steps"] == 2
    assert own.threshold == pytest.approx(1 - 2 / H) and set_by_user.threshold == 0.5
