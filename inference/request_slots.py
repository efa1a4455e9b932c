"""`RequestSlots`: the server's waiting requests, one slot per robot.

A robot's new request replaces the one of its own still waiting (that request is
superseded: its robot's executor drops a late reply to it anyway, `Executor._accept`), and
keeps its place in line. So a robot that asks faster than the model answers (several
requests in flight, `ExecutorConfig.max_in_flight`, or a flooding peer) never builds a
backlog: the model always answers its newest observation, and the other robots wait for
at most one request of it.
"""

from __future__ import annotations

import threading
import time


class RequestSlots[T]:
    """The newest waiting item of each robot, taken oldest slot first; thread-safe.

    Attributes:
        superseded: items replaced by a newer one of the same robot before being taken.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._slots: dict[str, T] = {}  # insertion order: the order robots started waiting
        self.superseded = 0

    def put(self, robot_id: str, item: T) -> None:
        with self._cond:
            if robot_id in self._slots:
                self.superseded += 1
            self._slots[robot_id] = item  # a replaced slot keeps its place
            self._cond.notify()

    def take(self, max_items: int, timeout_s: float) -> dict[str, T]:
        """Up to `max_items` {robot id: item}, oldest slots first, waiting up to
        `timeout_s` for the first; {} when none came."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not self._slots:
                left = deadline - time.monotonic()
                if left <= 0 or not self._cond.wait(left):
                    if not self._slots:
                        return {}
            robots = list(self._slots)[:max_items]
            return {robot: self._slots.pop(robot) for robot in robots}

    def count_superseded(self, count: int) -> None:
        """Count `count` items superseded after they were taken (a worker that took a
        robot's request and then its newer one keeps the newer)."""
        with self._cond:
            self.superseded += count

    def __len__(self) -> int:
        with self._cond:
            return len(self._slots)
