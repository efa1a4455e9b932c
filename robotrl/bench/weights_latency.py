"""`robotrl bench learner`: publish -> first chunk from the new weight version.

A `Learner` (SAC, state inputs, batch 256) publishes every `publish_every` updates (about
`PUBLISH_GAP_S` apart) through a real `WeightPublisher`; a real `PolicyServer` on
loopback serves the SAC actor and takes the weights (`weights_from`); one robot asks for
chunks in a closed loop. Per version v: the learner calls `publish` (its bytes already
made) -> received by the server's subscriber -> swapped in (between batches) -> the robot
holds the first chunk stamped v. Clocks: `time.monotonic_ns()` of this one process.
"""

from __future__ import annotations

import math
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

from robotrl.bench.learner_loop import PUBLISH_GAP_S, _sac, bench_spec, filled_buffer
from robotrl.core.errors import TransportTimeout
from robotrl.core.policy import PolicyMetadata
from robotrl.inference.server import PolicyServer, ServerConfig
from robotrl.learn.learner import Learner, LearnerConfig
from robotrl.wire.client import ClientSocket
from robotrl.wire.messages import ChunkReply, ObservationRequest


class _Stamped:
    """A publisher that notes when each `publish` was called (`called_at_ns`, monotonic ns)
    before handing it on (`WeightPublisher.published_at_ns` is stamped after its send)."""

    def __init__(self, publisher) -> None:
        self.publisher = publisher
        self.called_at_ns: dict[int, int] = {}

    def publish(self, version: int, safetensors_bytes: bytes) -> None:
        self.called_at_ns[version] = time.monotonic_ns()
        self.publisher.publish(version, safetensors_bytes)


class _Robot:
    """A thread asking for chunks in a closed loop; `received`: (monotonic ns at receipt,
    version, round trip ms) per chunk."""

    def __init__(self, endpoint: str, meta: PolicyMetadata) -> None:
        self.client = ClientSocket(endpoint, robot_id="bench")
        self.meta = meta
        self.received: list[tuple[int, int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-robot", daemon=True)

    def start(self) -> None:
        self.client.connect(timeout_s=10.0)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        self.client.close()

    def _run(self) -> None:
        rng, k = np.random.default_rng(0), 0
        while not self._stop.is_set():
            k += 1
            request = ObservationRequest(
                robot_id="bench",
                request_id=k,
                tick=k,
                state=rng.normal(0.0, 0.3, self.meta.state_dim),
                in_flight=np.zeros((0, self.meta.action_dim)),
                env_state=np.zeros(self.meta.env_state_dim) if self.meta.env_state_dim else None,
            )
            sent = time.perf_counter()
            try:
                reply = self.client.request(request, 2.0)
            except TransportTimeout:
                continue
            if isinstance(reply, ChunkReply):
                self.received.append((time.monotonic_ns(), reply.version, (time.perf_counter() - sent) * 1e3))


def run(device: torch.device, updates_per_s: float, publishes: int = 10) -> dict:
    """The publish -> first chunk figures of `publishes` versions; `updates_per_s` (the
    bare rate) sets `publish_every` so that publishes are about PUBLISH_GAP_S apart."""
    from robotrl.learn.launch import free_port_pair
    from robotrl.wire.weights import WeightPublisher

    spec = bench_spec(None, 0)
    every = max(1, math.ceil(PUBLISH_GAP_S * updates_per_s))
    with tempfile.TemporaryDirectory(prefix="robotrl-bench-weights-") as tmp:
        buffer = filled_buffer(Path(tmp) / "buffer", spec)
        algo = _sac(spec, 256, device)
        port = free_port_pair()
        publisher = WeightPublisher(f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port + 1}")
        config = ServerConfig(endpoint="tcp://127.0.0.1:*", weights_from=f"tcp://127.0.0.1:{port}")
        server = PolicyServer(algo.served_policy(), config, device=str(device))
        server.start()
        robot = _Robot(server.endpoint, server.policy.metadata)
        robot.start()
        cfg = LearnerConfig(
            out=Path(tmp) / "run",
            transitions_endpoint="tcp://127.0.0.1:*",
            min_transitions=1,
            publish_every=every,
            max_updates=every * publishes,
        )
        try:
            stamped = _Stamped(publisher)
            with Learner(algo, buffer, stamped, cfg, device=str(device)) as learner:
                learner.run()
            time.sleep(0.5)  # the last version's way to the robot
            assert server.subscriber is not None
            received = dict(server.subscriber.received_at_ns)
        finally:
            robot.stop()
            server.stop()
            publisher.close()
            buffer.close()
    return {"publish_every": every, **summary(stamped.called_at_ns, received, server, robot.received)}


def _ms(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if values else None


def summary(published: dict[int, int], received: dict[int, int], server: PolicyServer, chunks: list) -> dict:
    """Per-version latencies (ms, p50 / p99 / max over the versions whose own chunk
    reached the robot) and the serving thread's swap cost against a chunk's model time."""
    firsts: dict[int, int] = {}
    for at_ns, version, _ in chunks:
        firsts.setdefault(version, at_ns)
    versions = [v for v in sorted(published) if v > 0]  # version 0 is what the server started with
    served = [v for v in versions if v in firsts]
    to_chunk = [(firsts[v] - published[v]) / 1e6 for v in served]
    to_received = [(received[v] - published[v]) / 1e6 for v in served if v in received]
    to_swap = [(server.swapped_at_ns[v] - published[v]) / 1e6 for v in served if v in server.swapped_at_ns]
    trips = [trip for _, _, trip in chunks]
    return {
        "versions_published": len(versions),
        "versions_served": len(served),
        "publish_to_first_chunk_ms_p50": _ms(to_chunk, 50),
        "publish_to_first_chunk_ms_p99": _ms(to_chunk, 99),
        "publish_to_first_chunk_ms_max": _ms(to_chunk, 100),
        "publish_to_received_ms_p50": _ms(to_received, 50),
        "publish_to_swapped_ms_p50": _ms(to_swap, 50),
        "stage_ms_p50": _ms(list(server.stage_ms.values()), 50),
        "swap_ms_p50": _ms(list(server.swap_ms.values()), 50),
        "swap_ms_max": _ms(list(server.swap_ms.values()), 100),
        "model_ms_p50": round(server.stats.percentiles_ms("model").get("p50", 0.0), 2),
        "round_trip_ms_p50": _ms(trips, 50),
        "round_trip_ms_p99": _ms(trips, 99),
        "chunks": len(chunks),
    }
