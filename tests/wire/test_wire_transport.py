"""ZMQ transport on real loopback sockets: routing, timeouts, heartbeats, reconnects,
version refusal and CURVE allow-lists. Every wait is bounded."""

from __future__ import annotations

import shutil
import threading
import time

import numpy as np
import pytest
import zmq

from robotrl.cli import main
from robotrl.core.errors import PeerLost, ProtocolError, TransportTimeout, VersionMismatch
from robotrl.wire import codec
from robotrl.wire.client import ClientSocket
from robotrl.wire.keys import ClientKeys, ServerKeys, load_keypair, load_public_key, write_keypair
from robotrl.wire.messages import PROTOCOL_VERSION, ChunkReply, ErrorReply, Hello, HelloReply, ObservationRequest
from robotrl.wire.transport import ServerSocket

ANY_PORT = "tcp://127.0.0.1:*"


class EchoServer:
    """A `ServerSocket` in a thread; replies to each request with a chunk made from it
    (start_tick = tick, actions = request_id everywhere), or not at all (`mute`)."""

    def __init__(self, endpoint: str = ANY_PORT, mute: bool = False, **kwargs) -> None:
        self.sock = ServerSocket(endpoint, **kwargs)
        self.endpoint, self.mute = self.sock.endpoint, mute
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                identity, msg = self.sock.recv(0.02)
            except (TransportTimeout, ProtocolError):
                continue
            if not self.mute:
                self.sock.send(
                    identity,
                    ChunkReply(
                        request_id=msg.request_id,
                        start_tick=msg.tick,
                        version=1,
                        actions=np.full((4, 6), msg.request_id, np.float32),
                    ),
                )

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


@pytest.fixture
def server():
    srv = EchoServer()
    yield srv
    srv.close()


def request(request_id: int, tick: int = 0, robot_id: str = "arm") -> ObservationRequest:
    return ObservationRequest(
        robot_id=robot_id,
        request_id=request_id,
        tick=tick,
        state=np.zeros(6, np.float32),
        in_flight=np.zeros((0, 6), np.float32),
    )


