"""The executor in stepped mode on the simulated reach task (the simulator is the test
double): continuity at chunk boundaries, naive vs VLASH, sync pauses, success, and a
lost chunk source."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from robotrl.core.policy import ActionChunk, PolicyObservation, past_image_key
from robotrl.core.robot import RobotState
from robotrl.hardware.safety import SafetyLimits
from robotrl.inference.chunking import boundary_discontinuity_ratio
from robotrl.inference.executor import Executor, ExecutorConfig, LocalChunkSource, step_limit_rad
from robotrl.inference.runner import EpisodeRunner, latency_summary
from robotrl.inference.stepped import ExpertChunkPolicy, run_stepped_episode

H = 16
SEEDS = range(3)


@pytest.fixture(scope="module")
def env():
    from robotrl.sim.env import TaskEnv

    env = TaskEnv("reach", cameras=())
    yield env
    env.close()


def _boundary_ratio(episode) -> float:
    return boundary_discontinuity_ratio(episode.requested_rad(), episode.switch_ticks())


def test_local_source_delivers_after_the_injected_delay():
    class Constant:
        def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
            return ActionChunk(np.zeros((2, 1)), obs.tick + obs.delay_ticks)

    source = LocalChunkSource(Constant(), delay_ticks=3)
    source.request(PolicyObservation(np.zeros(1), tick=5, delay_ticks=3))
    assert source.poll(7) is None
    assert source.poll(8).start_tick == 8 and source.poll(8) is None
    drawn = [LocalChunkSource(Constant(), lambda rng: int(rng.integers(0, 100)), seed=7) for _ in range(2)]
    for s in drawn:
        s.request(PolicyObservation(np.zeros(1), tick=0))
    assert drawn[0]._pending[0][0] == drawn[1]._pending[0][0]  # same seed, same draw


@pytest.mark.parametrize("delay", [1, H // 2, H - 1])
def test_vlash_boundaries_stay_within_the_safety_step(env, delay):
    # (d >= 1: the chunk starts from a_(t+d-1). At d = 0 vlash conditions on the measured
    # state, exactly as naive does: test_at_delay_0_vlash_conditions_exactly_as_naive)
    limit = step_limit_rad(env.robot)  # SO-101 at 30 Hz: 3 rad/s / 30 = 0.1 rad (gripper 5/30)
    for seed in SEEDS:
        ep = run_stepped_episode(env, seed, "vlash", delay, H)
        requested = ep.requested_rad()
        assert len(ep.switch_ticks()) >= 3
        for k in ep.switch_ticks():
            assert np.all(np.abs(requested[k] - requested[k - 1]) <= limit + 1e-9), (seed, k)
        assert ep.step_clamps == 0
        assert all(r.delay_ticks == delay for r in ep.trace if not r.paused)
        assert all(r.tick - r.obs_tick >= delay for r in ep.trace if not r.paused)


@pytest.mark.parametrize("delay", [4, H // 2])
def test_naive_jumps_more_than_vlash_at_chunk_boundaries(env, delay):
    naive = [run_stepped_episode(env, seed, "naive", delay, H) for seed in SEEDS]
    vlash = [run_stepped_episode(env, seed, "vlash", delay, H) for seed in SEEDS]
    naive_ratio = np.median([_boundary_ratio(e) for e in naive])
    vlash_ratio = np.median([_boundary_ratio(e) for e in vlash])
    assert naive_ratio > 1.5 * vlash_ratio, (naive_ratio, vlash_ratio)
    assert sum(e.step_clamps for e in naive) > 0 == sum(e.step_clamps for e in vlash)


def test_sync_pauses_for_every_chunk(env):
    delay = 4
    ep = run_stepped_episode(env, 0, "sync", delay, H, execute_horizon=8)
    chunks = len(ep.received)
    assert delay * chunks <= ep.pauses <= delay * (chunks + 1)  # the last wait may be cut short
    paused = [r for r in ep.trace if r.paused]
    for prev, cur in zip(ep.trace, ep.trace[1:]):
        if cur.paused and prev.paused:
            np.testing.assert_array_equal(cur.sent_rad, prev.sent_rad)  # the arm holds still
    assert all(r.chunk_id == -1 for r in paused)
    assert run_stepped_episode(env, 0, "vlash", delay, H).pauses == delay  # the first chunk only
    assert run_stepped_episode(env, 0, "sync", 0, H, execute_horizon=8).pauses == 0


def test_vlash_reaches_the_target_at_delay_4(env):
    episodes = [run_stepped_episode(env, seed, "vlash", 4, H) for seed in range(10)]
    assert sum(e.success for e in episodes) >= 9


class RecordingExpert(ExpertChunkPolicy):
    """The scripted expert's chunks, keeping every observation it was asked for."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.seen: list[PolicyObservation] = []

    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
        self.seen.append(obs)
        return super().predict_chunk(obs)


