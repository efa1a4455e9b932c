"""`request_problem`: what is wrong with an `ObservationRequest` for a policy, before it
reaches a batch (a malformed request is answered with an error to its sender alone and
never reaches the model thread). A pure function of the request and the policy's
metadata; shapes are (rows, joints), images (H, W, 3) uint8.
"""

from __future__ import annotations

import numpy as np

from robotrl.core.policy import PolicyMetadata
from robotrl.wire.messages import ObservationRequest

MAX_DELAY_TICKS = 10_000
"""Largest inference delay a request may ask for (5.5 minutes at 30 Hz)."""
MAX_PLAN_ROWS = 10_000
"""Most rows of `in_flight` or `prefix` in one request."""
MAX_ABS_VALUE = 1e4
"""Largest magnitude of any state, plan or env_state value (radians or metres): a larger
one is corrupt and would overflow the float32 chunk."""


def request_problem(req: ObservationRequest, meta: PolicyMetadata) -> str | None:
    """One line saying why `req` cannot be answered by a policy with `meta`, or None."""
    checks = (
        _array_problem("state", req.state, (meta.state_dim,)),
        _rows_problem("in_flight", req.in_flight, meta.action_dim),
        None if req.prefix is None else _rows_problem("prefix", req.prefix, meta.action_dim),
        None
        if 0 <= req.delay_ticks <= MAX_DELAY_TICKS
        else f"delay_ticks {req.delay_ticks} not in 0..{MAX_DELAY_TICKS}",
        _images_problem(req.images, meta.image_keys),
        _env_state_problem(req.env_state, meta.env_state_dim),
    )
    return next((c for c in checks if c is not None), None)


def _array_problem(name: str, value: object, shape: tuple[int, ...]) -> str | None:
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "fiu":
        return f"{name} must be a numeric array"
    if value.shape != shape:
        return f"{name} has shape {value.shape}, the policy needs {shape}"
    if not np.all(np.isfinite(value)):
        return f"{name} has NaN or infinite values"
    if value.size and np.max(np.abs(value)) > MAX_ABS_VALUE:
        return f"{name} has values beyond +-{MAX_ABS_VALUE:g} (corrupt?)"
    return None


def _rows_problem(name: str, value: object, joints: int) -> str | None:
    if not isinstance(value, np.ndarray) or value.ndim != 2:
        return f"{name} must be a (rows, {joints}) array"
    if len(value) > MAX_PLAN_ROWS:
        return f"{name} has {len(value)} rows, at most {MAX_PLAN_ROWS}"
    return _array_problem(name, value, (len(value), joints))


def _images_problem(images: dict, keys: tuple[str, ...]) -> str | None:
    for camera in keys:
        image = images.get(camera)
        if image is None:
            return f"no image from camera {camera!r} (the policy reads {list(keys)}, got {sorted(images)})"
        if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            shape = getattr(image, "shape", None)
            return f"image {camera!r} must be an (H, W, 3) uint8 array, got {shape} {getattr(image, 'dtype', '')}"
        if min(image.shape[:2]) < 1:
            return f"image {camera!r} is empty"
    return None


def _env_state_problem(env_state: np.ndarray | None, dim: int) -> str | None:
    if dim == 0:
        return None
    if env_state is None:
        return f"the policy reads a privileged env_state of {dim} values; the request has none"
    return _array_problem("env_state", env_state, (dim,))
