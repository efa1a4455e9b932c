"""The latency / sim2sim benchmark machinery on the simulated arm: ACT ensembling,
stepped determinism, resumable runs, Ray fan-out, report files, real-time deploy path."""

from __future__ import annotations

import dataclasses
import json
import logging

import numpy as np
import pytest

from robotrl.bench import latency, sim2sim
from robotrl.bench.cells import BenchSetup, Cell, run_cell, setup_policy
from robotrl.bench.runner import CACHE_FILE, run_cells
from robotrl.core.policy import ActionChunk, PolicyMetadata, PolicyObservation
from robotrl.inference.delayed import DelaySpec
from robotrl.inference.ensemble import EnsembleExecutor, ensemble_weights
from robotrl.inference.executor import LocalChunkSource
from robotrl.inference.runner import EpisodeRunner
from robotrl.inference.stepped import STEPPED_MODES, run_stepped_episode
from robotrl.sim.scenario import get_scenario

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SEED = 100_000


@pytest.fixture(scope="module")
def env():
    from robotrl.sim.env import TaskEnv

    logging.getLogger("robotrl.hardware.safety").setLevel(logging.ERROR)
    env = TaskEnv("reach", cameras=())
    yield env
    env.close()


class TickPolicy:
    """Every row of a chunk is the home pose with joint 0 at 0.001 x its observation tick."""

    def __init__(self, home: np.ndarray, horizon: int) -> None:
        self.home, self.horizon = home, horizon

    @property
    def metadata(self) -> PolicyMetadata:
        return PolicyMetadata("tick", self.horizon, len(self.home), 30.0, len(self.home))

    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
        row = self.home.copy()
        row[0] += 0.001 * obs.tick
        return ActionChunk(np.tile(row, (self.horizon, 1)), obs.tick)

    def reset(self) -> None:
        pass


class EstimatingTickPolicy(TickPolicy):
    """A `TickPolicy` with a slow pathway whose latent is the observation's env_state plus
    `bias`, read back as its estimate of env_state."""

    def __init__(self, home: np.ndarray, horizon: int, bias: np.ndarray) -> None:
        super().__init__(home, horizon)
        self.bias, self.calls = bias, 0

    def encode_slow(self, obs: PolicyObservation) -> np.ndarray:
        return np.asarray(obs.env_state) + self.bias

    def predict_chunk(self, obs: PolicyObservation, latent=None, latent_age_ticks: int = 0) -> ActionChunk:
        self.calls += 1
        chunk = super().predict_chunk(obs)
        return ActionChunk(chunk.actions_rad, obs.tick + obs.delay_ticks)

    def estimate_env_state(self, latent: np.ndarray) -> np.ndarray:
        return latent


@pytest.mark.parametrize("delay", [0, 2])
def test_ensemble_averages_every_prediction_for_the_tick_oldest_weighted_most(env, delay):
    h = 5
    env.reset(0)
    home = env.robot.read().q_rad.copy()
    source = LocalChunkSource(TickPolicy(home, h), delay_ticks=delay)
    executor = EnsembleExecutor(env.robot, source)
    runner = EpisodeRunner(env.robot, env, executor, env.clock)
    runner.begin(0)
    for _ in range(12):
        runner.tick()
    for record in executor.trace[delay:]:
        t = record.tick
        obs_ticks = np.arange(max(0, t - h + 1), t - delay + 1)  # chunks made at r cover r..r+4, in by r+d
        w = ensemble_weights(len(obs_ticks))
        assert record.requested_rad[0] == pytest.approx(home[0] + 0.001 * float(w @ obs_ticks))
        assert record.obs_tick == round(float(w @ obs_ticks)) and not record.paused
    assert all(r.paused for r in executor.trace[:delay])
    assert len(executor.received) == 12 - delay


@pytest.mark.parametrize("mode", STEPPED_MODES)
def test_stepped_episode_is_deterministic_for_a_seed(env, mode):
    jitter = DelaySpec(2, 6)
    runs = [
        run_stepped_episode(env, 3, mode, jitter.draw, threshold=1.0, execute_horizon=15, initial_delay_ticks=6)
        for _ in range(2)
    ]
    a, b = runs
    assert a.ticks == b.ticks and a.success == b.success and len(a.trace) == len(b.trace)
    np.testing.assert_array_equal(a.requested_rad(), b.requested_rad())
    np.testing.assert_array_equal([r.sent_rad for r in a.trace], [r.sent_rad for r in b.trace])
    assert [(r.chunk_id, r.obs_tick, r.paused) for r in a.trace] == [
        (r.chunk_id, r.obs_tick, r.paused) for r in b.trace
    ]


