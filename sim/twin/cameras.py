"""`FramePublisher`: one camera's latest frame, published in the message format of lerobot's
ZMQ image server (`lerobot.cameras.zmq.image_server`), so lerobot's own `ZMQCamera` (type
"zmq" in a `--cameras` map) reads it like a camera on another computer.

Why ZMQ and not a stream OpenCV opens: lerobot's `OpenCVCamera.connect` sets the capture's
fps, width and height and fails unless the backend confirms them, and robotrl's `--cameras`
requires all three. Only a V4L2 device accepts those settings; a file, pipe or network
stream (FFmpeg backend) refuses them (`VideoCapture.set` returns False), and a fake V4L2
device needs the v4l2loopback kernel module and root. (An http:// URL would not even get
that far: `OpenCVCameraConfig.index_or_path` is a `Path`, which folds "//" into "/".)

Frames are (H, W, 3) uint8 RGB. They are JPEG-encoded as they are, as lerobot's image server
does with its RGB frames, so `ZMQCamera` (which decodes with OpenCV) hands back RGB again.

Each frame handed to `update()` is sent once, at once, as a camera delivers each frame it
captures: lerobot's reader stamps a frame when it arrives (`latest_timestamp`), so that stamp
is the frame's time, as on a real camera. (Sending the newest frame again at a fixed rate, as
lerobot's image server does, would restamp an old frame as new.) Before the first `update()`
the initial grey frame goes out at `fps`, so a reader connects before anything renders.
"""

from __future__ import annotations

import base64
import json
import threading
import time

import cv2
import numpy as np
import zmq

JPEG_QUALITY = 90


class FramePublisher:
    """Publishes camera `name`'s frames on a ZMQ PUB socket bound to a free port of `host`
    (`.port`), until `stop()`: each `update()` once, the grey frame at `fps` before the first.

    Args:
        name: the camera's name in every message (`camera_name` of lerobot's config).
        h, w: frame height and width in pixels.
        value: grey level (0..255) of the frame published before the first `update()`.
        fps: the camera's frame rate (its `--cameras` entry); grey frames per second before
            the first `update()`.
        host: address to bind; loopback by default (nothing leaves the machine).
    """

    def __init__(self, name: str, h: int, w: int, value: int = 90, fps: float = 60.0, host: str = "127.0.0.1") -> None:
        if h <= 0 or w <= 0 or fps <= 0 or not 0 <= value <= 255:
            raise ValueError(f"FramePublisher {name!r}: need h, w, fps > 0 and value in 0..255")
        self.name, self.value, self.fps, self.host = name, value, fps, host
        self.shape = (h, w, 3)
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.PUB)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SNDHWM, 2)
        self.port = self._sock.bind_to_random_port(f"tcp://{host}")
        self._lock = threading.Lock()
        self._jpeg_b64 = _encode(np.full(self.shape, value, np.uint8))
        self._fresh = False
        """An `update()` not sent yet."""
        self._updated = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"camera {name}", daemon=True)
        self._thread.start()

    def update(self, frame: np.ndarray) -> None:
        """Publish (H, W, 3) uint8 RGB `frame` from now on (encoded here, in the caller)."""
        if frame.shape != self.shape or frame.dtype != np.uint8:
            raise ValueError(f"camera {self.name!r} takes {self.shape} uint8 frames, got {frame.shape} {frame.dtype}")
        encoded = _encode(frame)
        with self._lock:
            self._jpeg_b64, self._fresh = encoded, True
        self._updated.set()

    def config(self, **fields) -> dict:
        """This camera's entry of a lerobot `--cameras` map (`fields` override or add)."""
        h, w, _ = self.shape
        config = {"type": "zmq", "server_address": self.host, "port": self.port, "camera_name": self.name}
        return {**config, "width": w, "height": h, "fps": round(self.fps), **fields}

    def camera_map(self, name: str | None = None, **fields) -> str:
        """A one-camera `--cameras` map (JSON) naming it `name` (default: its own name)."""
        return json.dumps({name or self.name: self.config(**fields)})

    def _run(self) -> None:
        period_s, updated = 1.0 / self.fps, False
        while not self._stop.is_set():
            self._updated.clear()
            with self._lock:
                image, fresh, self._fresh = self._jpeg_b64, self._fresh, False
            if fresh or not updated:
                self._send(image)
            updated |= fresh
            self._updated.wait(period_s)  # an update() wakes it at once

    def _send(self, image: str) -> None:
        message = {"timestamps": {self.name: time.time()}, "images": {self.name: image}}
        try:
            self._sock.send_string(json.dumps(message), zmq.NOBLOCK)
        except zmq.Again:  # no subscriber keeping up: drop the frame, as the image server does
            pass

    def stop(self) -> None:
        """Stop publishing and close the socket; a no-op the second time."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._updated.set()
        self._thread.join(timeout=2)
        self._sock.close(linger=0)
        self._ctx.term()


def _encode(frame: np.ndarray) -> str:
    ok, jpeg = cv2.imencode(".jpg", frame, [int(cv2.IMWRITE_JPEG_QUALITY), JPEG_QUALITY])
    if not ok:
        raise ValueError(f"could not JPEG-encode a {frame.shape} frame")
    return base64.b64encode(jpeg.tobytes()).decode()