def test_concurrent_clients_get_their_own_replies(server):
    errors: list[str] = []

    def robot(k: int) -> None:
        with ClientSocket(server.endpoint, robot_id=f"arm{k}") as client:
            client.connect(timeout_s=2.0)
            for i in range(40):
                rid = 1000 * k + i
                reply = client.request(request(rid, tick=k, robot_id=f"arm{k}"), timeout_s=2.0)
                if reply.start_tick != k or reply.request_id != rid or reply.actions[0, 0] != rid:
                    errors.append(f"robot {k} got {reply}")

    threads = [threading.Thread(target=robot, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads) and errors == []
    assert {h.robot_id for h in server.sock.peers.values()} == {"arm0", "arm1", "arm2", "arm3"}


def test_a_peer_sending_garbage_is_quarantined_and_the_others_are_served(monkeypatch):
    from robotrl.wire import transport

    monkeypatch.setattr(transport, "QUARANTINE_S", 0.5)
    srv = EchoServer()
    try:
        with ClientSocket(srv.endpoint, robot_id="arm") as good, ClientSocket(srv.endpoint, robot_id="bad") as bad:
            good.connect(timeout_s=2.0)
            bad.connect(timeout_s=2.0)
            raw = bad._open_sock()  # the bad robot's own connection, now sending garbage
            for _ in range(transport.QUARANTINE_STRIKES):
                raw.send(b"\x00garbage")
            answers = [bad.poll(1.0) for _ in range(transport.QUARANTINE_STRIKES)]  # an error for each
            for _ in range(30):
                raw.send(b"\x00garbage")  # quarantined: dropped unread, unanswered
            assert good.request(request(1), timeout_s=2.0).request_id == 1  # the others are served meanwhile
            assert bad.poll(0.3) is None
            time.sleep(0.5)  # the quarantine ends
            raw.send_multipart(codec.encode(request(2, robot_id="bad")), zmq.NOBLOCK)
            after = bad.poll(2.0)
    finally:
        srv.close()
    assert all(isinstance(a, ErrorReply) and a.code == "protocol" for a in answers)
    assert srv.sock.quarantined_drops >= 30 and isinstance(
        after, ChunkReply
    )  # (30 + any heartbeat) and after.request_id == 2


def test_a_client_never_buffers_a_reply_over_its_size_limit():
    ctx = zmq.Context.instance()
    server = ctx.socket(zmq.ROUTER)
    server.setsockopt(zmq.LINGER, 0)
    endpoint = f"tcp://127.0.0.1:{server.bind_to_random_port('tcp://127.0.0.1')}"
    big = ChunkReply(request_id=1, start_tick=0, version=0, actions=np.zeros((2 * 1024 * 1024 // 4, 1), np.float32))
    small = ChunkReply(request_id=2, start_tick=0, version=0, actions=np.zeros((4, 1), np.float32))
    try:
        with ClientSocket(endpoint, robot_id="arm", max_message_bytes=1024 * 1024, heartbeat_s=5.0) as client:
            client._open()
            assert server.poll(5000)
            identity, _ = server.recv_multipart()  # the hello
            server.send_multipart([identity, *codec.encode(HelloReply(ok=True, protocol_version=PROTOCOL_VERSION))])
            assert client.poll(2.0) is None and client.ready
            server.send_multipart([identity, *codec.encode(big)])  # 2 MB: the client drops the connection
            assert client.poll(0.5) is None
            with ClientSocket(endpoint, robot_id="arm2", heartbeat_s=5.0) as unlimited:  # the default is 16 MiB
                unlimited._open()
                assert server.poll(5000)
                other, _ = server.recv_multipart()
                server.send_multipart([other, *codec.encode(big)])
                server.send_multipart([other, *codec.encode(small)])
                got = [unlimited.poll(2.0), unlimited.poll(2.0)]
    finally:
        server.close(linger=0)
    assert [m.request_id for m in got] == [1, 2]


def test_timeouts_fire_within_the_deadline():
    srv = EchoServer(mute=True)
    try:
        with ClientSocket(srv.endpoint, robot_id="arm") as client:
            client.connect(timeout_s=2.0)
            t0 = time.monotonic()
            with pytest.raises(TransportTimeout):
                client.request(request(1), timeout_s=0.2)
            assert 0.2 <= time.monotonic() - t0 < 0.4
    finally:
        srv.close()
    with ServerSocket(ANY_PORT) as lonely:
        t0 = time.monotonic()
        with pytest.raises(TransportTimeout):
            lonely.recv(timeout_s=0.1)
        assert 0.1 <= time.monotonic() - t0 < 0.3


def test_peer_lost_then_reconnect_when_the_server_returns():
    srv = EchoServer()
    endpoint = srv.endpoint
    client = ClientSocket(endpoint, robot_id="arm", heartbeat_s=0.1, missed_heartbeats=2, reconnect_ivl_ms=20)
    try:
        client.connect(timeout_s=2.0)
        assert client.poll(0.35) is None  # idle: heartbeats answered, no PeerLost
        srv.close()
        t0 = time.monotonic()
        with pytest.raises(PeerLost):
            while time.monotonic() - t0 < 2.0:
                client.poll(0.05)
        assert time.monotonic() - t0 <= (2 + 1) * 0.1 + 0.15
        srv = EchoServer(endpoint)
        t0 = time.monotonic()
        while not client.ready and time.monotonic() - t0 < 3.0:
            try:
                client.poll(0.05)
            except PeerLost:
                pass
        assert client.ready
        assert client.request(request(5, tick=9), timeout_s=2.0).start_tick == 9
    finally:
        client.close()
        srv.close()


def test_quick_server_restart_is_healed_by_a_new_hello():
    srv = EchoServer()
    endpoint = srv.endpoint
    client = ClientSocket(endpoint, robot_id="arm", heartbeat_s=5.0, reconnect_ivl_ms=20)
    try:
        client.connect(timeout_s=2.0)
        srv.close()
        srv = EchoServer(endpoint)  # restarted before any heartbeat noticed
        reply = client.request(request(3), timeout_s=2.0)
        assert isinstance(reply, ErrorReply) and reply.code == "hello_required"
        client.connect(timeout_s=2.0)
        assert client.request(request(4), timeout_s=2.0).request_id == 4
    finally:
        client.close()
        srv.close()


def raw_socket(kind: int, endpoint: str, bind: bool = False) -> zmq.Socket:
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 2000)
    if bind:
        sock.bind(endpoint)
    else:
        sock.connect(endpoint)
    return sock


def test_version_mismatch_is_refused_on_both_sides():
    versions = (str(PROTOCOL_VERSION), str(PROTOCOL_VERSION + 1))
    # server side: a client of another version says hello
    with ServerSocket(ANY_PORT) as srv:
        dealer = raw_socket(zmq.DEALER, srv.endpoint)
        dealer.send_multipart(codec.encode(Hello(protocol_version=PROTOCOL_VERSION + 1)))
        with pytest.raises(VersionMismatch) as info:
            srv.recv(timeout_s=2.0)
        assert all(v in str(info.value) for v in versions)
        reply = codec.decode(dealer.recv_multipart())
        assert isinstance(reply, HelloReply) and not reply.ok and all(v in reply.error for v in versions)
        dealer.send(b"\xc1garbage")
        with pytest.raises(ProtocolError, match="invalid message") as info:
            srv.recv(timeout_s=2.0)
        assert info.value.identity is not None
        assert codec.decode(dealer.recv_multipart()).code == "protocol"
        dealer.close()
    # client side: a server of another version answers
    router = raw_socket(zmq.ROUTER, "tcp://127.0.0.1:*", bind=True)
    endpoint = router.getsockopt(zmq.LAST_ENDPOINT).decode()
    with ClientSocket(endpoint, robot_id="arm") as client:
        threading.Timer(
            0.05,
            lambda: router.send_multipart(
                [
                    router.recv_multipart()[0],
                    *codec.encode(HelloReply(ok=False, protocol_version=PROTOCOL_VERSION + 1, error="old client")),
                ]
            ),
        ).start()
        with pytest.raises(VersionMismatch) as info:
            client.connect(timeout_s=2.0)
        assert all(v in str(info.value) for v in versions)
    router.close()


@pytest.fixture
def curve_keys(tmp_path):
    """Server keys, allowed clients `robot1` and `robot2`, a client `intruder` not on the list."""
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    allowed.mkdir()
    write_keypair(keys, "server")
    write_keypair(keys, "intruder")
    shutil.copy(write_keypair(keys, "robot1")[0], allowed)
    shutil.copy(write_keypair(keys, "robot2")[0], allowed)
    return keys, allowed


@pytest.mark.skipif(not zmq.has("curve"), reason="libzmq built without CURVE")
def test_curve_allow_list(curve_keys):
    keys, allowed = curve_keys
    srv = EchoServer(curve=ServerKeys(keys / "server.key_secret", allowed))
    try:

        def client(name: str) -> ClientSocket:
            curve = ClientKeys(keys / f"{name}.key_secret", keys / "server.key")
            return ClientSocket(srv.endpoint, robot_id="arm", curve=curve)

        with client("robot1") as friend:
            friend.connect(timeout_s=2.0)
            assert friend.request(request(1, tick=4), timeout_s=2.0).start_tick == 4
        with client("intruder") as intruder, pytest.raises(TransportTimeout, match="allowed-clients"):
            intruder.connect(timeout_s=0.5)
        with ClientSocket(srv.endpoint, robot_id="arm") as plain, pytest.raises(TransportTimeout):
            plain.connect(timeout_s=0.3)
    finally:
        srv.close()


@pytest.mark.skipif(not zmq.has("curve"), reason="libzmq built without CURVE")
def test_under_curve_a_robot_id_is_bound_to_the_key_that_first_said_hello_with_it(curve_keys):
    keys, allowed = curve_keys
    srv = EchoServer(curve=ServerKeys(keys / "server.key_secret", allowed))

    def client(name: str) -> ClientSocket:
        return ClientSocket(
            srv.endpoint, robot_id="arm", curve=ClientKeys(keys / f"{name}.key_secret", keys / "server.key")
        )

    try:
        with client("robot1") as owner, client("robot2") as other, client("robot1") as reconnected:
            owner.connect(timeout_s=2.0)
            with pytest.raises(ProtocolError, match="'arm' belongs to another client key"):
                other.connect(timeout_s=2.0)  # an allowed key, but not the one that owns 'arm'
            reconnected.connect(timeout_s=2.0)  # the same key on a new connection takes 'arm' over
            assert reconnected.request(request(2, tick=5), timeout_s=2.0).start_tick == 5
            stale = owner.request(request(3), timeout_s=2.0)
    finally:
        srv.close()
    assert isinstance(stale, ErrorReply) and stale.code == "wrong_robot_id" and "newer connection" in stale.message


def test_keys_cli_writes_loadable_keys(tmp_path, capsys):
    assert main(["keys", "--out", str(tmp_path), "--name", "robot1"]) == 0
    public, secret = load_keypair(tmp_path / "robot1.key_secret")
    assert load_public_key(tmp_path / "robot1.key") == public and len(secret) == 40
    assert (tmp_path / "robot1.key_secret").stat().st_mode & 0o077 == 0
    assert main(["keys", "--out", str(tmp_path), "--name", "robot1"]) == 2  # never overwrite silently
    assert "--force" in capsys.readouterr().err
    assert main(["keys", "--out", str(tmp_path), "--name", "robot1", "--force"]) == 0
    assert load_keypair(tmp_path / "robot1.key_secret")[0] != public


def test_transport_bench_row_adds_up():
    from robotrl.bench.transport import measure_robotrl

    row = measure_robotrl(model_s=0.0, jpeg=False, requests=20)
    assert row["requests"] == 20 and row["bytes_per_request"] > 2 * 224 * 224 * 3
    parts = row["client_encode_p50_ms"] + row["client_decode_p50_ms"] + row["network_server_p50_ms"]
    assert 0 < row["overhead_p50_ms"] <= row["round_trip_p99_ms"] and parts > 0