def test_vlash_rtc_sends_the_plan_the_new_chunk_replaces(env):
    env.reset(0)
    policy = RecordingExpert(env.make_expert(0), H, env.spec)
    seen = policy.seen
    source = LocalChunkSource(policy, delay_ticks=4)
    executor = Executor(env.robot, source, H, ExecutorConfig("vlash+rtc"), initial_delay_ticks=4)
    runner = EpisodeRunner(env.robot, env, executor, env.clock)
    runner.begin(0)
    for _ in range(40):
        runner.tick()
    later = [obs for obs in seen if obs.prefix_rad is not None]
    assert later and seen[0].prefix_rad is None  # nothing queued before the first chunk
    for obs in later:
        start = obs.tick + obs.delay_ticks  # the new chunk's first tick
        # the chunk in service then: the last one received before the request
        previous = [r for r in executor.received if r.arrival_tick <= obs.tick][-1].chunk
        rows = previous.actions_rad[start - previous.start_tick :]
        assert obs.delay_ticks == 4 and len(obs.prefix_rad) == len(rows) > 0
        np.testing.assert_allclose(obs.prefix_rad, rows)
        # s_hat = a_(t+d-1): the previous plan's row just before the new chunk
        np.testing.assert_allclose(obs.state_rad, previous.actions_rad[start - 1 - previous.start_tick])


@pytest.mark.parametrize("threshold", [0.5, 1.0])
def test_at_delay_0_vlash_is_exactly_naive(env, threshold):
    """d = 0: vlash sends the policy the measured state (not the last target sent, which a
    position-servoed arm has not reached), keys the chunk at its observation tick and blends
    it into the queue as naive does, so the two runs are the same run: the same requests,
    the same targets sent, tick for tick. The expert's chunks start from the state they are
    given, so any difference in the state sent would show in the targets."""
    runs = {}
    for mode in ("naive", "vlash"):
        policy = RecordingExpert(env.make_expert(0), H, env.spec)
        runs[mode] = (policy.seen, run_stepped_episode(env, 0, mode, 0, H, threshold=threshold, policy=policy))
    (naive, naive_ep), (vlash, vlash_ep) = runs["naive"], runs["vlash"]
    assert len(naive) == len(vlash) >= 4
    for a, b in zip(naive, vlash):
        assert a.tick == b.tick and a.delay_ticks == b.delay_ticks == 0
        np.testing.assert_array_equal(a.state_rad, b.state_rad)
    np.testing.assert_array_equal(naive_ep.requested_rad(), vlash_ep.requested_rad())
    np.testing.assert_array_equal([r.sent_rad for r in naive_ep.trace], [r.sent_rad for r in vlash_ep.trace])
    assert naive_ep.success == vlash_ep.success

    # the chunks overlapped and were blended (0.3 old + 0.7 new), as naive async does: some
    # executed target is not the row its chunk planned for that tick
    def planned(r):
        chunk = vlash_ep.received[r.chunk_id].chunk
        return chunk.actions_rad[r.tick - chunk.start_tick]

    executed = [r for r in vlash_ep.trace if not r.paused]
    assert any(not np.allclose(r.requested_rad, planned(r)) for r in executed)


