"""`bench learner`'s loop measurements at toy sizes: the loop-vs-bare row (its ratio and
prefetch counts) and publish -> first chunk through a real server on loopback."""

from __future__ import annotations

import pytest
import torch

from robotrl.bench import learner_loop, weights_latency

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as the benchmark runs on the CPU (two on this shared 2-core
    machine make small updates many times slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_loop_vs_bare_row_has_a_sane_ratio():
    row = learner_loop.loop_vs_bare(learner_loop.bench_spec(None, 0), "state+env", 32, 6, CPU, repeats=1)
    assert row["inputs"] == "state+env" and row["target_ratio"] == 0.9 and row["repeats"] == 1
    assert row["bare_updates_per_s"] > 0 and row["loop_updates_per_s"] > 0
    assert row["loop_prefetch"] is False  # on the CPU the learner does not prefetch by default
    assert row["loop_ratio"] == row["loop_no_prefetch_ratio"]
    for key in ("loop_ratio", "loop_prefetch_ratio", "loop_no_prefetch_ratio"):
        assert 0.2 < row[key] < 5.0, (key, row)  # loop / bare on a shared machine: the same order
    assert 0.5 < row["loop_update_share"] <= 1.0  # the loop's own overhead: under half of its time
    counts = row["prefetch_hits_misses"]
    assert counts["hits"] + counts["misses"] == 2 * 7  # utd 2, 7 updates (the first one untimed)
    assert counts["hits"] >= 2 * 7 - 2  # misses: the first batch and the first after version 0 -> 1 at most
    assert row["checkpoint_s"] > 0


def test_publish_to_first_chunk_through_a_real_server():
    result = weights_latency.run(CPU, updates_per_s=4.0, publishes=3)  # a publish every update
    assert result["publish_every"] == 1
    assert result["versions_published"] == 3 and result["versions_served"] >= 2
    assert 0 < result["publish_to_received_ms_p50"] <= result["publish_to_swapped_ms_p50"]
    assert result["publish_to_swapped_ms_p50"] <= result["publish_to_first_chunk_ms_p50"] < 5000
    assert result["stage_ms_p50"] > 0 and result["swap_ms_max"] is not None
    assert result["chunks"] > 3
