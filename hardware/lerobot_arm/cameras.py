"""A real arm's cameras from the command line or the fleet file, in the form lerobot users know.

`--cameras` takes the value of lerobot's `--robot.cameras`: a YAML (or JSON) map of camera
name -> lerobot camera config, each with its `type`, e.g.

    {front: {type: opencv, index_or_path: 0, width: 640, height: 480, fps: 30},
     wrist: {type: intelrealsense, serial_number_or_name: "0123456789", width: 640, height: 480, fps: 30}}

Every camera type lerobot registers works (opencv, intelrealsense, zmq, ...): an entry
becomes that type's config class with the given fields, checked by lerobot itself. Width,
height and fps are required (they fix the recorded video and what the policy is fed).
Robot side: no torch, no mujoco.
"""

from __future__ import annotations

import importlib
from typing import Any

import yaml

from robotrl.core.errors import ConfigError

CAMERA_MODULES = (
    "lerobot.cameras.opencv.configuration_opencv",
    "lerobot.cameras.realsense.configuration_realsense",
    "lerobot.cameras.zmq.configuration_zmq",
)
"""lerobot modules whose import registers a camera type (their configs only, no drivers)."""
EXAMPLE = "{front: {type: opencv, index_or_path: 0, width: 640, height: 480, fps: 30}}"
ZMQ_TIMEOUT_MS = 1000
"""`timeout_ms` of a zmq camera unless given: lerobot's default (5000 ms) outlives the 2 s its
`disconnect()` waits for the reader thread, and closing the socket under a reader still
waiting on a stalled stream aborts the process."""


def parse_cameras(text: str | None) -> dict[str, Any]:
    """`text` (lerobot's camera map, '' or None for no cameras) -> camera name -> lerobot
    `CameraConfig`. Raises `ConfigError` (one line, naming the camera) for anything else."""
    if not text or not text.strip():
        return {}
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"--cameras is not a YAML/JSON map ({exc.__class__.__name__}); expected e.g. {EXAMPLE}"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(f"--cameras must map camera names to configs, e.g. {EXAMPLE}; got {text!r}")
    return {str(name): camera_config(str(name), fields) for name, fields in value.items()}


def camera_config(name: str, fields: Any) -> Any:
    """One lerobot camera config from its fields (a dict with `type`)."""
    from lerobot.cameras import CameraConfig

    for module in CAMERA_MODULES:
        importlib.import_module(module)
    known = CameraConfig.get_known_choices()
    if not isinstance(fields, dict) or "type" not in fields:
        raise ConfigError(f"camera {name!r}: give a map with a type ({', '.join(sorted(known))}), e.g. {EXAMPLE}")
    fields = dict(fields)
    kind = str(fields.pop("type"))
    if kind == "zmq":
        fields.setdefault("timeout_ms", ZMQ_TIMEOUT_MS)
    if kind not in known:
        raise ConfigError(f"camera {name!r}: unknown type {kind!r}; lerobot knows {', '.join(sorted(known))}")
    missing = [key for key in ("width", "height", "fps") if fields.get(key) is None]
    if missing:
        raise ConfigError(
            f"camera {name!r}: set {', '.join(missing)} (they fix the recorded video and the policy input)"
        )
    try:
        return known[kind](**fields)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"camera {name!r} ({kind}): {exc}") from None