def test_cell_records_do_not_depend_on_what_ran_before(env):
    setup, nominal = BenchSetup(), get_scenario("nominal")
    cell = Cell(nominal, "vlash", DelaySpec(4, 4), SEED)
    first = run_cell(setup, cell)
    run_cell(setup, Cell(nominal, "naive", DelaySpec(2, 6), SEED + 1))
    assert run_cell(setup, cell) == first
    assert first["reaction_ticks"] is not None and first["jump_tick"] is not None


def test_a_noise_scale_loads_its_own_policy_and_keys_its_own_episodes(tmp_path, tiny_flow):
    tiny_flow().save(tmp_path / "ck")
    sampled, central = (BenchSetup(task="reach", checkpoint=str(tmp_path / "ck"), noise_scale=s) for s in (1.0, 0.0))
    assert setup_policy(sampled).noise_scale == 1.0 and setup_policy(central).noise_scale == 0.0
    assert sampled.fingerprint() != central.fingerprint()  # cached sampled episodes never stand for central ones


def test_several_requests_in_flight_react_within_the_inference_delay():
    nominal, delay = get_scenario("nominal"), DelaySpec(4, 4)
    one, four = BenchSetup(), BenchSetup(max_in_flight=4)
    assert one.fingerprint() != four.fingerprint()  # cached episodes of one never stand for the other
    for seed in range(SEED, SEED + 4):
        pipelined = run_cell(four, Cell(nominal, "vlash", delay, seed))
        single = run_cell(one, Cell(nominal, "vlash", delay, seed))
        assert pipelined["reaction_ticks"] == 4  # the request of the jump tick itself
        assert 4 <= single["reaction_ticks"] <= 7  # the first request at or after it: up to d - 1 later
        assert pipelined["chunks"] > 3 * single["chunks"]
        assert pipelined["success"] and single["success"]
    sync = run_cell(four, Cell(nominal, "sync", delay, SEED))  # sync keeps one request in flight
    assert sync["chunks"] == run_cell(one, Cell(nominal, "sync", delay, SEED))["chunks"]


def test_pick_place_expert_keeps_its_plan_across_chunks():
    setup = BenchSetup(task="pick_place")
    record = run_cell(setup, Cell(get_scenario("nominal"), "vlash", DelaySpec(4, 4), 1))
    assert record["success"] and record["step_clamps"] == 0 and record["reaction_ticks"] is None


def test_ray_and_local_give_the_same_episode_records(tmp_path):
    pytest.importorskip("ray")
    setup, nominal = BenchSetup(), get_scenario("nominal")
    cells = [Cell(nominal, mode, DelaySpec(2, 6), SEED + i) for mode in ("sync", "vlash") for i in range(2)]
    local = run_cells(run_cell, setup, cells, tmp_path / "local", progress=False)
    remote = run_cells(run_cell, setup, cells, tmp_path / "ray", use_ray=True, progress=False)
    assert remote == local


