"""Latency bookkeeping: windowed percentiles of server-side timings."""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

from robotrl.core.health import percentiles


class LatencyStats:
    """Keeps the last `window` samples of each timing (nanoseconds)."""

    def __init__(self, window: int = 10_000) -> None:
        self._samples: dict[str, deque[int]] = {}
        self._window = window
        self._lock = threading.Lock()

    def add(self, **timings_ns: int) -> None:
        with self._lock:
            for key, value in timings_ns.items():
                self._samples.setdefault(key, deque(maxlen=self._window)).append(int(value))

    def percentiles_ms(self, key: str, qs: tuple[float, ...] = (50, 95, 99)) -> dict[str, float]:
        """{"p50": ..., "p95": ..., "p99": ...} in milliseconds; empty without samples."""
        with self._lock:
            samples = np.asarray(self._samples.get(key, ()), dtype=np.float64)
        return percentiles(samples / 1e6, qs)

    def count(self, key: str) -> int:
        with self._lock:
            return len(self._samples.get(key, ()))
