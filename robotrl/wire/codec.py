"""msgpack codec for `robotrl.wire.messages`: messages <-> ZMQ frames. No pickle, ever.

Frame layout of one message: `frames[0]` is the msgpack payload; `frames[1:]` are raw
array buffers that the payload references by index. Arrays travel as msgpack ext values:

- ext 1 (inline, arrays up to `INLINE_LIMIT_BYTES`): header + raw C-order bytes,
- ext 2 (out of band, larger arrays): header + uint32 frame index; the bytes are the
  whole of that frame, sent without copying (zero-copy above 64 kB pays off in ZMQ),
- ext 3 (JPEG): the bytes of an RGB JPEG; decodes to a uint8 (H, W, 3) array.

Header: uint8 dtype-string length, uint8 ndim, the numpy dtype string (e.g. `<f4`,
`|u1`, `|b1`), then ndim little-endian uint64 dimensions. Only bool, integer, float and
complex dtypes exist on the wire. Decoding is zero-copy: arrays are read-only
`np.frombuffer` views of the received frames (copy one before writing into it).
"""

from __future__ import annotations

import math
import struct
import threading
from collections.abc import Sequence
from typing import Any, cast

import msgspec
import numpy as np

from robotrl.core.errors import ProtocolError, VersionMismatch
from robotrl.wire.messages import PROTOCOL_VERSION, Hello, Message, ObservationRequest

INLINE_LIMIT_BYTES = 64 * 1024
"""Arrays larger than this (in bytes) are sent as their own frame instead of inline."""

EXT_ARRAY, EXT_FRAME, EXT_JPEG = 1, 2, 3
_HEAD = struct.Struct("<BB")
_INDEX = struct.Struct("<I")
_MAX_NDIM = 32
_ALLOWED_DTYPES: dict[bytes, np.dtype] = {
    np.dtype(code).newbyteorder(order).str.encode(): np.dtype(code).newbyteorder(order)
    for code in "?bBhHiIlLqQefdFD"
    for order in ("<", ">")
}

Buffer = bytes | bytearray | memoryview