def test_latency_run_writes_report_and_resumes(tmp_path):
    setup = BenchSetup()
    kwargs = dict(
        delays=[DelaySpec(0, 0), DelaySpec(4, 4)],
        modes=["sync", "vlash", "ensemble"],
        episodes=2,
        seed0=SEED,
        out_dir=tmp_path,
        progress=False,
    )
    results = latency.run(setup, **kwargs)
    assert len(results["rows"]) == 6 and {t["target"] for t in results["targets"]}
    lines = (tmp_path / CACHE_FILE).read_text().splitlines()
    assert len(lines) == 12
    again = latency.run(setup, **kwargs)  # every cell cached: nothing runs again
    assert (tmp_path / CACHE_FILE).read_text().splitlines() == lines
    assert again["rows"] == results["rows"]
    loaded = json.loads((tmp_path / "results.json").read_text())
    assert loaded["rows"][0]["mode"] == "sync"
    report = (tmp_path / "report.md").read_text()
    assert "| mode | delay | success | wilson95 |" in report
    for name in ("success_vs_delay.png", "reaction_time.png", "boundary_jumps.png", "speedup.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG_SIGNATURE
        assert f"]({name})" in report
    changed = latency.run(dataclasses.replace(setup, threshold=0.5), **{**kwargs, "modes": ["vlash"], "episodes": 1})
    assert changed["episode_records"] == 2  # another setup: its own cells, the old lines kept
    assert len((tmp_path / CACHE_FILE).read_text().splitlines()) == 14


def test_cli_latency_smoke(tmp_path):
    from robotrl.cli import main

    assert (
        main(
            [
                "bench",
                "latency",
                "--episodes",
                "1",
                "--delays",
                "2",
                "--modes",
                "sync,vlash,ensemble",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "latency" / "results.json").read_text())["bench"] == "latency"
    assert main(["bench", "latency", "--modes", "warp", "--out", str(tmp_path)]) == 2
    shifted = tmp_path / "shifted"
    assert (
        main(
            [
                "bench",
                "latency",
                "--scenario",
                "shifted",
                "--episodes",
                "1",
                "--delays",
                "2",
                "--modes",
                "sync",
                "--out",
                str(shifted),
            ]
        )
        == 0
    )
    assert json.loads((shifted / "latency" / "results.json").read_text())["scenario"] == "shifted"
    records = [json.loads(line) for line in (shifted / "latency" / CACHE_FILE).read_text().splitlines()]
    assert [r["scenario"] for r in records] == ["shifted"]  # the episode ran in shifted physics


def test_sim2sim_stepped_variants_and_report(tmp_path):
    results = sim2sim.run(
        BenchSetup(),
        modes=["vlash"],
        delay_a=DelaySpec(2, 2),
        latency_b=DelaySpec(2, 6),
        jitter=0.5,
        episodes=1,
        realtime_episodes=0,
        seed0=SEED,
        out_dir=tmp_path,
        progress=False,
    )
    names = [r["variant"] for r in results["rows"]]
    assert names[0] == "A (nominal)" and "camera_shift_m" not in names  # the expert reads no camera
    assert {"friction_scale", "mass_scale", "kp_scale", "damping_scale", "obs_noise_rad", "shifted (all)"} <= set(names)
    jitter_row = next(r for r in results["rows"] if r["variant"].startswith("control jitter"))
    assert jitter_row["stepped_b"] is None  # real time only
    assert (tmp_path / "sim2sim_success.png").read_bytes()[:8] == PNG_SIGNATURE
    assert "| variant | mode | A->A success |" in (tmp_path / "report.md").read_text()


def test_realtime_episode_through_the_deploy_path_with_latency_and_jitter():
    from robotrl.bench.realtime import RealtimeCell, run_realtime_cell

    cell = RealtimeCell(
        "latency+jitter", get_scenario("nominal"), "vlash", SEED, max_ticks=30, latency=DelaySpec(2, 3), jitter=0.5
    )
    record = run_realtime_cell(BenchSetup(), cell)
    assert record["key"] == cell.key and record["ticks"] == 30 and record["missed_ticks"] >= 0
    assert record["delay_p50_ticks"] is not None and record["delay_p50_ticks"] >= 2  # the model sleeps 2-3 ticks


def test_realtime_requests_in_flight_run_side_by_side_on_the_servers_workers():
    from robotrl.bench.realtime import RealtimeCell, run_realtime_cell

    cell = RealtimeCell("latency", get_scenario("nominal"), "vlash", SEED, max_ticks=45, latency=DelaySpec(3, 3))
    one = run_realtime_cell(BenchSetup(), cell)
    three = run_realtime_cell(BenchSetup(max_in_flight=3), cell)
    # a reply every 3 ticks with one in flight; about one per tick with three on three workers
    assert three["chunks"] >= 2 * one["chunks"] and one["chunks"] >= 8
    assert three["delay_p50_ticks"] == pytest.approx(3, abs=1)


def test_realtime_rows_compare_with_the_stepped_interval():
    stepped = [
        {
            "scenario": "nominal",
            "mode": "vlash",
            "delay": "4",
            "successes": 45,
            "episodes": 50,
            "wilson95_low": 0.79,
            "wilson95_high": 0.96,
        }
    ]
    rt = [
        {
            "variant": "d=4",
            "mode": "vlash",
            "success": ok,
            "delay_p50_ticks": 4.0 + i % 2,
            "missed_ticks": 1,
            "step_clamps": 0,
        }
        for i, ok in enumerate([True] * 9 + [False])
    ]
    (row,) = latency.realtime_rows(rt, stepped, [DelaySpec(4, 4), DelaySpec(8, 8)], ["sync", "vlash"])
    assert (row["successes"], row["episodes"], row["within_stepped"]) == (9, 10, True)  # 0.9 in [0.79, 0.96]
    assert row["delay_p50_ticks"] == 4.5 and row["missed_ticks"] == 10
    assert row["cells"][4] == "45/50 [79%, 96%]" and row["cells"][5] == "met"
    rt = [dict(r, success=i < 5) for i, r in enumerate(rt)]
    (row,) = latency.realtime_rows(rt, stepped, [DelaySpec(4, 4)], ["vlash"])
    assert row["within_stepped"] is False and row["cells"][5] == "MISSED"  # 0.5 is outside


def _row(mode: str, delay: str, rate: float, reaction: float | None = None) -> dict:
    keys = ("scenario", "mode", "delay", "success_rate", "reaction_ticks_median", "speedup")
    return dict(zip(keys, ("nominal", mode, delay, rate, reaction, None), strict=True))


def test_a_policys_estimate_of_env_state_is_compared_with_the_simulators_at_every_request(env):
    """A policy reading its estimate of the privileged state (from its cameras) has it
    compared with the simulator's env_state at each request's observation; the cell keeps
    the mean square per feature, the summary pools episodes by their requests."""
    from robotrl.bench.cells import episode_record
    from robotrl.bench.summary import estimate_rms

    env.reset(0)
    bias = 0.01 * np.arange(1, env.env_state_dim + 1)
    policy = EstimatingTickPolicy(env.robot.read().q_rad.copy(), 4, bias)
    episode = run_stepped_episode(env, SEED, "vlash", 2, policy=policy)
    assert episode.estimate_errors.shape == (policy.calls, env.env_state_dim) and policy.calls > 10
    np.testing.assert_allclose(episode.estimate_errors, np.tile(bias, (policy.calls, 1)), atol=1e-6)
    record = episode_record(BenchSetup(), Cell(get_scenario("nominal"), "vlash", DelaySpec(2, 2), SEED), episode, env)
    assert record["estimate_requests"] == policy.calls
    np.testing.assert_allclose(record["estimate_mean_square"], bias**2, rtol=1e-4)
    other = {"estimate_requests": 3 * policy.calls, "estimate_mean_square": ((3 * bias) ** 2).tolist()}
    np.testing.assert_allclose(estimate_rms([record, other]), bias * np.sqrt((1 + 3 * 9) / 4), rtol=1e-4)
    assert estimate_rms([{"estimate_requests": 0, "estimate_mean_square": None}]) is None
    rows = [{"mode": "vlash", "delay": "2", "estimate_requests": 4, "estimate_rms": [0.0123, 0.5]}, {"mode": "sync"}]
    assert latency.estimate_table(rows) == [("vlash", "2", 4, "0.0123 0.5")]
    plain = run_stepped_episode(env, SEED, "sync", 2, policy=TickPolicy(env.robot.read().q_rad.copy(), 4))
    assert len(plain.received) > 10 and plain.estimate_errors is None


def test_targets_are_the_vlash_issues_per_task():
    track = [  # results.md section 19: the state-based track recipe
        *(_row("sync", d, r) for d, r in (("0", 1.0), ("4", 0.54), ("8", 0.02))),
        *(_row("naive", d, r) for d, r in (("0", 1.0), ("4", 1.0), ("8", 0.84))),
        *(_row("vlash", d, r) for d, r in (("0", 1.0), ("4", 1.0), ("8", 0.9))),
    ]
    track[-2] |= {"speedup": 1.0, "speedup_limit": 1.267, "speedup_of_limit": 0.79}  # fixed-length episodes
    met = {t["target"]: t["met"] for t in latency.check_targets(track, "track")}
    assert met == {
        "d = 4: vlash success >= sync - 3 points": True,
        "d = 4: vlash success >= naive + 20 points": False,  # naive is already at 100%
        "vlash at d = 8 keeps >= 80% of its d = 0 success": True,  # 90%
    }
    pick = [_row("naive", "0", 0.92), _row("vlash", "0", 0.98), _row("naive", "2", 0.96), _row("vlash", "2", 0.92)]
    (t,) = latency.check_targets(pick, "pick_place")
    assert t["met"] is False and t["value"] == "d = 0: 98% vs 92%, d = 2: 92% vs 96%"
    reach = [_row("sync", "4", 1.0, 14.0), _row("vlash", "4", 1.0, 5.0)]
    met = {t["target"]: t["met"] for t in latency.check_targets(reach, "reach")}
    assert met["d = 4: vlash reaction time <= sync / 3"] is False  # 5 > 4.67
    reach[0]["reaction_ticks_median"] = 15.0
    assert [t["met"] for t in latency.check_targets(reach, "reach")][-1] is True


def test_latency_run_adds_real_time_episodes_through_the_server(tmp_path):
    results = latency.run(
        BenchSetup(),
        delays=[DelaySpec(2, 2)],
        modes=["vlash", "ensemble"],
        episodes=1,
        seed0=SEED,
        out_dir=tmp_path,
        realtime_episodes=1,
        progress=False,
    )
    (row,) = results["realtime"]  # ensemble has no deploy path: stepped only
    assert row["mode"] == "vlash" and row["episodes"] == 1 and row["delay_p50_ticks"] >= 2
    assert row["within_stepped"] is not None
    assert "## Real time through the server" in (tmp_path / "report.md").read_text()
