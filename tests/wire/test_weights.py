"""Weight flow over real sockets: learner `WeightPublisher` -> `WeightSubscriber` ->
`PolicyServer`, swaps only between chunks, late joiners and reconnects get the latest."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from robotrl.core.errors import WireError
from robotrl.core.policy import ActionChunk, PolicyMetadata, PolicyObservation
from robotrl.inference.delayed import DelaySpec, ReplyHold
from robotrl.inference.server import PolicyServer, ServerConfig
from robotrl.wire.client import ClientSocket
from robotrl.wire.messages import ChunkReply, ObservationRequest
from robotrl.wire.weights import WeightPublisher, WeightSubscriber, weight_endpoints

H = 6
WAIT_S = 10.0  # generous bound for things that happen in milliseconds; never asserted on


def weights(value: float) -> bytes:
    return st_save({"w": np.array([value], np.float32)})


class ValuePolicy:
    """Each row is [the weight value when the row was made, the slow latent's value]; rows
    are made 1 ms apart, so a swap inside a chunk would show as two values in one chunk."""

    def __init__(self, slow: bool = False) -> None:
        self.value = 0.0
        self.loads = 0
        if slow:
            self.encode_slow = lambda obs: self.value

    @property
    def metadata(self) -> PolicyMetadata:
        return PolicyMetadata("value", H, 2, 30.0, 2)

    def predict_chunk(self, obs: PolicyObservation, latent=None, latent_age_ticks: int = 0) -> ActionChunk:
        rows = []
        for _ in range(H):
            rows.append([self.value, self.value if latent is None else latent])
            time.sleep(0.001)
        return ActionChunk(np.array(rows), obs.tick + obs.delay_ticks)

    def load_weights(self, data: bytes) -> None:
        self.value = float(st_load(data)["w"][0])
        self.loads += 1

    def reset(self) -> None:
        pass


def publisher_on_adjacent_ports(curve=None) -> WeightPublisher:
    """A publisher with PUB on a free port P and the latest-weights socket on P + 1."""
    for _ in range(20):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        try:
            return WeightPublisher(f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port + 1}", curve=curve)
        except WireError:
            continue
    raise RuntimeError("no two adjacent free ports")


def wait_until(condition) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return False


def request(request_id: int, tick: int) -> ObservationRequest:
    return ObservationRequest(
        robot_id="arm", request_id=request_id, tick=tick, state=np.zeros(2), in_flight=np.zeros((0, 2))
    )


def test_weight_endpoints_use_port_and_port_plus_one():
    assert weight_endpoints("tcp://*:5561") == ("tcp://*:5561", "tcp://*:5562")
    assert weight_endpoints("tcp://learner.local:7000") == ("tcp://learner.local:7000", "tcp://learner.local:7001")
    for bad in ("ipc:///tmp/w", "tcp://host", "learner:5561"):
        with pytest.raises(ValueError, match="tcp://host:port"):
            weight_endpoints(bad)


def test_versions_must_increase():
    with WeightPublisher("tcp://127.0.0.1:*", "tcp://127.0.0.1:*") as pub:
        pub.publish(3, weights(3))
        with pytest.raises(ValueError, match="not newer"):
            pub.publish(3, weights(3))
        assert pub.latest_version == 3 and set(pub.published_at_ns) == {3}


@pytest.mark.parametrize("slow", [False, True])
def test_published_weights_swap_between_chunks_only(slow):
    """Versions 1..8 published while a robot keeps asking: every chunk is made by one
    version (all rows and the slow latent carry the same value, equal to the version it
    was stamped with), the versions in replies never go back, and the last one arrives."""
    policy = ValuePolicy(slow=slow)
    with publisher_on_adjacent_ports() as pub:
        config = ServerConfig(
            endpoint="tcp://127.0.0.1:*", warmup_calls=1, weights_from=pub.pub_endpoint, slow_rate_hz=200.0
        )
        with PolicyServer(policy, config) as server, ClientSocket(server.endpoint, robot_id="arm") as client:
            client.connect(timeout_s=5)
            assert wait_until(lambda: server.subscriber is not None)
            replies: list[ChunkReply] = []
            next_version = 1
            for i in range(200):
                if i % 10 == 5 and next_version <= 8:
                    pub.publish(next_version, weights(next_version))
                    next_version += 1
                replies.append(client.request(request(i, 10 * i), 5))
                if next_version > 8 and replies[-1].version == 8:
                    break
    versions = [r.version for r in replies]
    assert versions[0] == 0 and versions[-1] == 8
    assert all(a <= b for a, b in zip(versions, versions[1:]))
    for reply in replies:
        np.testing.assert_array_equal(reply.actions, np.full((H, 2), float(reply.version)))
    assert sorted(server.first_chunk_ns) == sorted(set(versions))
    assert all(server.first_chunk_ns[v] >= pub.published_at_ns[v] for v in set(versions) - {0})


def test_a_server_holding_its_replies_takes_new_weights_and_keeps_holding():
    """`serve --delay-ticks 6 --weights-from ...`: a robot rehearsing a slower model while
    a learner publishes. Version 1 reaches the robot; every reply, before and after the
    swap, comes (6 - 1/2) ticks at 30 Hz after its request, made by the version it says."""
    policy = ValuePolicy()
    with publisher_on_adjacent_ports() as pub:
        config = ServerConfig(endpoint="tcp://127.0.0.1:*", warmup_calls=0, weights_from=pub.pub_endpoint)
        hold = ReplyHold(DelaySpec(6, 6), dt_s=1 / 30, seed=0)
        with PolicyServer(policy, config, hold=hold) as server, ClientSocket(server.endpoint, robot_id="arm") as client:
            client.connect(timeout_s=5)
            assert wait_until(lambda: server.subscriber is not None)
            replies, round_trips = [], []
            for i in range(40):
                if i == 1:
                    pub.publish(1, weights(1))
                start = time.perf_counter()
                replies.append(client.request(request(i, 10 * i), 5))
                round_trips.append(time.perf_counter() - start)
                if replies[-1].version == 1:
                    break
    assert replies[0].version == 0 and replies[-1].version == 1 and policy.loads == 1
    for reply in replies:
        np.testing.assert_array_equal(reply.actions, np.full((H, 2), float(reply.version)))
    assert min(round_trips) > 5.5 / 30 - 0.001, round_trips


def test_late_joiner_gets_the_latest_on_request():
    got = []
    with WeightPublisher("tcp://127.0.0.1:*", "tcp://127.0.0.1:*") as pub:
        pub.publish(1, weights(1))
        pub.publish(4, weights(4))
        with WeightSubscriber(pub.pub_endpoint, pub.latest_endpoint, lambda v, b: got.append((v, b))) as sub:
            assert wait_until(lambda: sub.version == 4)
        assert got == [(4, weights(4))] and pub.requests_answered == 1
        seen = []
        with WeightSubscriber(
            pub.pub_endpoint, pub.latest_endpoint, lambda v, b: seen.append(v), newer_than=4, refresh_s=0.05
        ) as sub:
            time.sleep(0.1)
            pub.publish(5, weights(5))
            assert wait_until(lambda: sub.version == 5)
        assert seen == [5]  # 4 was not newer; 5 came by PUB or by the refresh request


def test_subscriber_gets_the_latest_after_the_learner_restarts():
    got = []
    first = publisher_on_adjacent_ports()
    pub_ep, latest_ep = first.pub_endpoint, first.latest_endpoint
    first.publish(1, weights(1))
    with WeightSubscriber(pub_ep, latest_ep, lambda v, b: got.append(v)) as sub:
        assert wait_until(lambda: sub.version == 1 and sub.learner_connected)
        first.close()  # the learner dies: heartbeats go unanswered ...
        t0 = time.monotonic()
        assert wait_until(lambda: not sub.learner_connected)
        noticed_s = time.monotonic() - t0
        with WeightPublisher(pub_ep, latest_ep) as second:  # ... and comes back with newer weights
            second.publish(7, weights(7))  # nobody is subscribed yet: only a request finds it
            assert wait_until(lambda: sub.version == 7)
    assert got == [1, 7] and noticed_s < 1.0


def test_a_learner_of_another_protocol_version_is_refused_with_one_line(caplog):
    """The latest-weights connection says hello: an old learner's answer stops the subscriber."""
    import zmq

    from robotrl.wire import codec
    from robotrl.wire.messages import HelloReply

    ctx = zmq.Context.instance()
    old_learner = ctx.socket(zmq.ROUTER)
    old_learner.setsockopt(zmq.LINGER, 0)
    port = old_learner.bind_to_random_port("tcp://127.0.0.1")
    with WeightSubscriber("tcp://127.0.0.1:1", f"tcp://127.0.0.1:{port}", lambda v, b: None) as sub:
        assert old_learner.poll(5000)
        identity, *_ = old_learner.recv_multipart()  # the hello
        old_learner.send_multipart([identity, *codec.encode(HelloReply(ok=True, protocol_version=1))])
        assert wait_until(lambda: sub.failure != "")
    old_learner.close()
    assert "this side speaks robotrl wire protocol 3, the peer speaks 1" in sub.failure
    assert sub.handed_over == [] and not sub.learner_connected
    assert [r.levelname for r in caplog.records if "refused" in r.getMessage()] == ["ERROR"]


def test_dead_learner_never_hangs_the_subscriber():
    with WeightSubscriber("tcp://127.0.0.1:1", "tcp://127.0.0.1:2", lambda v, b: None) as sub:
        time.sleep(0.3)  # several unanswered requests, each given up
    assert sub._thread is None and sub.handed_over == []


def test_server_refuses_weights_for_a_policy_that_cannot_load_them():
    class Fixed:
        metadata = PolicyMetadata("fixed", H, 2, 30.0, 2)

    with pytest.raises(ValueError, match="cannot load new weights"):
        PolicyServer(Fixed(), ServerConfig(weights_from="tcp://127.0.0.1:5561")).start()
    with pytest.raises(ValueError, match="tcp://host:port"):
        PolicyServer(ValuePolicy(), ServerConfig(weights_from="localhost")).start()


def test_encrypted_weights_reach_only_allowed_servers(curve_folders):
    from robotrl.wire.keys import client_keys, server_keys

    learner, allowed, stranger = curve_folders
    publisher = publisher_on_adjacent_ports(curve=server_keys(learner))
    got: dict[str, list[int]] = {"allowed": [], "stranger": []}
    subscribers = [
        WeightSubscriber(
            publisher.pub_endpoint,
            publisher.latest_endpoint,
            lambda v, data, who=who: got[who].append(v),
            curve=client_keys(folder),
            refresh_s=0.3,
        )
        for who, folder in (("allowed", allowed), ("stranger", stranger))
    ]
    try:
        publisher.publish(1, weights(1.0))
        for sub in subscribers:
            sub.start()
        assert wait_until(lambda: got["allowed"] == [1])  # the latest, on request
        publisher.publish(2, weights(2.0))
        assert wait_until(lambda: got["allowed"] == [1, 2])
        time.sleep(1.0)  # the stranger kept asking meanwhile
    finally:
        for sub in subscribers:
            sub.stop()
        publisher.close()
    assert got["stranger"] == []
