"""`robotrl bench transport`: what the wire adds to an inference round trip (docs/benchmarks.md).

On loopback, one robot sends state (6,) + two 224x224x3 uint8 camera images and gets a
(50, 6) float32 chunk back from a server thread that echoes a fixed chunk after a stub
model (0 ms, or a 5 ms sleep). For raw and JPEG (quality 90) images, after
`WARMUP` requests, `REQUESTS` round trips per repeat are split into client encode,
network + server (round trip minus client encode and decode), server decode, client
decode; transport overhead is the round trip minus the model time the server measured.

Side by side: lerobot 0.6.1's async-inference transport with the same payload, through
its own gRPC stubs (`AsyncInference.SendObservations` with the pickled `TimedObservation`
in 2 MB chunks, then `GetActions` returning a pickled list of `TimedAction`s holding torch
tensors). Pickle appears only in that baseline, which reproduces the incumbent; robotrl's
path never unpickles anything. Needs `grpcio` (lerobot's `async` extra); without it the
baseline is reported as skipped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np

from robotrl.core.errors import ProtocolError, TransportTimeout
from robotrl.wire.client import ClientSocket
from robotrl.wire.messages import ChunkReply, ObservationRequest
from robotrl.wire.transport import ServerSocket

REQUESTS, WARMUP = 2000, 100
MODEL_S = (0.0, 0.005)
JPEG_QUALITY = 90
IMAGE_HW = (224, 224)
CHUNK_SHAPE = (50, 6)
TIMEOUT_S = 5.0
JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")


def camera_image(seed: int) -> np.ndarray:
    """A camera-like uint8 (224, 224, 3) RGB frame: gradients, a disc, sensor noise
    (random noise alone would make JPEG look far worse than it is on real frames)."""
    h, w = IMAGE_HW
    y, x = np.mgrid[0:h, 0:w]
    disc = ((y - h / 2 - 10 * seed) ** 2 + (x - w / 3) ** 2 < (h / 5) ** 2) * 90.0
    noise = np.random.default_rng(seed).normal(0, 3, (h, w, 3))
    rgb = np.stack([x * 200 / w + 20, y * 180 / h + 30, 100 + disc], axis=-1) + noise
    return np.clip(rgb, 0, 255).astype(np.uint8)


def _request(request_id: int, images: dict[str, np.ndarray]) -> ObservationRequest:
    """A fresh request around the same camera frames (as lerobot's baseline gets them)."""
    return ObservationRequest(
        robot_id="bench",
        request_id=request_id,
        tick=request_id,
        state=np.linspace(-1, 1, 6, dtype=np.float32),
        in_flight=np.zeros((0, 6), np.float32),
        delay_ticks=3,
        images=images,
    )


def _echo(server: ServerSocket, model_s: float, stop: threading.Event) -> None:
    """Answer every request with a fixed chunk after `model_s` of stub model."""
    actions = np.linspace(0, 1, CHUNK_SHAPE[0] * CHUNK_SHAPE[1], dtype=np.float32).reshape(CHUNK_SHAPE)
    while not stop.is_set():
        try:
            identity, msg = server.recv(0.05)
        except (TransportTimeout, ProtocolError):
            continue
        assert isinstance(msg, ObservationRequest)  # the bench client sends nothing else past hello
        t0 = time.perf_counter_ns()
        if model_s:
            time.sleep(model_s)
        model_ns = time.perf_counter_ns() - t0
        server.send(
            identity,
            ChunkReply(
                request_id=msg.request_id,
                start_tick=msg.tick + msg.delay_ticks,
                actions=actions,
                version=0,
                timings_ns={
                    "queue": 0,
                    "model": model_ns,
                    "decode": server.last_decode_ns,
                    "total": server.last_decode_ns + model_ns,
                },
            ),
        )


def measure_robotrl(model_s: float, jpeg: bool, requests: int) -> dict:
    """Round trips through `ServerSocket` / `ClientSocket`, in ms per request."""
    stop = threading.Event()
    with ServerSocket("tcp://127.0.0.1:*") as server:
        thread = threading.Thread(target=_echo, args=(server, model_s, stop), daemon=True)
        thread.start()
        client = ClientSocket(server.endpoint, robot_id="bench", jpeg_quality=JPEG_QUALITY if jpeg else None)
        try:
            client.connect(TIMEOUT_S)
            samples = {k: [] for k in ("round_trip", "model", "client_encode", "client_decode", "server_decode")}
            images = {"front": camera_image(0), "wrist": camera_image(1)}
            for i in range(WARMUP + requests):
                req = _request(i, images)
                t0 = time.perf_counter_ns()
                reply = client.request(req, TIMEOUT_S)
                rt_ns = time.perf_counter_ns() - t0
                if i >= WARMUP:
                    if not isinstance(reply, ChunkReply):
                        raise RuntimeError(f"the echo server answered {type(reply).__name__}: {reply!r}")
                    for key, ns in (
                        ("round_trip", rt_ns),
                        ("model", reply.timings_ns["model"]),
                        ("client_encode", client.last_encode_ns),
                        ("client_decode", client.last_decode_ns),
                        ("server_decode", reply.timings_ns["decode"]),
                    ):
                        samples[key].append(ns / 1e6)
            bytes_sent = client.last_sent_bytes
        finally:
            client.close()
            stop.set()
            thread.join(timeout=2)
    s = {k: np.asarray(v) for k, v in samples.items()}
    return _summary(
        "robotrl zmq+msgpack",
        "jpeg q90" if jpeg else "raw",
        model_s,
        bytes_sent,
        s["round_trip"],
        s["model"],
        s["client_encode"],
        s["client_decode"],
        s["server_decode"],
    )


def _summary(
    transport: str,
    images: str,
    model_s: float,
    bytes_sent: int,
    rt: np.ndarray,
    model: np.ndarray,
    encode: np.ndarray | None = None,
    decode: np.ndarray | None = None,
    server_decode: np.ndarray | None = None,
) -> dict:
    """One table row: percentiles in ms (p50 for the parts of the split)."""
    overhead = rt - model
    row = {
        "transport": transport,
        "images": images,
        "model_ms": model_s * 1e3,
        "bytes_per_request": bytes_sent,
        "requests": len(rt),
    }
    for name, values in (("round_trip", rt), ("overhead", overhead)):
        for q in (50, 95, 99):
            row[f"{name}_p{q}_ms"] = float(np.percentile(values, q))
    if encode is not None:
        assert decode is not None and server_decode is not None  # the split comes all together
        row["client_encode_p50_ms"] = float(np.percentile(encode, 50))
        row["network_server_p50_ms"] = float(np.percentile(rt - encode - decode, 50))
        row["server_decode_p50_ms"] = float(np.percentile(server_decode, 50))
        row["client_decode_p50_ms"] = float(np.percentile(decode, 50))
    return row


# ---- lerobot 0.6.1 baseline: its gRPC stubs and its own (pickle-based) serialisation helpers ----


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """lerobot's chunk receiver logs each transfer on the root logger at INFO."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.setLevel(level)


def _import_lerobot() -> tuple:
    """lerobot's gRPC stubs, chunk helpers and timed-data classes; importing
    `lerobot.async_inference` may create ./logs, so it happens in a temporary folder."""
    import grpc  # pyright: ignore[reportMissingModuleSource]
    from lerobot.transport import services_pb2, services_pb2_grpc
    from lerobot.transport.utils import (
        bytes_to_python_object,
        grpc_channel_options,
        python_object_to_bytes,
        receive_bytes_in_chunks,
        send_bytes_in_chunks,
    )

    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            from lerobot.async_inference.helpers import TimedAction, TimedObservation
        finally:
            os.chdir(cwd)
    return (
        grpc,
        services_pb2,
        services_pb2_grpc,
        grpc_channel_options,
        receive_bytes_in_chunks,
        send_bytes_in_chunks,
        TimedAction,
        TimedObservation,
        python_object_to_bytes,
        bytes_to_python_object,
    )


def measure_lerobot(model_s: float, requests: int) -> dict:
    """Round trips through lerobot's AsyncInference gRPC service, as its robot client
    and policy server do them (send the observation, then ask for the actions)."""
    from concurrent import futures

    import torch

    (
        grpc,
        pb2,
        pb2_grpc,
        channel_options,
        receive_chunks,
        send_chunks,
        TimedAction,
        TimedObservation,
        to_bytes,
        from_bytes,
    ) = _import_lerobot()
    chunk = torch.linspace(0, 1, CHUNK_SHAPE[0] * CHUNK_SHAPE[1]).reshape(CHUNK_SHAPE)
    model_ns: list[int] = []

    class Servicer(pb2_grpc.AsyncInferenceServicer):
        def __init__(self) -> None:
            self.observations: list = []
            self.shutdown = threading.Event()

        def SendObservations(self, request_iterator, context):  # noqa: N802 (gRPC name)
            self.observations.append(from_bytes(receive_chunks(request_iterator, None, self.shutdown)))
            return pb2.Empty()

        def GetActions(self, request, context):  # noqa: N802 (gRPC name)
            obs = self.observations.pop()
            t0 = time.perf_counter_ns()
            if model_s:
                time.sleep(model_s)
            model_ns.append(time.perf_counter_ns() - t0)
            actions = [
                TimedAction(timestamp=obs.timestamp + i / 30, timestep=obs.timestep + i, action=a)
                for i, a in enumerate(list(chunk))
            ]
            return pb2.Actions(data=to_bytes(actions))

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb2_grpc.add_AsyncInferenceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", channel_options())
    try:
        grpc.channel_ready_future(channel).result(timeout=TIMEOUT_S)
        stub = pb2_grpc.AsyncInferenceStub(channel)
        raw = {f"{j}.pos": float(v) for j, v in zip(JOINTS, np.linspace(-1, 1, 6))}
        raw |= {"front": camera_image(0), "wrist": camera_image(1), "task": ""}
        rts, sizes = [], 0
        with _quiet_root_logger():
            for i in range(WARMUP + requests):
                t0 = time.perf_counter_ns()
                data = to_bytes(TimedObservation(timestamp=time.time(), timestep=i, observation=raw, must_go=True))
                stub.SendObservations(send_chunks(data, pb2.Observation), timeout=TIMEOUT_S)
                actions = from_bytes(stub.GetActions(pb2.Empty(), timeout=TIMEOUT_S).data)
                rts.append((time.perf_counter_ns() - t0) / 1e6)
                if len(actions) != CHUNK_SHAPE[0]:
                    raise RuntimeError(f"lerobot baseline returned {len(actions)} actions, not {CHUNK_SHAPE[0]}")
                sizes = len(data)
    finally:
        channel.close()
        server.stop(grace=None)
    return _summary(
        "lerobot gRPC+pickle", "raw", model_s, sizes, np.asarray(rts[WARMUP:]), np.asarray(model_ns[WARMUP:]) / 1e6
    )


def run(repeats: int = 1, progress: Callable[[str], None] = lambda _: None) -> dict:
    """All variants, `REQUESTS * repeats` round trips each; returns rows and ratios."""
    requests = REQUESTS * repeats
    rows = []
    for jpeg in (False, True):
        for model_s in MODEL_S:
            progress(f"robotrl, {'jpeg' if jpeg else 'raw'} images, model {model_s * 1e3:g} ms")
            rows.append(measure_robotrl(model_s, jpeg, requests))
    result = {"requests_per_variant": requests, "warmup": WARMUP, "rows": rows, "target_p99_overhead_ms": 1.0}
    try:
        import grpc  # noqa: F401  # pyright: ignore[reportMissingModuleSource]
        import lerobot.transport.services_pb2  # noqa: F401
    except ImportError as exc:
        result["lerobot_baseline"] = (
            f"skipped: lerobot's gRPC stubs are not importable ({exc}); pip install 'lerobot[async]'"
        )
        return result
    result["lerobot_baseline"] = "lerobot 0.6.1 AsyncInference stubs, pickled payloads, same process"
    for model_s in MODEL_S:
        progress(f"lerobot gRPC, raw images, model {model_s * 1e3:g} ms")
        lerobot = measure_lerobot(model_s, requests)
        ours = next(r for r in rows if r["images"] == "raw" and r["model_ms"] == model_s * 1e3)
        rows.append(lerobot)
        for q in (50, 99):
            result[f"lerobot_over_robotrl_round_trip_p{q}_model_{model_s * 1e3:g}ms"] = (
                lerobot[f"round_trip_p{q}_ms"] / ours[f"round_trip_p{q}_ms"]
            )
    return result
