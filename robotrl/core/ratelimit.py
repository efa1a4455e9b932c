"""`LogLimiter`: which of many repeated events to log, so a flood makes few lines."""

from __future__ import annotations

import time

LOG_EVERY_S = 5.0
"""Shortest interval between two log lines of one kind of trouble (the rest are counted)."""


class LogLimiter:
    """`due(kind)` is True for the first event of each kind, then at most once per
    `interval_s` (monotonic seconds) per kind."""

    def __init__(self, interval_s: float = LOG_EVERY_S) -> None:
        self.interval_s = interval_s
        self._logged_at_s: dict[str, float] = {}

    def due(self, kind: str) -> bool:
        now = time.monotonic()
        if now - self._logged_at_s.get(kind, -1e9) < self.interval_s:
            return False
        self._logged_at_s[kind] = now
        return True
