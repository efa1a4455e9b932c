"""The one episode runner: `bench policy` (evaluation) and `deploy` (a real server over
loopback) give the same trace for the same seed and policy; the runner scores a tick on
the physics that tick produced, exactly as the tick-by-tick env does. An arm opens only
for a policy of its control rate, told an instruction the policy was trained on."""

from __future__ import annotations

import re

import numpy as np
import pytest

from robotrl.bench.cells import BenchSetup
from robotrl.bench.cells import make_env as bench_env
from robotrl.core.errors import ConfigError
from robotrl.hardware.sim_arm.robot import HOME_Q_RAD
from robotrl.inference.arm import ArmConfig, open_arm, policy_instruction
from robotrl.inference.evaluation import evaluation_episode, make_env
from robotrl.inference.executor import ExecutorConfig
from robotrl.inference.remote import remote_executor
from robotrl.inference.runner import EpisodeRunner
from robotrl.inference.server import PolicyServer, ServerConfig
from robotrl.inference.stepped import run_closed_loop
from robotrl.sim.env import TaskEnv
from robotrl.sim.rollout import expert_policy
from robotrl.sim.scenario import get_scenario
from robotrl.wire.client import ClientSocket

H, S, SEED = 8, 4, 100_003
START = (0.2, -1.0, 0.9, 0.6, 0.3, 0.0)
"""A start pose 0.7 rad from home on the wrist, where a twin-recorded policy's began."""


