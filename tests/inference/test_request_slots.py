"""`RequestSlots`: one waiting request per robot, the newest, in the order robots started waiting."""

from __future__ import annotations

import threading
import time

from robotrl.inference.request_slots import RequestSlots


def test_a_robots_new_request_replaces_its_waiting_one_and_keeps_its_place():
    slots: RequestSlots[int] = RequestSlots()
    slots.put("a", 1)
    slots.put("b", 10)
    slots.put("a", 2)
    slots.put("c", 20)
    slots.put("a", 3)
    assert len(slots) == 3 and slots.superseded == 2
    assert slots.take(2, timeout_s=0) == {"a": 3, "b": 10}
    assert slots.take(5, timeout_s=0) == {"c": 20}
    assert slots.take(5, timeout_s=0.01) == {} and len(slots) == 0


def test_take_waits_for_the_first_request():
    slots: RequestSlots[str] = RequestSlots()
    threading.Timer(0.05, slots.put, ("a", "late")).start()
    start = time.monotonic()
    assert slots.take(4, timeout_s=5) == {"a": "late"}
    assert time.monotonic() - start < 4  # woken by the put, not by the timeout
