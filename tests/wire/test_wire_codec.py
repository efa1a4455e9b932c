"""Codec round-trip table and hostile input: every bad byte string is a `ProtocolError`."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import msgspec
import numpy as np
import pytest

from robotrl.core.errors import ProtocolError, VersionMismatch
from robotrl.wire import codec
from robotrl.wire.messages import (
    PROTOCOL_VERSION,
    ChunkReply,
    ErrorReply,
    Heartbeat,
    Hello,
    HelloReply,
    ObservationRequest,
    WeightsAnnouncement,
)

RNG = np.random.default_rng(0)
SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 5e-324, 1.0], np.float64)
ARRAYS = {
    "0-d float64": np.array(3.25),
    "0-d bool": np.array(True),
    "uint8 image": RNG.integers(0, 256, (48, 64, 3), dtype=np.uint8),
    "float16": RNG.standard_normal((7, 5)).astype(np.float16),
    "float64 nan/inf": SPECIALS,
    "nan payload": np.array([0x7FF8_0000_DEAD_BEEF], np.uint64).view(np.float64),
    "bool": np.array([[True, False], [False, True]]),
    "int64": np.array([-(2**63), 2**63 - 1]),
    "complex64": np.array([1 + 2j, -3j], np.complex64),
    "big-endian int32": np.arange(6, dtype=">i4").reshape(2, 3),
    "empty (0, 6) chunk": np.zeros((0, 6), np.float32),
    "non-contiguous": np.arange(24, dtype=np.float32).reshape(4, 6).T,
    "large > 64 kB": RNG.standard_normal((200, 100)).astype(np.float32),
}


def wire(frames: list) -> list[bytes]:
    """What the far side receives: each frame as its own immutable buffer."""
    return [bytes(f) for f in frames]


def assert_same_array(got: np.ndarray, want: np.ndarray) -> None:
    """Equal shape, dtype and bytes (so NaN payloads, -0.0 and inf survive)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_array_round_trip(name):
    arr = ARRAYS[name]
    frames = codec.encode(ChunkReply(request_id=1, start_tick=2, actions=arr, version=3))
    assert len(frames) == (2 if arr.nbytes > codec.INLINE_LIMIT_BYTES else 1)
    got = codec.decode(wire(frames)).actions
    assert_same_array(got, arr)
    assert not got.flags.writeable  # a view of the received bytes, not a copy


def test_nested_dicts_with_arrays_round_trip():
    info = {
        "arm": "so101",
        "fps": 30,
        "ok": True,
        "none": None,
        "nested": {"limits": {"lo": ARRAYS["float16"], "hi": [1.5, ARRAYS["large > 64 kB"]]}},
        "empty": {},
    }
    got = codec.decode(wire(codec.encode(Hello(protocol_version=PROTOCOL_VERSION, client_info=info))))
    nested = got.client_info["nested"]["limits"]
    assert got.client_info["arm"] == "so101" and got.client_info["empty"] == {} and got.client_info["none"] is None
    assert_same_array(nested["lo"], info["nested"]["limits"]["lo"])
    assert nested["hi"][0] == 1.5
    assert_same_array(nested["hi"][1], info["nested"]["limits"]["hi"][1])


def observation(**changes) -> ObservationRequest:
    fields = dict(
        robot_id="arm0",
        request_id=7,
        tick=120,
        state=np.arange(6, dtype=np.float32),
        in_flight=np.ones((3, 6), np.float32),
        delay_ticks=3,
        instruction="pick the cube",
        images={
            "front": RNG.integers(0, 256, (224, 224, 3), dtype=np.uint8),
            "wrist": RNG.integers(0, 256, (96, 96, 3), dtype=np.uint8),
        },
        prefix=np.zeros((5, 6), np.float32),
        sent_time_ns=123,
    )
    return ObservationRequest(**(fields | changes))


@pytest.mark.parametrize("tail", [None, np.zeros((5, 6), np.float32)])
def test_observation_request_round_trip(tail):
    msg = observation(prefix=tail)
    frames = codec.encode(msg)
    assert len(frames) == 2  # the 224x224x3 image (150 kB) travels as its own frame
    got = codec.decode(wire(frames))
    assert (got.robot_id, got.request_id, got.tick, got.delay_ticks, got.instruction, got.sent_time_ns) == (
        "arm0",
        7,
        120,
        3,
        "pick the cube",
        123,
    )
    for name in ("state", "in_flight"):
        assert_same_array(getattr(got, name), getattr(msg, name))
    for cam in msg.images:
        assert_same_array(got.images[cam], msg.images[cam])
    assert (got.prefix is None) == (tail is None)


@pytest.mark.parametrize(
    "msg",
    [
        HelloReply(ok=False, protocol_version=PROTOCOL_VERSION, error="no"),
        ErrorReply(request_id=-1, code="protocol", message="bad"),
        Heartbeat(sent_time_ns=5),
        WeightsAnnouncement(version=2, safetensors=b"\x00" * 10),
        ChunkReply(
            request_id=1,
            start_tick=0,
            actions=np.zeros((50, 6), np.float32),
            version=1,
            timings_ns={"queue": 1, "model": 2, "total": 3},
        ),
    ],
    ids=lambda m: type(m).__name__,
)
def test_other_messages_round_trip(msg):
    got = codec.decode(wire(codec.encode(msg)))
    assert type(got) is type(msg)
    assert msgspec.structs.asdict(got).keys() == msgspec.structs.asdict(msg).keys()


