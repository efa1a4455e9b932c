"""`robotrl bench hostile`: one well-behaved robot's chunk latency, alone and while hostile
peers flood the same `PolicyServer` (loopback, real sockets).

The hostile peers send, round robin: random bytes, truncated and bit-flipped requests,
arrays whose header claims a huge or a "negative" (2**64 - 1) shape, a disallowed dtype,
a hello of another protocol version, multipart messages with missing or extra frames,
requests that decode but do not fit the policy (delay -1, wrong `in_flight` shape, NaN
state), requests in the well-behaved robot's name, and one 50 MB frame (the server's
`MAXMSGSIZE` disconnects that peer, which then reconnects). Reported: the robot's round
trip p50 / p99 alone and under load, replies it got that were not its own, server threads
alive, errors counted by kind, and the server's RSS growth (the server runs in this
process, so RSS is this process's).
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from itertools import cycle
from typing import Any

import numpy as np
import zmq

from robotrl.core.policy import ActionChunk, PolicyMetadata, PolicyObservation
from robotrl.inference.server import PolicyServer, ServerConfig
from robotrl.wire import codec
from robotrl.wire.client import ClientSocket
from robotrl.wire.messages import PROTOCOL_VERSION, ChunkReply, Hello, ObservationRequest

H, J = 16, 6
BIG_FRAME_BYTES = 50 * 1024 * 1024
TARGET_P99_RATIO = 2.0
TARGET_RSS_GROWTH_MB = 50.0


class HoldPolicy:
    """H rows of the forwarded state: the cheapest real answer (model time ~0)."""

    metadata = PolicyMetadata("hold", H, J, 30.0, J)

    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
        return ActionChunk(np.repeat(obs.state_rad[None], H, axis=0), obs.tick + obs.delay_ticks)

    def reset(self) -> None:
        pass


def observation(robot_id: str, request_id: int, **fields) -> ObservationRequest:
    values = {"tick": request_id, "state": np.full(J, 0.1), "in_flight": np.zeros((0, J)), **fields}
    return ObservationRequest(robot_id=robot_id, request_id=request_id, **values)


def hostile_frames(rng: np.random.Generator) -> list[Callable[[], list[bytes]]]:
    """Makers of one hostile multipart message each (the frames a raw DEALER sends)."""
    valid = bytes(codec.encode(observation("evil", 1))[0])
    with_image = codec.encode(observation("evil", 6, images={"front": np.zeros((224, 224, 3), np.uint8)}))
    shape = (J).to_bytes(8, "little")  # the state's shape field inside the array header

    def patched(new: bytes) -> list[bytes]:
        return [valid.replace(shape, new, 1)]

    def flipped() -> list[bytes]:
        data = bytearray(valid)
        data[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
        return [bytes(data)]

    return [
        lambda: [rng.bytes(int(rng.integers(1, 2000)))],
        lambda: [valid[: int(rng.integers(1, len(valid)))]],
        flipped,
        lambda: patched((2**40).to_bytes(8, "little")),
        lambda: patched((2**64 - 1).to_bytes(8, "little")),
        lambda: [valid.replace(b"<f8", b"|O8", 1)],
        lambda: [bytes(codec.encode(Hello(protocol_version=PROTOCOL_VERSION + 7, robot_id="evil"))[0])],
        lambda: [valid, b"extra", b"frames"],
        lambda: [bytes(with_image[0])],  # its image frame is missing
        lambda: [bytes(codec.encode(observation("evil", 2, delay_ticks=-1))[0])],
        lambda: [bytes(codec.encode(observation("evil", 3, in_flight=np.zeros((3, 2))))[0])],
        lambda: [bytes(codec.encode(observation("evil", 4, state=np.full(J, np.nan)))[0])],
        lambda: [bytes(codec.encode(observation("good", 5))[0])],
    ]


def flood(endpoint: str, frames: int, sent: Any, seed: int = 0) -> None:
    """Send `frames` hostile messages from 4 raw DEALER peers (each says hello as "evil"
    first); one of them is the 50 MB frame. Runs in its own process (so the attackers do
    not share the server's interpreter); the count sent goes to `sent.value`."""
    rng = np.random.default_rng(seed)
    makers = cycle(hostile_frames(rng))
    ctx = zmq.Context.instance()
    hello = bytes(codec.encode(Hello(protocol_version=PROTOCOL_VERSION, robot_id="evil"))[0])

    def peer() -> zmq.Socket:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        sock.connect(endpoint)
        sock.send(hello)
        return sock

    peers = [peer() for _ in range(4)]
    try:
        for i in range(frames):
            parts = [b"\0" * BIG_FRAME_BYTES] if i == frames // 2 else next(makers)()
            sock = peers[i % len(peers)]
            if parts:
                sock.send_multipart(parts, copy=True)  # no zero-copy buffer outlives a closed peer
            sent.value += 1
            if i == frames // 2:  # that peer is disconnected now: a fresh one takes its place
                sock.close(linger=0)
                sock = peers[i % len(peers)] = peer()
            while sock.poll(0):  # drain its answers (errors), as a real peer's socket would
                sock.recv_multipart()
    finally:
        for sock in peers:
            sock.close(linger=0)


def round_trips(client: ClientSocket, n: int, first_id: int, while_alive=None) -> tuple[list[float], int]:
    """(round trips in ms, replies that were not the answer to the request sent): `n`, and
    more while the process `while_alive` runs."""
    times, wrong, k = [], 0, first_id
    while len(times) < n or (while_alive is not None and while_alive.is_alive()):
        start = time.perf_counter()
        reply = client.request(observation("good", k), timeout_s=15.0)
        times.append((time.perf_counter() - start) * 1e3)
        if not isinstance(reply, ChunkReply) or reply.request_id != k or reply.start_tick != k:
            wrong += 1
        k += 1
    return times, wrong


def run(frames: int = 10_000, requests: int = 1000) -> dict:
    """The benchmark: `requests` round trips alone, then round trips for as long as a
    separate process sends `frames` hostile frames (and at least `requests`)."""
    spawn = multiprocessing.get_context("spawn")
    sent = spawn.Value("i", 0)
    rss_start = _rss_mb()
    with PolicyServer(HoldPolicy(), ServerConfig(endpoint="tcp://127.0.0.1:*", warmup_calls=1)) as server:
        with ClientSocket(server.endpoint, robot_id="good") as client:
            client.connect(timeout_s=5.0)
            alone, wrong_alone = round_trips(client, requests, 1)
            attacker = spawn.Process(target=flood, args=(server.endpoint, frames, sent), daemon=True)
            attacker.start()
            while sent.value == 0 and attacker.is_alive():  # the attack has begun
                time.sleep(0.01)
            loaded, wrong_loaded = round_trips(client, requests, 1_000_000, while_alive=attacker)
            attacker.join(timeout=120.0)
            time.sleep(0.2)  # the last hostile frames are taken in
            health = server.health()
    p99_alone, p99_loaded = np.percentile(alone, 99), np.percentile(loaded, 99)
    results = {
        "frames": frames,
        "requests": requests,
        "hostile_frames_sent": int(sent.value),
        "loaded_round_trips": len(loaded),
        "alone_p50_ms": float(np.percentile(alone, 50)),
        "alone_p99_ms": float(p99_alone),
        "loaded_p50_ms": float(np.percentile(loaded, 50)),
        "loaded_p99_ms": float(p99_loaded),
        "p99_ratio": float(p99_loaded / p99_alone),
        "wrong_replies": wrong_alone + wrong_loaded,
        "dead_threads": sum(not alive for alive in health["threads_alive"].values()),
        "errors": health["errors"],
        "refused": health["refused"],
        "quarantined_drops": health["quarantined_drops"],
        "rss_growth_mb": _rss_mb() - rss_start,
    }
    results["targets"] = {
        "0 dead threads": results["dead_threads"] == 0,
        "0 replies to the wrong robot": results["wrong_replies"] == 0,
        f"loaded p99 <= {TARGET_P99_RATIO:g}x alone": results["p99_ratio"] <= TARGET_P99_RATIO,
        f"RSS growth < {TARGET_RSS_GROWTH_MB:g} MB": results["rss_growth_mb"] < TARGET_RSS_GROWTH_MB,
    }
    return results


def _rss_mb() -> float:
    """This process's resident memory now, MB (Linux /proc)."""
    with open("/proc/self/status") as status:
        kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return kb / 1024.0