def test_bench_policy_and_deploy_in_stepped_mode_give_identical_traces(tiny_flow):
    policy, config = (
        tiny_flow(horizon=H),
        ExecutorConfig("sync", execute_horizon=S),
    )  # state only: its latent is the instruction
    env = make_env(policy, "reach")
    try:
        evaluated, _ = evaluation_episode(env, policy, SEED, config)
    finally:
        env.close()
    with PolicyServer(policy, ServerConfig(endpoint="tcp://127.0.0.1:*", warmup_calls=1)) as server:
        with ClientSocket(server.endpoint, robot_id="sim-arm") as client:
            info = client.connect(timeout_s=5)
            arm = open_arm(ArmConfig("sim", "reach", "nominal"), info, stepped=True)
            try:
                executor = remote_executor(arm.robot, client, info, config, robot_id="sim-arm", stepped_delay=0)
                deployed = EpisodeRunner(arm.robot, arm.task, executor, arm.clock).run(SEED)
            finally:
                arm.close()
    assert deployed.ticks == evaluated.ticks > 4 * H and deployed.success == evaluated.success
    fields = [(r.tick, r.chunk_id, r.obs_tick, r.paused, r.delay_ticks) for r in evaluated.trace]
    assert [(r.tick, r.chunk_id, r.obs_tick, r.paused, r.delay_ticks) for r in deployed.trace] == fields
    assert not any(r.paused for r in evaluated.trace)  # sync with delay 0: a chunk every S ticks, no waiting
    # the same targets; the wire carries chunks as float32
    np.testing.assert_allclose(deployed.requested_rad(), evaluated.requested_rad(), atol=1e-5)
    np.testing.assert_allclose([r.sent_rad for r in deployed.trace], [r.sent_rad for r in evaluated.trace], atol=1e-5)
    assert len(deployed.received) == len(evaluated.received) == -(-evaluated.ticks // S)


def test_a_simulated_arm_starts_every_episode_at_the_policys_start_pose(tmp_path, tiny_flow):
    """As `deploy` drives a real arm to where the policy's training episodes began, a
    simulated arm starts each episode there, in evaluation (`bench policy`), in `deploy
    --robot sim` and in the latency benchmarks; at home for a policy that names none."""
    policy = tiny_flow(start_state_rad=START)
    policy.save(tmp_path / "ck")
    info = {"control_rate_hz": 30.0, "cameras": [], "start_state_rad": list(START)}
    arm = open_arm(ArmConfig("sim", "reach", "nominal"), info, stepped=True)
    evaluated = make_env(policy, "reach")
    benched = bench_env(BenchSetup(task="reach", checkpoint=str(tmp_path / "ck")), get_scenario("nominal"))
    homed = make_env(tiny_flow(), "reach")
    try:
        for task, robot, clock, start in [
            (arm.task, arm.robot, arm.clock, START),
            (evaluated, evaluated.robot, evaluated.clock, START),
            (benched, benched.robot, benched.clock, START),
            (homed, homed.robot, homed.clock, HOME_Q_RAD),
        ]:
            for seed in (SEED, SEED + 1):
                task.begin(seed)
                np.testing.assert_allclose(robot.read().q_rad, start, atol=1e-9)
                robot.command(np.asarray(start) + 0.1)  # moved off; the next episode starts there again
                clock.sleep(0.5)
                assert np.abs(robot.read().q_rad - start).max() > 0.02
    finally:
        for closing in (arm, evaluated, homed):
            closing.close()
    with pytest.raises(ConfigError, match="the start pose has 5 joints, the so101 arm has 6"):
        open_arm(ArmConfig("sim", "reach", "nominal"), {**info, "start_state_rad": list(START[:5])}, stepped=True)


def test_the_runner_scores_each_tick_like_the_tick_by_tick_env():
    """The expert through the runner (one-row chunks) and through `TaskEnv.step` (the
    recording loop): the same targets, the same success on the same tick."""
    env = TaskEnv("pick_place", cameras=())
    try:
        run = run_closed_loop(env, expert_policy, 7)
        obs = env.reset(7)
        act = expert_policy(env, 7)
        sent, step = [], None
        while step is None or not step.done:
            step = env.step(act(obs.state.q_rad))
            sent.append(step.sent_rad)
            obs = step.obs
    finally:
        env.close()
    assert run.success and step.success and run.ticks == len(sent) < 200
    np.testing.assert_array_equal([r.sent_rad for r in run.trace], sent)


def test_a_tick_is_scored_on_the_physics_it_produced():
    """`score(tick)` sees the arm one control period after the command (MuJoCo steps
    lazily, up to the clock, so an unsynced score would judge the previous tick)."""
    env = TaskEnv("reach", cameras=())
    try:
        env.begin(0)
        target = env.robot.read().q_rad + np.array([0.05, 0, 0, 0, 0, 0])
        env.robot.command(target)
        env.clock.sleep(env.dt_s)
        env.score(1)
        assert abs(env.sim.sim_time_s - env.dt_s) < env.sim.model.opt.timestep
        assert env.sim.q_true_rad[0] > 0.001  # the arm has started toward the target
    finally:
        env.close()


RED, BLUE = "put the red cube in the bin", "put the blue cube in the bin"


@pytest.mark.parametrize(
    "given, trained, told",
    [
        ("", ["follow the red ball"], "follow the red ball"),  # the only one it knows
        (RED, [BLUE, RED], RED),
        ("wave", [], "wave"),  # a policy that does not say (a lerobot checkpoint): as given
        ("", [], ""),  # nothing to tell (e.g. ACT reads no instruction)
    ],
)
def test_an_arm_tells_the_policy_an_instruction_it_was_trained_on(given, trained, told) -> None:
    assert policy_instruction(given, {"instructions": trained}) == told


@pytest.mark.parametrize(
    "given, trained, problem",
    [
        (
            "reach",
            ["follow the red ball"],
            "--task gives 'reach'; the policy was trained on 'follow the red ball' only",
        ),
        ("", [BLUE, RED], f"--task: tell the policy what to do, one of {BLUE!r}, {RED!r}"),
    ],
)
def test_an_instruction_the_policy_never_heard_or_a_missing_choice_gets_one_line(given, trained, problem) -> None:
    from robotrl.core.errors import UserError

    with pytest.raises(UserError, match=re.escape(problem)):
        policy_instruction(given, {"instructions": trained})


def test_a_simulated_task_that_asks_what_the_policy_was_not_trained_on_is_refused() -> None:
    from robotrl.core.errors import UserError

    info = {"control_rate_hz": 30.0, "cameras": [], "instructions": ["follow the red ball"]}
    with pytest.raises(UserError, match="--task reach asks 'touch the red ball'; the policy was trained on 'follow"):
        open_arm(ArmConfig("sim", "", "nominal"), info, stepped=True)  # '' is reach
    arm = open_arm(ArmConfig("sim", "track", "nominal"), info, stepped=True)
    arm.close()


def test_open_arm_refuses_a_policy_of_another_control_rate_and_sim_cameras():
    from robotrl.core.errors import ConfigError, UserError

    with pytest.raises(UserError, match="trained at 15 Hz and the arm runs at 30 Hz"):
        open_arm(ArmConfig("sim", "reach", "nominal"), {"control_rate_hz": 15.0, "cameras": []}, stepped=True)
    with pytest.raises(UserError, match="--cameras is for real arms"):
        ArmConfig("sim", cameras="{front: {type: opencv, index_or_path: 0, width: 64, height: 48, fps: 30}}")
    with pytest.raises(ConfigError, match="camera 'front': set width, height, fps"):
        ArmConfig("so101", port="/dev/ttyACM0", cameras="{front: {type: opencv, index_or_path: 0}}")
    with pytest.raises(UserError, match="privileged simulation state"):
        open_arm(ArmConfig("so101", port="/dev/ttyACM0"), {"env_state_dim": 3})
    for robot, seconds in (("so101", -1.0), ("sim", 5.0)):  # a simulated task resets its own scene
        with pytest.raises(UserError, match="--reset-time-s is >= 0 s, and for real arms"):
            ArmConfig(robot, port="/dev/ttyACM0" if robot != "sim" else None, reset_time_s=seconds)


def test_the_status_line_writes_to_the_standard_output_of_when_it_is_made(monkeypatch):
    """Not to the one of when its module was imported: that one may be closed since (a
    replaced `sys.stdout`, as a test's captured output or a caller's redirection)."""
    import io
    import sys

    from robotrl.inference.runner import StatusLine

    now = io.StringIO()
    monkeypatch.setattr(sys, "stdout", now)
    assert StatusLine(None).stream is now  # type: ignore[arg-type]


def test_the_runner_keeps_each_cameras_frame_age_and_leaves_unknown_ones_out(tiny_flow):
    """The simulated arm renders at the reading (age 0); a reading whose front frame is
    20 ms old and whose wrist frame's age is unknown gives 20 ms a tick."""
    from dataclasses import replace

    policy = tiny_flow(cameras=("front",), horizon=H)
    config = ExecutorConfig("sync", execute_horizon=S)
    ages = {}
    for stamped in (False, True):
        env = make_env(policy, "reach")
        try:
            if stamped:
                read = env.robot.read

                def stamped_read(read=read):
                    state = read()
                    images = {"front": state.images["front"], "wrist": state.images["front"]}
                    return replace(state, images=images, image_ages_s={"front": 0.02, "wrist": float("nan")})

                env.robot.read = stamped_read
            result, _ = evaluation_episode(env, policy, SEED, config)
        finally:
            env.close()
        ages[stamped] = result.frame_ages_ms
        assert len(ages[stamped]) == result.ticks > 0
    assert set(ages[False]) == {0.0} and np.allclose(ages[True], 20.0)
