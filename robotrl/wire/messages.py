"""The messages of the inference wire protocol (msgspec Structs, a tagged union).

Every message is a msgpack map with a `"type"` tag. Array fields hold numpy arrays
(any numeric or bool dtype, see `codec`); times are integer nanoseconds, ticks are
absolute control-step indices of the robot's loop. Actions are in robot units, never
normalized. Bump `PROTOCOL_VERSION` whenever a field changes meaning or type.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

PROTOCOL_VERSION = 3
"""Wire protocol version, sent in every `Hello`; peers with another version are refused."""


class _Message(msgspec.Struct, tag_field="type"):
    """Common base: tagged by `type`."""


class Hello(_Message, tag="hello"):
    """First message of a client on a (new) connection. Only `protocol_version` is
    required so that any version's hello decodes far enough to be refused clearly."""

    protocol_version: int
    role: str = "robot"
    """What the client is: "robot" (inference requests), later "actor", "learner"."""
    robot_id: str = ""
    client_info: dict[str, Any] = {}
    """Free-form description (software versions, arm model, fps); msgpack values only."""


class HelloReply(_Message, tag="hello_reply"):
    """The server's answer to `Hello`: `ok` False with `error` when it refuses."""

    ok: bool
    protocol_version: int
    server_info: dict[str, Any] = {}
    """Free-form description (policy name, horizon, action dim, weight version)."""
    error: str = ""


class ObservationRequest(_Message, tag="observation"):
    """A robot asks for the chunk that starts `delay_ticks` after `tick`.

    `state`: (S,) joint positions in robot units at `tick`. `images`: camera name ->
    uint8 (H, W, 3) RGB array; when sending, a value may also be a `codec.JpegImage`
    (already compressed), and `codec.encode(..., jpeg_quality=q)` compresses arrays;
    decoding always yields arrays. `in_flight`: (n, A) actions already sent or queued
    for ticks `tick .. tick + n - 1` (n may be 0); the server forwards `state` over its
    first `delay_ticks` rows. `prefix`: (P, A) the robot's current plan for the chunk's own
    ticks `tick + delay_ticks ..` (RTC guidance), or None. `sent_time_ns`: client
    `time.monotonic_ns()` when sent (only compared with the client's own clock).
    """

    robot_id: str
    request_id: int
    tick: int
    state: np.ndarray
    in_flight: np.ndarray
    images: dict[str, np.ndarray] = {}
    instruction: str = ""
    delay_ticks: int = 0
    prefix: np.ndarray | None = None
    sent_time_ns: int = 0
    env_state: np.ndarray | None = None
    """(E,) privileged task features (simulation only), or None."""


class ChunkReply(_Message, tag="chunk"):
    """The chunk for request `request_id`: `actions` (H, A) in robot units, row 0
    executes at absolute tick `start_tick`; `version` is the weight version that made it.
    `timings_ns`: server-side durations in ns, at least "queue", "model", "total"."""

    request_id: int
    start_tick: int
    actions: np.ndarray
    version: int
    timings_ns: dict[str, int] = {}


class ErrorReply(_Message, tag="error"):
    """The server could not answer `request_id` (-1 when no request is concerned).

    `code` is one of: "protocol" (undecodable message, or a type this socket does not
    take), "hello_required" (say hello first; clients do this by themselves),
    "wrong_robot_id" (this connection does not own that robot id), "bad_request" (it does
    not fit the served policy), "server" (the model failed), "none_newer" (no newer weights)."""

    request_id: int
    code: str
    message: str


class Heartbeat(_Message, tag="heartbeat"):
    """Liveness probe sent by an idle client; `sent_time_ns` is echoed back."""

    sent_time_ns: int


class HeartbeatAck(_Message, tag="heartbeat_ack"):
    """The server's answer to `Heartbeat`, echoing its `sent_time_ns`."""

    sent_time_ns: int


class HealthRequest(_Message, tag="health_request"):
    """Ask an inference server how it is (`robotrl health`, a supervisor's probe)."""


class HealthReply(_Message, tag="health"):
    """The server's `health()`: threads alive, errors by kind, the last error, queue depth,
    batches per second, refused requests, the learner connection (see `PolicyServer.health`)."""

    health: dict[str, Any]


class WeightsAnnouncement(_Message, tag="weights"):
    """New policy weights: `safetensors` is a safetensors file's bytes (never pickle)."""

    version: int
    safetensors: bytes
    protocol_version: int = PROTOCOL_VERSION
    """The sender's protocol, checked on top of the hello (weights on the PUB stream have
    no hello): another is refused."""


class WeightsRequest(_Message, tag="weights_request"):
    """Ask the learner for its newest weights (a server that starts or restarts late)."""

    newer_than: int = -1
    """Reply only with a version above this (-1: whatever is newest)."""


class TransitionBatch(_Message, tag="transitions"):
    """n consecutive control steps of one episode of one robot, as executed.

    Row i is tick `ticks[i]`: the observation taken at that tick (before acting), the
    executed (post-safety) target `action` and the policy's own row `policy_action`
    (both (n, A) radians), the `reward` received after acting, `intervention` (the
    executed row came from a human/teleop device, not the policy), the weight `version`
    of the chunk the policy row came from (-1: none, e.g. while holding) and the delay
    `delay_ticks` that chunk was requested with. `seq` is the index of row 0 within the
    episode (batches of an episode arrive in order; a gap means lost data). The batch
    with `episode_done` True ends the episode; `success` is meaningful there only.
    `state`: (n, S) float32 radians; `images`: camera -> (n, h, w, 3) uint8 at the
    training resolution; `env_state`: (n, E) float32 or None (sim only).
    """

    robot_id: str
    episode_id: int
    seq: int
    ticks: np.ndarray
    state: np.ndarray
    action: np.ndarray
    policy_action: np.ndarray
    reward: np.ndarray
    intervention: np.ndarray
    version: np.ndarray
    delay_ticks: np.ndarray
    images: dict[str, np.ndarray] = {}
    env_state: np.ndarray | None = None
    instruction: str = ""
    episode_done: bool = False
    success: bool = False
    protocol_version: int = PROTOCOL_VERSION
    """The sender's protocol, checked on top of the hello (weights on the PUB stream have
    no hello): another is refused."""


Message = (
    Hello
    | HelloReply
    | ObservationRequest
    | ChunkReply
    | ErrorReply
    | Heartbeat
    | HeartbeatAck
    | HealthRequest
    | HealthReply
    | WeightsAnnouncement
    | WeightsRequest
    | TransitionBatch
)
"""Any message of the protocol."""
