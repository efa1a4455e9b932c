"""`robotrl bench serve`: chunks per second one `PolicyServer` delivers to 1, 4 and 8
robots (or `robot_counts`) on loopback (target: 8 robots get >= 4x the throughput of 1),
and each robot's round trip per chunk (request sent -> chunk received), p50 and p99.

Each simulated robot keeps one request in flight (closed loop, as the executor does) with
its state and camera images (random, made once per robot: the server caches nothing by
content); all robots are driven from one thread that polls their sockets, so the clients
cost little CPU next to the server.
"""

from __future__ import annotations

import time

import numpy as np

from robotrl.core.policy import ChunkPolicy
from robotrl.inference.server import PolicyServer, ServerConfig
from robotrl.wire.client import ClientSocket
from robotrl.wire.messages import ChunkReply, ObservationRequest


def _images(policy: ChunkPolicy, rng: np.random.Generator) -> dict[str, np.ndarray]:
    meta = policy.metadata
    size = meta.image_size_px
    return {cam: rng.integers(0, 255, (size, size, 3), dtype=np.uint8) for cam in meta.image_keys}


def _request(
    policy: ChunkPolicy, robot: int, request_id: int, rng: np.random.Generator, images: dict[str, np.ndarray]
) -> ObservationRequest:
    meta = policy.metadata
    return ObservationRequest(
        robot_id=f"robot{robot}",
        request_id=request_id,
        tick=request_id,
        state=rng.normal(0.0, 0.3, meta.state_dim),
        in_flight=np.zeros((0, meta.action_dim)),
        images=images,
        instruction="put the red cube in the bin",
        delay_ticks=2,
        env_state=rng.normal(0.0, 0.1, meta.env_state_dim) if meta.env_state_dim else None,
    )


def throughput(policy: ChunkPolicy, robots: int, seconds: float, batch_wait_ms: float = 2.0) -> dict:
    """Chunks per second delivered to `robots` closed-loop clients for `seconds`, and the
    round trips in milliseconds."""
    rng = np.random.default_rng(robots)
    with PolicyServer(policy, ServerConfig(endpoint="tcp://127.0.0.1:*", batch_wait_ms=batch_wait_ms)) as server:
        clients = [ClientSocket(server.endpoint, robot_id=f"robot{i}") for i in range(robots)]
        try:
            for c in clients:
                c.connect(timeout_s=10.0)
            next_id = [1] * robots
            sent = [0.0] * robots
            images = [_images(policy, rng) for _ in range(robots)]
            for i, c in enumerate(clients):
                c.send(_request(policy, i, next_id[i], rng, images[i]))
                sent[i] = time.perf_counter()
            round_trips_ms: list[float] = []
            start = time.perf_counter()
            while time.perf_counter() - start < seconds:
                for i, c in enumerate(clients):
                    reply = c.poll(0.0)
                    if isinstance(reply, ChunkReply):
                        round_trips_ms.append((time.perf_counter() - sent[i]) * 1000.0)
                        next_id[i] += 1
                        request = _request(policy, i, next_id[i], rng, images[i])
                        c.send(request)
                        sent[i] = time.perf_counter()
                time.sleep(0.0002)
            elapsed = time.perf_counter() - start
        finally:
            for c in clients:
                c.close()
        model = server.stats.percentiles_ms("model")
    trips = np.asarray(round_trips_ms) if round_trips_ms else np.zeros(1)
    return {
        "robots": robots,
        "chunks_per_s": len(round_trips_ms) / elapsed,
        "model_ms_p50": model.get("p50", 0.0),
        "round_trip_ms_p50": float(np.percentile(trips, 50)),
        "round_trip_ms_p99": float(np.percentile(trips, 99)),
    }


def run(policy: ChunkPolicy, seconds: float = 5.0, robot_counts: tuple[int, ...] = (1, 4, 8)) -> list[dict]:
    """One `throughput` row per robot count, with its speed-up over the first count."""
    rows = [throughput(policy, n, seconds) for n in robot_counts]
    base = rows[0]["chunks_per_s"]
    for row in rows:
        row["speedup_vs_1"] = row["chunks_per_s"] / base if base else 0.0
    return rows
