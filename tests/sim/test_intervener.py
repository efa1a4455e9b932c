"""The executor's intervention hook and the `ScriptedIntervener` on the simulated reach
task: takeover on drift, flagged ticks, fresh chunk on hand-back, tapering budget."""

from __future__ import annotations

from itertools import groupby

import numpy as np
import pytest

from robotrl.core.policy import ActionChunk, PolicyMetadata, PolicyObservation
from robotrl.inference.executor import Executor, LocalChunkSource
from robotrl.inference.runner import EpisodeRunner
from robotrl.inference.stepped import ExpertChunkPolicy
from robotrl.inference.transitions import TransitionRecorder
from robotrl.sim.intervener import ScriptedIntervener, budget_ticks

H = 8


@pytest.fixture(scope="module")
def env():
    from robotrl.sim.env import TaskEnv

    env = TaskEnv("reach", cameras=())
    yield env
    env.close()


class FrozenPolicy:
    """Every row = the state it was asked from: the arm never moves by itself."""

    metadata = PolicyMetadata("frozen", H, 6, 30.0, 6)

    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
        return ActionChunk(np.tile(obs.state_rad, (H, 1)), obs.tick + obs.delay_ticks, version=1)

    def reset(self) -> None:
        pass


def test_budget_tapers_linearly_and_with_success():
    assert budget_ticks(0, 100, 50) == 100
    assert budget_ticks(25, 100, 50) == 50  # 100 * (1 - 25/50)
    assert budget_ticks(49, 100, 50) == 2  # 100 * 1/50
    assert budget_ticks(50, 100, 50) == 0 and budget_ticks(80, 100, 50) == 0
    assert budget_ticks(10, 100, 50, recent_success_rate=0.5) == 40  # 100 * 0.8 * 0.5
    with pytest.raises(ValueError, match="success rate in \\[0, 1\\]"):
        budget_ticks(0, 100, 50, recent_success_rate=1.5)


def actor_episode(env, source, streamer, intervener, seed: int, max_ticks: int | None = None):
    """One episode of the episode runner with `intervener` and transitions to `streamer`."""
    executor = Executor(env.robot, source, H, intervener=intervener)
    observers = [] if streamer is None else [TransitionRecorder(streamer)]
    return EpisodeRunner(env.robot, env, executor, env.clock, observers=observers).run(seed, max_ticks)


class Hook:
    """An intervener that drives ticks 10-14 to a fixed target."""

    outcome = None
    episode_takeovers = 0

    def __init__(self, target: np.ndarray) -> None:
        self.target = target

    def begin_episode(self, seed: int) -> None:
        pass

    def end_episode(self, success: bool) -> None:
        pass

    def __call__(self, tick, requested_rad, state):
        return self.target if 10 <= tick < 15 else None


def test_hook_target_replaces_the_row_and_letting_go_requests_a_fresh_chunk(env):
    env.reset(0)
    human = np.full(6, 0.05)
    policy = ExpertChunkPolicy(env.make_expert(), H, env.spec)
    executor = Executor(env.robot, LocalChunkSource(policy, 0), H, intervener=Hook(human))
    runner = EpisodeRunner(env.robot, env, executor, env.clock)
    runner.begin(0)
    trace = [runner.tick().record for _ in range(25)]
    assert [r.tick for r in trace if r.intervened] == [10, 11, 12, 13, 14]
    for r in trace[10:15]:
        np.testing.assert_array_equal(r.requested_rad, human)
        assert r.policy_rad is not None and not np.allclose(r.policy_rad, human)  # the policy's own row
    assert all(r.policy_rad is None for r in trace if not r.intervened)
    # tick 15: the human let go, the queue was dropped, the chunk comes from tick 15's state
    assert trace[15].obs_tick == 15 and trace[15].chunk_id != trace[14].chunk_id
    assert not executor.intervening


def test_intervener_takes_over_on_drift_flags_it_and_respects_the_budget(env):
    intervener = ScriptedIntervener(
        env, takeover_m=0.04, handback_m=0.01, min_ticks=5, initial_budget_ticks=60, taper_episodes=10
    )
    episode = actor_episode(env, LocalChunkSource(FrozenPolicy(), 0), None, intervener, seed=2)
    flagged = [r for r in episode.trace if r.intervened]
    assert 0 < len(flagged) == episode.intervention_ticks <= 60 and episode.takeovers >= 1
    assert intervener.intervention_ticks == len(flagged) and intervener.episode == 1
    # every takeover but the last (cut by the budget or the episode end) lasts >= min_ticks
    runs = [len(list(group)) for on, group in groupby(r.intervened for r in episode.trace) if on]
    assert len(runs) == episode.takeovers and all(n >= 5 for n in runs[:-1])
    # the frozen policy would never move; the expert's help moved the arm toward the target
    moved = np.abs(episode.trace[-1].sent_rad - episode.trace[0].sent_rad).max()
    assert moved > 0.1