def smooth_image(h: int, w: int) -> np.ndarray:
    """A camera-like image (gradients and a disc): JPEG's error on it is small."""
    y, x = np.mgrid[0:h, 0:w]
    disc = ((y - h / 2) ** 2 + (x - w / 2) ** 2 < (h / 4) ** 2) * 80
    return np.stack([x * 255 // w, y * 255 // h, 120 + disc], axis=-1).astype(np.uint8)


def test_jpeg_round_trip_has_bounded_error():
    image = smooth_image(224, 224)
    msg = observation(images={"front": image})
    raw_bytes = sum(len(f) for f in wire(codec.encode(msg)))
    frames = wire(codec.encode(msg, jpeg_quality=90))
    got = codec.decode(frames).images["front"]
    err = np.abs(got.astype(np.int16) - image.astype(np.int16))
    assert got.shape == image.shape and got.dtype == np.uint8
    assert err.mean() < 2.0 and np.percentile(err, 99) < 12  # 8-bit levels
    assert sum(map(len, frames)) < raw_bytes / 5


def test_precompressed_jpeg_passes_through():
    import cv2

    image = smooth_image(32, 48)
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    got = codec.decode(wire(codec.encode(observation(images={"cam": codec.JpegImage(buf.tobytes())}))))
    assert got.images["cam"].shape == (32, 48, 3)
    assert np.abs(got.images["cam"].astype(int) - image).mean() < 3


def test_wrong_protocol_version_in_hello():
    with pytest.raises(VersionMismatch) as info:
        codec.decode(codec.encode(Hello(protocol_version=PROTOCOL_VERSION + 1)))
    assert isinstance(info.value, ProtocolError)
    assert str(PROTOCOL_VERSION) in str(info.value) and str(PROTOCOL_VERSION + 1) in str(info.value)


def test_every_truncation_is_a_protocol_error():
    payload = bytes(codec.encode(observation(images={}))[0])
    for n in range(len(payload)):
        with pytest.raises(ProtocolError):
            codec.decode(payload[:n])


def test_bad_out_of_band_frames():
    frames = wire(codec.encode(observation()))
    with pytest.raises(ProtocolError, match="needs 150528 bytes, got 150527"):
        codec.decode([frames[0], frames[1][:-1]])
    with pytest.raises(ProtocolError, match="references frame 1"):
        codec.decode(frames[:1])
    with pytest.raises(ProtocolError):
        codec.decode([])


def ext_array(dtype: bytes, shape: tuple[int, ...], raw: bytes) -> msgspec.msgpack.Ext:
    """A hand-made inline array ext value (see the codec's header layout)."""
    header = struct.pack("<BB", len(dtype), len(shape)) + dtype + struct.pack(f"<{len(shape)}Q", *shape)
    return msgspec.msgpack.Ext(codec.EXT_ARRAY, header + raw)


@pytest.mark.parametrize(
    "actions, match",
    [
        (ext_array(b"<f4", (2, 3), b"\x00" * 20), "needs 24 bytes, got 20"),
        (ext_array(b"|O", (1,), b"\x00" * 8), "not allowed"),
        (ext_array(b"<M8[ns]", (1,), b"\x00" * 8), "not allowed"),
        (ext_array(b"<f4", (2**62, 2**62), b""), "needs"),
        (msgspec.msgpack.Ext(9, b"xyz"), "unknown msgpack ext type 9"),
        (msgspec.msgpack.Ext(codec.EXT_JPEG, b"not a jpeg"), "corrupt JPEG"),
        ([1.0, 2.0], "expected an array"),
    ],
)
def test_bad_arrays_are_protocol_errors(actions, match):
    payload = msgspec.msgpack.encode(
        {"type": "chunk", "request_id": 1, "start_tick": 0, "actions": actions, "version": 1}
    )
    with pytest.raises(ProtocolError, match=match):
        codec.decode(payload)


def test_unknown_message_type():
    with pytest.raises(ProtocolError, match="launch"):
        codec.decode(msgspec.msgpack.encode({"type": "launch", "request_id": 1}))


def test_object_dtype_is_rejected_on_encode():
    with pytest.raises(ProtocolError, match="dtype object"):
        codec.encode(ChunkReply(request_id=1, start_tick=0, actions=np.array([None]), version=1))


def test_random_and_mutated_bytes_only_raise_protocol_errors():
    rng = np.random.default_rng(1234)
    valid = bytes(codec.encode(observation(images={"cam": np.zeros((4, 4, 3), np.uint8)}))[0])
    decoded = 0
    for i in range(2000):
        if i < 1000:
            data = rng.integers(0, 256, rng.integers(0, 200), dtype=np.uint8).tobytes()
        else:
            data = bytearray(valid)
            for pos in rng.integers(0, len(data), rng.integers(1, 4)):
                data[pos] = rng.integers(0, 256)
            data = bytes(data)
        try:
            codec.decode(data)
            decoded += 1  # a mutation can still be a valid message
        except ProtocolError:
            pass
    assert decoded < 1000


def test_no_pickle_in_the_wire_code():
    for path in Path(codec.__file__).parent.glob("*.py"):
        assert not re.search(r"import pickle|pickle\.load|torch\.load|marshal", path.read_text()), path
