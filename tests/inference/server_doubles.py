"""Test doubles shared by the server tests: a ramp policy and an observation request."""

from __future__ import annotations

import time

import numpy as np

from robotrl.core.policy import ActionChunk, PolicyMetadata, PolicyObservation
from robotrl.wire.messages import ObservationRequest

H = 8


class RampPolicy:
    """Row i of the chunk = forwarded state + (i + 1) * 0.01 on every joint; records the
    largest batch it was asked for. Sleeps `model_s` per call (simulated model time)."""

    def __init__(self, model_s: float = 0.0) -> None:
        self.model_s = model_s
        self.batches: list[int] = []
        self.version_seen = []

    @property
    def metadata(self) -> PolicyMetadata:
        return PolicyMetadata("ramp", H, 6, 30.0, 6)

    def predict_chunks(self, observations: list[PolicyObservation]) -> list[ActionChunk]:
        self.batches.append(len(observations))
        time.sleep(self.model_s)
        steps = 0.01 * np.arange(1, H + 1)[:, None]
        return [ActionChunk(obs.state_rad + steps, obs.tick + obs.delay_ticks) for obs in observations]

    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
        return self.predict_chunks([obs])[0]

    def load_weights(self, weights) -> None:
        self.version_seen.append(weights)

    def reset(self) -> None:
        pass


def request(robot_id: str, request_id: int, state, tick=10, delay=0, in_flight=None):
    return ObservationRequest(
        robot_id=robot_id,
        request_id=request_id,
        tick=tick,
        state=np.asarray(state, dtype=np.float64),
        in_flight=np.zeros((0, 6)) if in_flight is None else np.asarray(in_flight),
        delay_ticks=delay,
    )