class JpegImage:
    """An RGB image already compressed as JPEG (e.g. by an MJPEG camera); put it in
    `ObservationRequest.images` instead of an array. Decodes to uint8 (H, W, 3)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


_local = threading.local()
"""Per-thread frames of the message being encoded (`out`) or decoded (`frames`): the
ext hooks of the shared msgspec encoder and decoder find them here."""


def encode(
    msg: Message, *, jpeg_quality: int | None = None, inline_limit_bytes: int = INLINE_LIMIT_BYTES
) -> list[Buffer]:
    """Frames of `msg`: [msgpack payload, raw buffer 1, ...] (see the module docstring).

    `jpeg_quality` (1-100): compress the uint8 (H, W, 3) RGB arrays of an
    `ObservationRequest`'s images as JPEG. Out-of-band frames are views of the
    message's arrays: do not modify those arrays until the frames are sent.
    Raises `ProtocolError` for values the protocol cannot carry (object arrays, ...).
    """
    if jpeg_quality is not None and isinstance(msg, ObservationRequest):
        images = {k: _to_jpeg(v, jpeg_quality) for k, v in msg.images.items()}
        msg = msgspec.structs.replace(msg, images=images)
    frames: list[Buffer] = [b""]
    _local.out, _local.inline_limit_bytes = frames, inline_limit_bytes
    try:
        frames[0] = _ENCODER.encode(msg)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"cannot encode {type(msg).__name__}: {exc}") from exc
    finally:
        _local.out = None
    return frames


def decode(frames: Buffer | Sequence[Buffer]) -> Message:
    """The message in `frames` (one buffer, or the list `encode` made).

    Raises `ProtocolError` (and only that) for anything that is not a valid message of
    this protocol version: garbage or truncated bytes, unknown types, missing fields,
    arrays whose byte count does not match their shape, disallowed dtypes, bad JPEG, and
    a `Hello` of another version (`VersionMismatch`, naming both versions).
    """
    # one buffer (pyright reads a memoryview as a possible Sequence[Buffer] too)
    parts = cast(Sequence[Buffer], (frames,) if isinstance(frames, (bytes, bytearray, memoryview)) else frames)
    if not parts:
        raise ProtocolError("empty message: expected at least the msgpack payload frame")

    _local.frames = parts
    try:
        msg = _DECODER.decode(parts[0])
    except ProtocolError:
        raise
    except (
        msgspec.MsgspecError,
        ValueError,
        TypeError,
        OverflowError,
        RecursionError,
        MemoryError,
        struct.error,
    ) as exc:
        raise ProtocolError(f"not a valid robotrl message (protocol {PROTOCOL_VERSION}): {exc}") from None
    finally:
        _local.frames = None
    if isinstance(msg, Hello) and msg.protocol_version != PROTOCOL_VERSION:
        raise VersionMismatch(local_version=PROTOCOL_VERSION, remote_version=msg.protocol_version)
    return msg


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return _encode_array(obj, _local.out, _local.inline_limit_bytes)
    if isinstance(obj, JpegImage):
        return msgspec.msgpack.Ext(EXT_JPEG, obj.data)
    if isinstance(obj, np.generic) and obj.dtype.str.encode() in _ALLOWED_DTYPES:
        return obj.item()
    raise ProtocolError(
        f"cannot send a {type(obj).__name__} ({obj!r:.60}): use numbers, "
        "strings, bytes, lists, dicts and numeric numpy arrays"
    )


def _encode_array(arr: np.ndarray, frames: list[Buffer], inline_limit_bytes: int) -> msgspec.msgpack.Ext:
    dtype = arr.dtype.str.encode()
    if dtype not in _ALLOWED_DTYPES:
        raise ProtocolError(
            f"cannot send an array of dtype {arr.dtype}: only bool, integer, float "
            "and complex arrays travel (convert it, e.g. with .astype(np.float32))"
        )
    if arr.ndim > _MAX_NDIM:
        raise ProtocolError(f"cannot send an array with {arr.ndim} dimensions (at most {_MAX_NDIM})")
    raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data
    header = _HEAD.pack(len(dtype), arr.ndim) + dtype + struct.pack(f"<{arr.ndim}Q", *arr.shape)
    if arr.nbytes <= inline_limit_bytes:
        return msgspec.msgpack.Ext(EXT_ARRAY, b"".join((header, raw)))
    frames.append(raw)
    return msgspec.msgpack.Ext(EXT_FRAME, header + _INDEX.pack(len(frames) - 1))


def _decode_ext(code: int, data: memoryview) -> np.ndarray:
    frames = _local.frames
    if code == EXT_JPEG:
        return _from_jpeg(data)
    if code not in (EXT_ARRAY, EXT_FRAME):
        raise ProtocolError(f"unknown msgpack ext type {code}: the peer runs another protocol version")
    dtype, shape, offset = _read_header(data)
    if code == EXT_ARRAY:
        raw = data[offset:]
    else:
        if len(data) != offset + _INDEX.size:
            raise ProtocolError("out-of-band array reference has a wrong length")
        (index,) = _INDEX.unpack_from(data, offset)
        if not 1 <= index < len(frames):
            raise ProtocolError(f"array references frame {index}, but the message has {len(frames)} frames")
        raw = memoryview(frames[index])
    expected = math.prod(shape) * dtype.itemsize
    if raw.nbytes != expected:
        raise ProtocolError(
            f"array of shape {shape} and dtype {dtype} needs {expected} bytes, "
            f"got {raw.nbytes} (truncated or corrupt message)"
        )
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _read_header(data: memoryview) -> tuple[np.dtype, tuple[int, ...], int]:
    """(dtype, shape, offset of what follows the header) of an array ext value."""
    if len(data) < _HEAD.size:
        raise ProtocolError("array header truncated")
    dtype_len, ndim = _HEAD.unpack_from(data)
    if ndim > _MAX_NDIM:
        raise ProtocolError(f"array with {ndim} dimensions (at most {_MAX_NDIM})")
    end = _HEAD.size + dtype_len + 8 * ndim
    if len(data) < end:
        raise ProtocolError("array header truncated")
    dtype = _ALLOWED_DTYPES.get(bytes(data[_HEAD.size : _HEAD.size + dtype_len]))
    if dtype is None:
        raise ProtocolError(
            f"array dtype {bytes(data[_HEAD.size : _HEAD.size + dtype_len])!r} is not "
            "allowed: only bool, integer, float and complex arrays travel"
        )
    shape = struct.unpack_from(f"<{ndim}Q", data, _HEAD.size + dtype_len)
    return dtype, shape, end


def _dec_hook(type_: type, obj: Any) -> Any:
    if type_ is np.ndarray and isinstance(obj, np.ndarray):
        return obj
    raise TypeError(f"expected an array, got {type(obj).__name__}")


def _cv2():
    try:
        import cv2
    except ImportError as exc:
        raise ProtocolError("JPEG images need OpenCV: pip install opencv-python-headless") from exc
    return cv2


def _to_jpeg(image: Any, quality: int) -> Any:
    """`image` as a `JpegImage` if it is a uint8 (H, W, 3) RGB array, else unchanged."""
    if not (isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3):
        return image
    cv2 = _cv2()
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(image, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise ProtocolError(f"OpenCV could not JPEG-encode an image of shape {image.shape}")
    return JpegImage(buf.tobytes())


def _from_jpeg(data: memoryview) -> np.ndarray:
    cv2 = _cv2()
    try:
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    except cv2.error as exc:
        raise ProtocolError(f"corrupt JPEG image: {exc}") from None
    if bgr is None:
        raise ProtocolError(f"corrupt JPEG image ({len(data)} bytes)")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_DECODER = msgspec.msgpack.Decoder(Message, ext_hook=_decode_ext, dec_hook=_dec_hook)