def test_at_delay_0_vlash_conditions_on_the_measured_state(env):
    """The state vlash sends at d = 0 is the measured one, not the last target sent: with a
    constant far target the arm lags it for many ticks, and the states sent are the
    readings."""
    env.reset(0)
    target = env.robot.read().q_rad + 0.2  # far enough that the arm lags it for many ticks
    seen: list[PolicyObservation] = []

    class Constant:
        def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
            seen.append(obs)
            return ActionChunk(np.repeat(target[None], H, axis=0), obs.tick + obs.delay_ticks)

    executor = Executor(env.robot, LocalChunkSource(Constant(), 0), H, ExecutorConfig("vlash"))
    runner = EpisodeRunner(env.robot, env, executor, env.clock)
    runner.begin(0)
    measured = {}
    for _ in range(40):
        measured[env.tick] = env.robot.read().q_rad
        runner.tick()
    assert len(seen) >= 4
    for obs in seen:
        np.testing.assert_allclose(obs.state_rad, measured[obs.tick])
    assert np.abs(seen[-1].state_rad - target).max() > 0.01  # the arm lags: the target would differ


@pytest.mark.parametrize("delay", [4, H // 2])
def test_every_async_mode_re_plans_at_the_same_ticks(env, delay):
    """A vlash chunk keyed at t + d runs H rows past it, d more than naive's; those rows do
    not count towards the threshold, so both modes request at the same ticks and execute
    rows of the same age (before, vlash's rows were up to d ticks older at d = 8)."""
    requests = {}
    for mode in ("naive", "vlash"):
        episode = run_stepped_episode(env, 0, mode, delay, H)
        requests[mode] = [r.obs_tick for r in episode.received]
        ages = [r.tick - r.obs_tick for r in episode.trace if not r.paused]
        assert max(ages) <= H - 1, (mode, max(ages))  # every executed row was planned < H ticks ago
    n = min(len(r) for r in requests.values())  # (an episode ends at success)
    assert n >= 6 and requests["naive"][:n] == requests["vlash"][:n]


def test_under_a_jittered_delay_vlash_plans_for_the_short_delays():
    """Delays drawn from U{2..6}: vlash forwards by the window's 5th percentile, so once a
    few replies are measured it plans for d = 2 and a later reply drops its first rows.
    Its executed rows are then at most a tick older than naive's on average; planning for
    the 95th percentile (6) made every early reply wait, 2.5 ticks older on this task."""
    from robotrl.inference.delayed import DelaySpec
    from robotrl.sim.env import TaskEnv

    jitter, track = DelaySpec(2, 6), TaskEnv("track", cameras=())
    try:
        ages, forwarded = {}, []
        for mode in ("naive", "vlash"):
            ages[mode] = []
            for seed in range(3):
                ep = run_stepped_episode(track, seed, mode, jitter.draw, 8, threshold=0.5, initial_delay_ticks=4)
                ages[mode] += [r.tick - r.obs_tick for r in ep.trace if not r.paused]
                if mode == "vlash":
                    forwarded += [r.request_delay_ticks for r in ep.received[10:]]
                    assert any(r.dropped_rows > 0 for r in ep.received)  # late replies drop rows
    finally:
        track.close()
    assert len(forwarded) >= 50 and max(forwarded) <= 3
    assert np.mean(ages["vlash"]) <= np.mean(ages["naive"]) + 1.0


class BlockedArm:
    """A robot whose joints stay at `q_rad` whatever it is told (an arm resting on an obstacle)."""

    limits = SafetyLimits()

    def __init__(self, spec, q_rad: np.ndarray) -> None:
        self.spec, self.q_rad = spec, np.array(q_rad, dtype=np.float64)

    def read(self) -> RobotState:
        return RobotState(q_rad=self.q_rad.copy(), timestamp_s=0.0)

    def command(self, q_rad: np.ndarray) -> np.ndarray:
        return np.asarray(q_rad, dtype=np.float64)


class Ramp:
    """Chunks moving every joint 0.01 rad per row on from the observed state."""

    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
        rows = obs.state_rad + 0.01 * np.arange(1, H + 1)[:, None]
        return ActionChunk(rows, obs.tick + obs.delay_ticks)


@pytest.mark.parametrize("band", [None, 0.03])
def test_vlash_carries_the_lag_of_a_blocked_arm_beyond_the_deadband(env, band):
    seen: list[PolicyObservation] = []

    class Recording(Ramp):
        def predict_chunk(self, obs):
            seen.append(obs)
            return super().predict_chunk(obs)

    q = env.spec.lower_rad + 0.5
    arm = BlockedArm(env.spec, q)
    executor = Executor(
        arm,
        LocalChunkSource(Recording(), delay_ticks=1),
        H,  # type: ignore[arg-type]
        ExecutorConfig("vlash", lag_deadband_rad=band),
        initial_delay_ticks=1,
    )
    for _ in range(3 * H):
        executor.tick(arm.read())
    assert len(seen) >= 4
    np.testing.assert_allclose(seen[0].state_rad, q)  # nothing queued yet: the measured arm
    for obs in seen[1:]:
        forwarded = executor.trace[obs.tick].requested_rad  # d = 1: the row of the request tick
        assert np.all(forwarded - q > 0.05)  # the targets ran ahead of the arm
        if band is None:
            np.testing.assert_allclose(obs.state_rad, forwarded)
        else:  # arm joints within the band of where the arm is stuck, the gripper as forwarded
            np.testing.assert_allclose(obs.state_rad[:-1], q[:-1] + band)
            np.testing.assert_allclose(obs.state_rad[-1], forwarded[-1])


class SourceDown(ConnectionError):
    pass


class FlakySource:
    """Wraps a source; raises `SourceDown` on every call during ticks [down, up)."""

    def __init__(self, inner: LocalChunkSource, down: int, up: int) -> None:
        self.inner, self.down, self.up = inner, down, up

    def _check(self, tick: int) -> None:
        if self.down <= tick < self.up:
            raise SourceDown(f"no reply at tick {tick}")

    def request(self, obs: PolicyObservation) -> None:
        self._check(obs.tick)
        self.inner.request(obs)

    def poll(self, now_tick: int) -> ActionChunk | None:
        self._check(now_tick)
        return self.inner.poll(now_tick)


def test_lost_source_holds_within_one_tick_and_recovers(env):
    # d = 4, H = 16, threshold 0.5: requests at ticks 0, 12, 24, ... (8 rows left), so the
    # reply to the request of tick 24 (due at 28) is in flight when the source fails at 26
    down, up, delay = 26, 40, 4
    env.reset(1)
    clamps_before = env.robot.stats.step_clamps
    inner = LocalChunkSource(ExpertChunkPolicy(env.make_expert(1), H, env.spec), delay_ticks=delay)
    executor = Executor(
        env.robot, FlakySource(inner, down, up), H, initial_delay_ticks=delay, lost_errors=(SourceDown,)
    )
    runner = EpisodeRunner(env.robot, env, executor, env.clock)
    runner.begin(1)
    while not runner.outcome.done:
        runner.tick()
        if executor.now_tick == down + 1:
            assert executor.lost
    trace = executor.trace
    assert not trace[down - 1].paused and trace[down].paused  # holds at the failing tick
    for r in trace[down : up + delay]:  # down, then the first new chunk needs d ticks
        assert r.paused
        np.testing.assert_array_equal(r.sent_rad, trace[down - 1].sent_rad)
    assert not trace[up + delay].paused and not executor.lost  # resumed
    assert executor.stale_replies == 1  # the reply in flight at the failure was dropped
    requested = np.stack([r.requested_rad for r in trace])
    assert np.all(np.abs(np.diff(requested, axis=0)) <= step_limit_rad(env.robot) + 1e-9)
    assert env.robot.stats.step_clamps == clamps_before
    assert runner.outcome.success


def test_errors_not_listed_as_lost_propagate(env):
    env.reset(0)
    inner = LocalChunkSource(ExpertChunkPolicy(env.make_expert(0), H, env.spec))
    runner = EpisodeRunner(env.robot, env, Executor(env.robot, FlakySource(inner, 0, 5), H), env.clock)
    runner.begin(0)
    with pytest.raises(SourceDown):
        runner.tick()


def test_executor_config_rejects_a_deadband_outside_vlash_and_unknown_modes():
    with pytest.raises(ValueError, match="vlash mode"):
        ExecutorConfig("sync", lag_deadband_rad=0.03)
    with pytest.raises(ValueError, match="deadband >= 0"):
        ExecutorConfig("vlash", lag_deadband_rad=-0.1)
    with pytest.raises(ValueError, match="unknown mode 'warp'"):
        ExecutorConfig("warp")
    with pytest.raises(ValueError, match="threshold must be in"):
        ExecutorConfig("vlash", 1.5)
    with pytest.raises(ValueError, match="max_in_flight"):
        ExecutorConfig("vlash", max_in_flight=0)
    with pytest.raises(ValueError, match="1 in the sync modes"):
        ExecutorConfig("sync", max_in_flight=2)


@pytest.mark.parametrize("mode", ["naive", "vlash"])
def test_several_requests_in_flight_ask_every_tick_and_execute_rows_d_ticks_old(env, mode):
    delay = 4
    one = run_stepped_episode(env, 2, mode, delay, H, threshold=1.0)
    ep = run_stepped_episode(env, 2, mode, delay, H, threshold=1.0, max_in_flight=delay)
    executed = [r for r in ep.trace if not r.paused]
    # one request per tick: every tick from the first reply on runs a chunk of its own,
    # planned from the observation exactly d ticks before
    assert [r.chunk_id for r in executed] == list(range(len(executed)))
    assert set(ep.row_ages()) == {delay}
    assert [r.tick for r in ep.trace if r.paused] == list(range(delay))
    # one request in flight: a request every d ticks, rows d .. 2d - 1 ticks old
    assert set(one.row_ages()) == set(range(delay, 2 * delay))
    # what `deploy` prints: p50 / p95 / max of the delays and of the row ages
    both = latency_summary([one, ep])
    assert both["inference delay"] == {"p50": delay, "p95": delay, "max": delay}
    ages = np.asarray(one.row_ages() + ep.row_ages())
    assert both["row age"] == {"p50": np.median(ages), "p95": np.percentile(ages, 95), "max": 2 * delay - 1}
    assert latency_summary([one])["row age"]["p50"] == pytest.approx(delay + (delay - 1) / 2, abs=0.5)
    assert len(ep.received) > 3 * len(one.received)
    assert ep.success and one.success


def test_without_a_threshold_the_executor_re_plans_after_the_policys_own_rows(env):
    class TwoRows(ExpertChunkPolicy):  # trained to run 2 of its 16 rows per request
        @property
        def metadata(self):
            return replace(super().metadata, execute_steps=2)

    env.reset(0)
    own = run_stepped_episode(env, 0, "vlash", 1, H, policy=TwoRows(env.make_expert(0), H, env.spec))
    half = run_stepped_episode(env, 0, "vlash", 1, H, threshold=0.5, policy=TwoRows(env.make_expert(0), H, env.spec))
    # 1 - 2/16: ask again once 2 rows are used (a reply every 2 ticks at d = 1), not 8
    assert {r.tick - r.obs_tick for r in own.trace if not r.paused} == {1, 2}
    assert max(r.tick - r.obs_tick for r in half.trace if not r.paused) == 8
    executor = Executor(env.robot, LocalChunkSource(TwoRows(env.make_expert(0), H, env.spec)), H, execute_steps=2)
    assert executor.threshold == pytest.approx(0.875)
    assert Executor(env.robot, executor.source, H, ExecutorConfig(threshold=1.0), execute_steps=2).threshold == 1.0


class ScriptedSource:
    """A source whose replies the test hands out: `answer(i)` delivers a chunk for the
    i-th request (as a server that dropped the ones before it would)."""

    def __init__(self) -> None:
        self.requests: list[PolicyObservation] = []
        self.out: list[ActionChunk] = []

    def request(self, obs: PolicyObservation) -> None:
        self.requests.append(obs)

    def answer(self, i: int, value: float) -> None:
        obs = self.requests[i]
        self.out.append(ActionChunk(np.full((H, 6), value), obs.tick + obs.delay_ticks))

    def poll(self, now_tick: int) -> ActionChunk | None:
        return self.out.pop(0) if self.out else None


def test_a_reply_supersedes_the_requests_before_it_and_their_late_replies_are_dropped(env):
    env.reset(0)
    source = ScriptedSource()
    executor = Executor(env.robot, source, H, ExecutorConfig("naive", threshold=1.0, max_in_flight=3))
    state = env.robot.read()
    for _ in range(3):  # nothing arrives: a request on each tick until three are in flight
        executor.tick(state)
    executor.tick(state)
    assert [obs.tick for obs in source.requests] == [0, 1, 2]
    source.answer(1, 0.05)  # the reply to the request of tick 1 (the one of tick 0 was dropped)
    record = executor.tick(state)
    assert record.obs_tick == 1 and np.allclose(record.requested_rad, 0.05)
    assert [obs.tick for obs in source.requests] == [0, 1, 2, 4]  # two in flight again: ask once more
    source.answer(0, -0.05)  # late: superseded by the reply of tick 1
    record = executor.tick(state)
    assert executor.stale_replies == 1 and record.obs_tick == 1
    source.answer(2, 0.02)  # still in flight: taken
    assert executor.tick(state).obs_tick == 2


@pytest.mark.parametrize("mode", ["vlash", "ensemble"])
@pytest.mark.parametrize("count", [1, 2])
def test_a_policy_reading_past_frames_gets_each_cameras_frames_from_k_g_ticks_earlier(env, mode, count):
    """past_frame_ticks G = 3, past_frames P: every request carries each camera's frame of
    tick - 3 k under `past_image_key(camera, k)`, k = 1 .. P, the episode's first frame
    until 3 k ticks have passed, and a new episode starts its history afresh."""
    from robotrl.inference.ensemble import EnsembleExecutor

    class Recording:
        def __init__(self) -> None:
            self.seen: list[PolicyObservation] = []

        def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
            self.seen.append(obs)
            return ActionChunk(np.repeat(env.robot.read().q_rad[None], H, axis=0), obs.tick + obs.delay_ticks)

    def frames(tick: int) -> dict[str, np.ndarray]:  # grey level = tick, so a frame says which tick it was
        return {cam: np.full((4, 4, 3), 10 * tick + i, np.uint8) for i, cam in enumerate(("front", "wrist"))}

    policy = Recording()
    source = LocalChunkSource(policy, 0)
    if mode == "ensemble":
        executor = EnsembleExecutor(env.robot, source, past_frame_ticks=3, past_frames=count)
    else:
        config = ExecutorConfig(mode, threshold=1.0)
        executor = Executor(env.robot, source, H, config, past_frame_ticks=3, past_frames=count)
    env.reset(0)
    q = env.robot.read().q_rad
    for episode in range(2):
        executor.begin_episode("follow the red ball", start_tick=0)
        policy.seen.clear()
        for tick in range(12):
            executor.tick(RobotState(q, 0.0, images=frames(tick)))
        assert len(policy.seen) >= 3, episode
        keys = {"front", "wrist", "front@past", "wrist@past"} | ({"front@past2", "wrist@past2"} if count > 1 else set())
        for obs in policy.seen:
            assert set(obs.images) == keys
            assert obs.images["front"][0, 0, 0] == 10 * obs.tick and obs.images["wrist"][0, 0, 0] == 10 * obs.tick + 1
            for k in range(1, count + 1):
                past = max(obs.tick - 3 * k, 0)
                assert obs.images[past_image_key("front", k)][0, 0, 0] == 10 * past, (episode, obs.tick, k)
                assert obs.images[past_image_key("wrist", k)][0, 0, 0] == 10 * past + 1
        assert any(obs.tick > 3 * count for obs in policy.seen) and policy.seen[0].tick == 0
