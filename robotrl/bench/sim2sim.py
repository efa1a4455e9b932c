"""`robotrl bench sim2sim`: scenario A -> A and A -> B, one perturbation at a time.

A is the nominal scenario with a fixed inference delay. Each B changes one thing:
one `Scenario` field at the value of the `shifted` scenario (friction, masses, actuator
gains, joint damping, observation noise, camera pose), all of them at once (`shifted`),
the inference latency distribution, or the control rate (jitter: real-time only). Stepped
episodes go through the executor, `LocalChunkSource` and `SafeRobot`; a few real-time
episodes per variant go through the real deploy path (`robotrl.bench.realtime`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import cast

import numpy as np

from robotrl.bench.cells import BenchSetup, Cell, chunk_horizon, make_env, run_cell, setup_policy
from robotrl.bench.plots import plot_sim2sim
from robotrl.bench.realtime import REALTIME_MODES, RealtimeCell, run_realtime_cell
from robotrl.bench.report import Table, write_report
from robotrl.bench.runner import run_cells
from robotrl.bench.summary import find_row, sanitize, summarize, wilson_text
from robotrl.inference.delayed import DelaySpec
from robotrl.sim.scenario import Scenario, get_scenario

COLUMNS = (
    "variant",
    "mode",
    "A->A success",
    "A->B success",
    "change",
    "A->B ticks",
    "A->B clamps",
    "A->B reaction",
    "RT A->A",
    "RT A->B",
    "RT missed ticks",
    "RT delay p50",
)


@dataclass(frozen=True)
class Variant:
    """One B: its scenario, injected delay (stepped) or latency (real time), jitter."""

    name: str
    scenario: Scenario
    delay: DelaySpec
    latency: DelaySpec | None = None
    jitter: float = 0.0
    stepped: bool = True
    """False for control-rate jitter: only the real-time loop can jitter."""


def variants(delay_a: DelaySpec, latency_b: DelaySpec, jitter: float, uses_camera: bool) -> list[Variant]:
    """A (first) and every single perturbation B, the Scenario ones derived field by field
    from the `shifted` scenario. Camera pose is left out for a policy that reads no camera."""
    nominal, shifted = get_scenario("nominal"), get_scenario("shifted")
    out = [Variant("A (nominal)", nominal, delay_a)]
    for f in fields(Scenario):
        value = getattr(shifted, f.name)
        if f.name == "name" or value == getattr(nominal, f.name) or (f.name == "camera_shift_m" and not uses_camera):
            continue
        out.append(Variant(f.name, replace(nominal, name=f.name, **{f.name: value}), delay_a))
    out.append(Variant("shifted (all)", shifted, delay_a))
    out.append(Variant(f"latency {latency_b.label}", nominal, latency_b, latency=latency_b))
    out.append(Variant(f"control jitter {jitter:.0%}", nominal, delay_a, jitter=jitter, stepped=False))
    return out


def run(
    setup: BenchSetup,
    *,
    modes: list[str],
    delay_a: DelaySpec,
    latency_b: DelaySpec,
    jitter: float,
    episodes: int,
    realtime_episodes: int,
    seed0: int,
    out_dir: Path,
    use_ray: bool = False,
    ray_address: str | None = None,
    progress: bool = True,
) -> dict:
    """Run (or resume) the stepped and real-time episodes; write report.md, results.json, plots."""
    uses_camera = bool(setup.checkpoint and setup_policy(setup).metadata.cameras)
    vs = variants(delay_a, latency_b, jitter, uses_camera)
    start = time.perf_counter()
    cells = [Cell(v.scenario, m, v.delay, seed0 + i) for v in vs if v.stepped for m in modes for i in range(episodes)]
    records = run_cells(
        run_cell,
        setup,
        cells,
        out_dir,
        use_ray=use_ray,
        ray_address=ray_address,
        desc=f"sim2sim {setup.task} stepped",
        progress=progress,
    )
    env = make_env(setup, vs[0].scenario)
    max_ticks = env.task.max_ticks
    rt_cells = [
        RealtimeCell(v.name, v.scenario, m, seed0 + i, max_ticks, v.latency, v.jitter)
        for v in vs
        for m in modes
        if m in REALTIME_MODES
        for i in range(realtime_episodes)
    ]
    rt_records = run_cells(
        run_realtime_cell, setup, rt_cells, out_dir, desc=f"sim2sim {setup.task} real time", progress=progress
    )
    wall_s = time.perf_counter() - start
    s = min(setup.execute_horizon, chunk_horizon(setup))
    summary = summarize(records, s, env.dt_s)
    rows = [table_row(v, m, summary, rt_records, vs[0]) for v in vs for m in modes]
    plot_rows = [
        dict(r, scenario=v.name)
        for v in vs
        if v.stepped
        for m in modes
        if (r := find_row(summary, m, v.delay.label, v.scenario.name)) is not None
    ]
    plots = plot_sim2sim(plot_rows, out_dir, setup.task, vs[0].name)
    results = {
        "bench": "sim2sim",
        "setup": asdict(setup),
        "policy": setup.checkpoint or "scripted expert",
        "modes": modes,
        "episodes": episodes,
        "realtime_episodes": realtime_episodes,
        "seeds": [seed0, seed0 + episodes - 1],
        "variants": [_variant_doc(v) for v in vs],
        "wall_s": wall_s,
        "rows": rows,
        "stepped": summary,
        "realtime": rt_records,
    }
    write_report(
        out_dir,
        f"Sim-to-sim benchmark: {setup.task}",
        [
            Table(
                "A -> A and A -> B per perturbation (stepped; RT = real time through the deploy path)",
                COLUMNS,
                [r["cells"] for r in rows],
            )
        ],
        results,
        plots=plots,
        notes=notes(setup, delay_a, episodes, realtime_episodes, wall_s),
    )
    return cast(dict, sanitize(results))  # a dict sanitizes to a dict


def table_row(v: Variant, mode: str, summary: list[dict], rt_records: list[dict], a: Variant) -> dict:
    """The A->A / A->B comparison of `v` under `mode`, with its printed cells."""
    row_a = find_row(summary, mode, a.delay.label, a.scenario.name)
    row_b = find_row(summary, mode, v.delay.label, v.scenario.name) if v.stepped else None
    rt_a = [r for r in rt_records if r["variant"] == a.name and r["mode"] == mode]
    rt_b = [r for r in rt_records if r["variant"] == v.name and r["mode"] == mode]
    change = None if row_a is None or row_b is None else row_b["success_rate"] - row_a["success_rate"]
    reaction = None if row_b is None else row_b["reaction_ticks_median"]
    cells = (
        v.name,
        mode,
        _success(row_a),
        _success(row_b) if v.stepped else "n/a (real time only)",
        "-" if change is None else f"{change * 100:+.0f} pts",
        "-" if row_b is None else f"{row_b['mean_ticks']:.1f}",
        "-" if row_b is None else row_b["step_clamps"],
        "-" if reaction is None else f"{reaction:.1f}",
        _rt_success(rt_a),
        _rt_success(rt_b),
        sum(r["missed_ticks"] for r in rt_b) if rt_b else "-",
        _median(r["delay_p50_ticks"] for r in rt_b),
    )
    return {
        "variant": v.name,
        "mode": mode,
        "success_change": change,
        "stepped_a": row_a,
        "stepped_b": row_b,
        "realtime_a": _rt_summary(rt_a),
        "realtime_b": _rt_summary(rt_b),
        "cells": cells,
    }


def _success(row: dict | None) -> str:
    if row is None:
        return "-"
    return f"{row['successes']}/{row['episodes']} {wilson_text(row)}"


def _rt_success(records: list[dict]) -> str:
    return f"{sum(r['success'] for r in records)}/{len(records)}" if records else "-"


def _rt_summary(records: list[dict]) -> dict | None:
    if not records:
        return None
    return {
        "episodes": len(records),
        "successes": sum(r["success"] for r in records),
        "mean_ticks": float(np.mean([r["ticks"] for r in records])),
        "missed_ticks": sum(r["missed_ticks"] for r in records),
        "step_clamps": sum(r["step_clamps"] for r in records),
    }


def _median(values) -> str:
    finite = [v for v in values if v is not None]
    return f"{np.median(finite):.1f}" if finite else "-"


def _variant_doc(v: Variant) -> dict:
    return {
        "name": v.name,
        "scenario": asdict(v.scenario),
        "delay": v.delay.label,
        "latency": None if v.latency is None else v.latency.label,
        "jitter": v.jitter,
        "stepped": v.stepped,
    }


def notes(setup: BenchSetup, delay_a: DelaySpec, episodes: int, realtime_episodes: int, wall_s: float) -> list[str]:
    return [
        f"Policy: {setup.checkpoint or 'the task scripted expert as a chunk policy (privileged state, no camera)'}. "
        f"A = nominal physics, injected delay d = {delay_a.label} ticks. {episodes} stepped seeds per cell, the "
        f"same in A and B; {realtime_episodes} real-time episode(s) per cell; {wall_s:.0f} s wall time.",
        "Control-rate jitter exists only in real time (each command goes out up to that fraction of a period late, "
        "by a random sleep): stepped mode advances the physics by exactly one period per tick.",
        "Latency in real time: the served policy sleeps d * dt per call (d drawn per call) on top of its own time.",
        "Camera pose only matters to a policy that reads images; it is left out for one that does not.",
        "RT: successes / episodes on the wall clock (PolicyServer on loopback ZMQ, the episode runner); missed ticks "
        "are control periods the loop overran on this machine; delay p50 is the measured inference delay in ticks.",
    ]
