"""`robotrl bench hostile` on a small flood: the server survives every kind of bad frame
and the well-behaved robot only ever gets its own answers."""

from __future__ import annotations

import json

from robotrl.bench import hostile
from robotrl.cli import main
from robotrl.wire import transport


def test_every_hostile_frame_maker_makes_frames():
    import numpy as np

    makers = hostile.hostile_frames(np.random.default_rng(0))
    assert len(makers) == 13
    assert all(isinstance(part, bytes) for make in makers for part in make())


def test_a_small_flood_kills_no_thread_and_misroutes_no_reply(tmp_path):
    assert main(["bench", "hostile", "--frames", "400", "--requests", "30", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "hostile" / "results.json").read_text())
    assert results["hostile_frames_sent"] == 400
    assert results["dead_threads"] == 0 and results["wrong_replies"] == 0
    # the garbage was seen and counted, then its senders quarantined: the rest dropped unread
    assert results["errors"]["protocol"] >= transport.QUARANTINE_STRIKES and results["quarantined_drops"] > 100
    assert results["errors"]["wrong robot id"] > 0 and results["loaded_round_trips"] >= 30