def test_expert_as_policy_needs_no_help(env):
    env.reset(4)
    policy = ExpertChunkPolicy(env.make_expert(), H, env.spec)
    intervener = ScriptedIntervener(env, takeover_m=0.04)
    episode = actor_episode(env, LocalChunkSource(policy, 0), None, intervener, seed=4)
    assert episode.success and episode.intervention_ticks == 0 and episode.takeovers == 0


def test_interventions_taper_to_zero_over_episodes(env):
    intervener = ScriptedIntervener(
        env, takeover_m=0.04, handback_m=0.01, min_ticks=5, initial_budget_ticks=45, taper_episodes=3
    )
    ticks = []
    for seed in range(4):
        episode = actor_episode(env, LocalChunkSource(FrozenPolicy(), 0), None, intervener, seed=seed)
        ticks.append(episode.intervention_ticks)
    budgets = [45, 30, 15, 0]  # 45 * (1 - e/3)
    assert all(0 <= t <= b for t, b in zip(ticks, budgets)) and ticks[0] > 0 and ticks[-1] == 0
    assert intervener.intervention_ticks == sum(ticks)


class ScriptedDevice:
    """A teleop device that takes over at ticks 5-9 (target: 0.2 rad more on joint 0 than
    the arm) and presses success at tick 20."""

    def __init__(self) -> None:
        self.reads = 0

    def reset(self, state) -> None:
        self.reads = 0

    def read(self, state):
        from robotrl.hardware.teleop.base import TeleopCommand, TeleopEvents

        tick, self.reads = self.reads, self.reads + 1
        target = np.array(state.q_rad, dtype=np.float64) + np.array([0.2, 0, 0, 0, 0, 0])
        return TeleopCommand(target, TeleopEvents(intervene=5 <= tick <= 9, success=tick == 20))


def test_teleop_device_takes_over_and_its_success_key_ends_the_episode(env):
    from robotrl.hardware.teleop.intervention import TeleopIntervention

    class Rows:  # a streamer that keeps what it is given
        def begin_episode(self, instruction):
            self.rewards, self.flags, self.success = [], [], None

        def record(self, tick, state, images, env_state, action, policy_action, reward, intervention, *rest):
            self.rewards.append(reward)
            self.flags.append(intervention)

        def end_episode(self, success):
            self.success = success

    hook, rows = TeleopIntervention(ScriptedDevice(), env.robot), Rows()
    ep = actor_episode(env, LocalChunkSource(FrozenPolicy(), 0), rows, hook, seed=3)
    flagged = [r.tick for r in ep.trace if r.intervened]
    assert flagged == [5, 6, 7, 8, 9] and ep.takeovers == 1
    assert ep.success and ep.ticks == 21 and rows.success  # ended by the human's success key at tick 20
    assert rows.rewards[-1] == 1.0 and all(r < 1.0 for r in rows.rewards[:-1])  # the label earns reward 1
    assert [i for i, f in enumerate(rows.flags) if f] == [5, 6, 7, 8, 9]
    assert ep.trace[5].sent_rad[0] > ep.trace[4].sent_rad[0]  # the device's target drove the arm


def test_real_arm_episodes_end_at_max_ticks(env):
    ep = actor_episode(env, LocalChunkSource(FrozenPolicy(), 0), None, None, seed=3, max_ticks=12)
    assert ep.ticks == 12 and not ep.success


def test_intervener_stops_a_grasp_closed_in_the_air():
    """On the expert's path but with the jaws closing while the expert holds them open: the
    gripper trigger takes over (the position trigger alone never would), and hands back
    once the policy's gripper agrees again."""
    from robotrl.sim.env import TaskEnv

    env = TaskEnv("pick_place", cameras=())
    try:
        env.reset(1)
        both = ScriptedIntervener(env, takeover_m=0.06, takeover_gripper_rad=0.5, min_ticks=3)
        position_only = ScriptedIntervener(env, takeover_m=0.06, takeover_gripper_rad=None, min_ticks=3)
        both.begin_episode(1)
        position_only.begin_episode(1)
        shadow = env.make_expert(1)
        takes = []
        for tick in range(32):
            row = np.array(shadow.act(env.sim.q_true_rad))  # the expert's own path...
            shut = 10 <= tick < 16
            if shut:  # ...with the jaws commanded shut while it holds them open above the cube
                assert row[-1] > 0.8
                row[-1] = -0.15
            state = env.robot.read()
            assert position_only(tick, row, state) is None  # no position drift: never takes over
            target = both(tick, row, state)
            takes.append(target is not None)
            if shut:
                assert both.gripper_gap_rad > 0.9
            env.step(row if target is None else target)
        assert not any(takes[:10])  # the expert itself needs no help
        assert takes[10:16] == [True] * 6  # took over at once, held while the jaws disagreed
        assert not any(takes[16:]) and both.takeovers == 1  # handed back as soon as they agreed
    finally:
        env.close()
