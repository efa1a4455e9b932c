"""PolicyServer + RemoteChunkSource + Executor over real sockets on loopback."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from server_doubles import H, RampPolicy, request

from robotrl.core.clock import WallClock
from robotrl.core.errors import WireError
from robotrl.core.health import gpu_report
from robotrl.core.policy import ActionChunk, PolicyMetadata, PolicyObservation
from robotrl.inference.executor import Executor, ExecutorConfig
from robotrl.inference.remote import RemoteChunkSource, remote_executor
from robotrl.inference.runner import EpisodeRunner
from robotrl.inference.server import HEALTH_WINDOW_S, PolicyServer, ServerConfig
from robotrl.inference.stepped import ExpertChunkPolicy
from robotrl.sim.env import TaskEnv
from robotrl.wire.client import ClientSocket
from robotrl.wire.messages import ChunkReply


def test_four_robots_each_get_their_own_chunks():
    policy = RampPolicy(model_s=0.005)
    with PolicyServer(policy, ServerConfig(endpoint="tcp://127.0.0.1:*", batch_wait_ms=20)) as server:
        clients = [ClientSocket(server.endpoint, robot_id=f"arm{i}", heartbeat_s=0.5) for i in range(4)]
        try:
            for c in clients:
                c.connect(timeout_s=5)
            for i, c in enumerate(clients):  # all four in flight at once: one batch
                c.send(request(f"arm{i}", 100 + i, np.full(6, 0.1 * i), tick=20 + i))
            for i, c in enumerate(clients):
                reply = c.recv(timeout_s=5)
                assert isinstance(reply, ChunkReply) and reply.request_id == 100 + i
                assert reply.start_tick == 20 + i
                # row 0 = that robot's own state (0.1 * i) + 0.01
                np.testing.assert_allclose(reply.actions[0], np.full(6, 0.1 * i + 0.01), atol=1e-6)
                assert reply.actions.shape == (H, 6)
            health = server.health()
        finally:
            for c in clients:
                c.close()
    assert max(policy.batches) >= 2  # requests of different robots were batched
    batches = round(health["batches_per_s"] * HEALTH_WINDOW_S)  # model calls for the four requests
    assert health["batch_size"] == pytest.approx(4 / batches) and health["batch_size"] >= 4 / 3
    p50, p99 = health["chunk_ms"]["p50"], health["chunk_ms"]["p99"]
    assert 5.0 <= p50 <= p99  # arrival to reply: at least the 5 ms model call
    assert health["queued_requests"] == 0 and health["gpu"] is None  # no device given


def test_server_forwards_the_state_to_the_chunk_start():
    with PolicyServer(RampPolicy(), ServerConfig(endpoint="tcp://127.0.0.1:*"), device="cpu") as server:
        assert server.health()["gpu"] == gpu_report("cpu")  # a CPU server says so
        with ClientSocket(server.endpoint, robot_id="arm") as client:
            client.connect(timeout_s=5)
            in_flight = np.array([[0.1] * 6, [0.2] * 6, [0.3] * 6])
            reply = client.request(request("arm", 1, np.zeros(6), tick=50, delay=3, in_flight=in_flight), 5)
    # d = 3 with absolute actions: s_hat = a_(t+d-1) = 0.3; the chunk starts at 50 + 3
    assert reply.start_tick == 53
    np.testing.assert_allclose(reply.actions[0], np.full(6, 0.31), atol=1e-6)


class TextLatentPolicy:
    """A fast/slow policy without cameras: the slow latent is the instruction's length,
    every row of a chunk is latent + 1000 x the latent's age."""

    metadata = PolicyMetadata("text", H, 6, 30.0, 6)

    def encode_slow(self, obs: PolicyObservation) -> float:
        return float(len(obs.instruction))

    def predict_chunks(self, observations, latents, ages) -> list[ActionChunk]:
        return [
            ActionChunk(np.full((H, 6), latent + 1000.0 * age), obs.tick + obs.delay_ticks)
            for obs, latent, age in zip(observations, latents, ages)
        ]

    def predict_chunk(self, obs, latent=None, latent_age_ticks=0) -> ActionChunk:
        return self.predict_chunks([obs], [latent], [latent_age_ticks])[0]

    def reset(self) -> None:
        pass


class FrameLatentPolicy(TextLatentPolicy):
    """A camera policy whose latent is the tick of the frame it saw; every row is latent +
    1000 x age. Trained on latents at most `max_age` ticks old."""

    def __init__(self, max_age: int | None) -> None:
        self.metadata = PolicyMetadata("frame", H, 6, 30.0, 6, ("front",), 4, max_latent_age_ticks=max_age)

    def encode_slow(self, obs: PolicyObservation) -> float:
        return float(obs.tick)


@pytest.mark.parametrize("max_age", [None, 0, 3])
def test_a_latent_older_than_the_policy_was_trained_on_is_encoded_with_the_request(max_age):
    def ask(client, request_id, tick):
        req = request("arm", request_id, np.zeros(6), tick=tick)
        req.images = {"front": np.zeros((4, 4, 3), np.uint8)}
        return client.request(req, 5).actions[0, 0]

    config = ServerConfig(endpoint="tcp://127.0.0.1:*", slow_rate_hz=0.01)  # the slow loop stays out of it
    with PolicyServer(FrameLatentPolicy(max_age), config) as server:
        with ClientSocket(server.endpoint, robot_id="arm") as client:
            client.connect(timeout_s=5)
            rows = [ask(client, i, tick) for i, tick in enumerate((0, 2, 5), start=1)]
            slow_loop = "robotrl-server-slow" in server.health()["threads_alive"]
    expected = {
        None: [0, 2000, 5000],  # any age: the latent of tick 0 serves every request
        0: [0, 2, 5],  # trained on fresh latents only: each request encodes its own frame
        3: [0, 2000, 5],  # tick 2 is 2 ticks after the latent, tick 5 is 5: encoded afresh
    }
    assert rows == expected[max_age]
    # trained on fresh latents only, the server runs no slow loop: every request encodes anyway
    assert slow_loop == (max_age != 0)


def test_slow_latent_follows_the_instruction_of_each_episode():
    """A new instruction (the next episode's task) is encoded before its first chunk, and a
    latent of the instruction alone (no images) never ages: no episode is served the last
    episode's task."""
    red, green = "put the red cube in the bin", "put the green cube in the bin"

    def ask(client, request_id, tick, instruction):
        req = request("arm", request_id, np.zeros(6), tick=tick)
        req.instruction = instruction
        return client.request(req, 5).actions[0, 0]

    with PolicyServer(TextLatentPolicy(), ServerConfig(endpoint="tcp://127.0.0.1:*")) as server:
        with ClientSocket(server.endpoint, robot_id="arm") as client:
            client.connect(timeout_s=5)
            assert ask(client, 1, 0, red) == len(red)
            assert ask(client, 2, 120, red) == len(red)  # 120 ticks later: still age 0
            assert ask(client, 3, 0, green) == len(green)  # next episode, other cube
            assert ask(client, 4, 40, green) == len(green)


def test_weights_swap_between_chunks_and_version_in_every_reply():
    policy = RampPolicy()
    with PolicyServer(policy, ServerConfig(endpoint="tcp://127.0.0.1:*"), version=1) as server:
        with ClientSocket(server.endpoint, robot_id="arm") as client:
            client.connect(timeout_s=5)
            assert client.request(request("arm", 1, np.zeros(6)), 5).version == 1
            server.set_weights(2, "weights-v2")
            assert client.request(request("arm", 2, np.zeros(6)), 5).version == 2
    assert policy.version_seen == ["weights-v2"]


class StagedRampPolicy(RampPolicy):
    """A `StagedReloadablePolicy`: records which thread stages and which swaps."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[tuple[str, str]] = []

    def stage_weights(self, data):
        self.threads.append(("stage", threading.current_thread().name))
        if data == "bad":
            raise ValueError("weights do not fit this policy")
        return f"staged {data}"

    def swap_weights(self, staged) -> None:
        self.threads.append(("swap", threading.current_thread().name))
        self.version_seen.append(staged)


def test_staged_weights_are_built_off_the_serving_thread_and_swapped_between_batches(caplog):
    policy = StagedRampPolicy()
    with PolicyServer(policy, ServerConfig(endpoint="tcp://127.0.0.1:*"), version=1) as server:
        with ClientSocket(server.endpoint, robot_id="arm") as client:
            client.connect(timeout_s=5)
            assert client.request(request("arm", 1, np.zeros(6)), 5).version == 1
            subscriber = threading.Thread(target=server.set_weights, args=(2, "v2"), name="weights-sub")
            subscriber.start()
            subscriber.join()
            assert client.request(request("arm", 2, np.zeros(6)), 5).version == 2
            server.set_weights(3, "bad")  # refused while staging: version 2 stays in service
            assert client.request(request("arm", 3, np.zeros(6)), 5).version == 2
    assert policy.version_seen == ["staged v2"]
    assert policy.threads[:2] == [("stage", "weights-sub"), ("swap", "robotrl-server-model-0")]
    assert set(server.stage_ms) == set(server.swap_ms) == {2}
    assert "weights version 3 could not be staged; still serving version 2" in caplog.text


def test_sac_weights_staged_from_another_thread_serve_the_new_actor():
    import torch

    from robotrl.policies.sac.config import SacNetConfig
    from robotrl.policies.sac.networks import SacActor
    from robotrl.policies.sac.policy import SacChunkPolicy

    config = SacNetConfig(6, 6, 0, {}, 16, (16,), 8, max_step_rad=0.05, horizon=2, control_rate_hz=30.0)
    torch.manual_seed(0)
    served, trained = (SacChunkPolicy(SacActor(config), deterministic=True) for _ in range(2))
    obs = PolicyObservation(state_rad=np.full(6, 0.1), tick=3)
    expected = trained.predict_chunk(obs).actions_rad
    assert not np.allclose(served.predict_chunk(obs).actions_rad, expected)
    with PolicyServer(served, ServerConfig(endpoint="tcp://127.0.0.1:*", warmup_calls=1)) as server:
        with ClientSocket(server.endpoint, robot_id="arm") as client:
            client.connect(timeout_s=5)
            thread = threading.Thread(target=server.set_weights, args=(1, trained.weights_bytes()))
            thread.start()
            thread.join()
            reply = client.request(request("arm", 1, np.full(6, 0.1), tick=3), 5)
    assert reply.version == 1
    np.testing.assert_allclose(reply.actions, expected, atol=1e-6)


def run_deploy(server_endpoint: str, env: TaskEnv, mode: str, seconds: float, seed: int) -> Executor:
    client = ClientSocket(server_endpoint, robot_id="arm0", heartbeat_s=0.3, missed_heartbeats=2)
    info = client.connect(timeout_s=5)
    executor = remote_executor(env.robot, client, info, ExecutorConfig(mode), robot_id="arm0")
    runner = EpisodeRunner(env.robot, env, executor, env.clock)
    runner.begin(seed)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            runner.tick()  # paced at 30 Hz on the wall clock
    finally:
        client.close()
    return executor


@pytest.mark.parametrize("latency_horizons", [0.0, 1.0, 3.0])
def test_loopback_deploy_with_injected_latency_is_smooth(latency_horizons):
    """Real server, real client, MuJoCo arm on the wall clock; the model sleeps 0, 1x or
    3x the chunk duration (H / 30 Hz). Requested targets never jump more than the safety
    step at chunk boundaries, and the safety clamp never acts."""
    env = TaskEnv("reach", cameras=(), clock=WallClock())
    env.reset(3)
    policy = ExpertChunkPolicy(env.make_expert(), H, env.spec)
    slow = SleepyPolicy(policy, latency_horizons * H / 30.0)
    with PolicyServer(slow, ServerConfig(endpoint="tcp://127.0.0.1:*", warmup_calls=2)) as server:
        executor = run_deploy(server.endpoint, env, "vlash", seconds=2.5, seed=3)
    env.close()
    requested = np.stack([r.requested_rad for r in executor.trace])
    jumps = np.abs(np.diff(requested, axis=0))[:, :5]
    assert jumps.max() <= 0.1 + 1e-6  # 3 rad/s x 1/30 s
    assert env.robot.stats.step_clamps == 0
    assert len(executor.received) >= 2


class SleepyPolicy:
    """Wraps a ChunkPolicy and sleeps `model_s` per call (a slow model)."""

    def __init__(self, policy, model_s: float) -> None:
        self.policy, self.model_s = policy, model_s

    @property
    def metadata(self):
        return self.policy.metadata

    def predict_chunk(self, obs):
        time.sleep(self.model_s)
        return self.policy.predict_chunk(obs)

    def reset(self):
        pass


def test_server_killed_mid_run_arm_holds_then_resumes():
    env = TaskEnv("reach", cameras=(), clock=WallClock())
    env.reset(5)
    policy = ExpertChunkPolicy(env.make_expert(), H, env.spec)
    server = PolicyServer(policy, ServerConfig(endpoint="tcp://127.0.0.1:*", warmup_calls=0))
    server.start()
    endpoint = server.endpoint
    client = ClientSocket(endpoint, robot_id="arm0", heartbeat_s=0.2, missed_heartbeats=2)
    client.connect(timeout_s=5)
    executor = Executor(
        env.robot, RemoteChunkSource(client, "arm0", 6, reply_timeout_s=0.5), H, lost_errors=(WireError,)
    )
    runner = EpisodeRunner(env.robot, env, executor, env.clock)
    runner.begin(5)
    try:
        for _ in range(20):
            runner.tick()
        server.stop()
        lost_at = len(executor.trace)
        for _ in range(45):  # 1.5 s without a server
            runner.tick()
        assert executor.lost
        # within one tick of the loss being noticed the arm holds: every later tick is a pause
        first_pause = next(i for i in range(lost_at, len(executor.trace)) if executor.trace[i].paused)
        held = executor.trace[first_pause:]
        assert all(r.paused for r in held)
        np.testing.assert_allclose([r.requested_rad for r in held], [held[0].requested_rad] * len(held))
        server = PolicyServer(policy, ServerConfig(endpoint=endpoint, warmup_calls=0))
        server.start()
        for _ in range(60):
            runner.tick()
        assert not executor.lost
        assert not executor.trace[-1].paused
        assert env.robot.stats.step_clamps == 0
    finally:
        client.close()
        server.stop()
        env.close()


class ReachTargetPolicy:
    """A privileged chunk policy: rows walk the fingertip from the (forwarded) state
    straight to `obs.env_state` (the reach target) at 0.25 m/s, through pinocchio IK."""

    def __init__(self) -> None:
        from robotrl.hardware.kinematics import Kinematics
        from robotrl.hardware.models import get_arm

        self.kin = Kinematics(get_arm("so101"))

    @property
    def metadata(self) -> PolicyMetadata:
        return PolicyMetadata("reach_target", H, 6, 30.0, 6, env_state_dim=3)

    def predict_chunk(self, obs: PolicyObservation) -> ActionChunk:
        q = np.asarray(obs.state_rad, dtype=np.float64)
        point = self.kin.ee_position(q)
        rows = []
        for _ in range(H):
            step = np.asarray(obs.env_state, dtype=np.float64) - point
            point = point + step * min(1.0, (0.25 / 30.0) / max(np.linalg.norm(step), 1e-9))
            q = self.kin.ik(point, q, joints=slice(0, 4), max_step_rad=0.08, max_iters=20).q_rad
            rows.append(q.copy())
        return ActionChunk(np.stack(rows), obs.tick + obs.delay_ticks)

    def reset(self) -> None:
        pass


def test_four_simulated_arms_on_one_server_each_reach_their_own_target():
    """Four MuJoCo arms in real time, one server: every arm gets chunks toward its own
    target (a mix-up would send an arm to another arm's target and fail)."""
    envs = [TaskEnv("reach", cameras=(), clock=WallClock()) for _ in range(4)]
    with PolicyServer(ReachTargetPolicy(), ServerConfig(endpoint="tcp://127.0.0.1:*", warmup_calls=1)) as server:
        results = [None] * 4

        def drive(i: int) -> None:
            env = envs[i]
            env.reset(100 + i)
            client = ClientSocket(server.endpoint, robot_id=f"arm{i}", heartbeat_s=0.5)
            try:
                info = client.connect(timeout_s=5)
                executor = remote_executor(env.robot, client, info, ExecutorConfig(), robot_id=f"arm{i}")
                episode = EpisodeRunner(env.robot, env, executor, env.clock).run(100 + i)
                results[i] = (episode.success, env.task.jump_tick, env.tick)
            finally:
                client.close()

        threads = [threading.Thread(target=drive, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    for env in envs:
        env.close()
    assert all(r is not None and r[0] for r in results), results


class FailsOnMarker(RampPolicy):
    """A `RampPolicy` whose model raises for an observation whose first joint is 9.0 (a
    policy bug one robot's data triggers)."""

    def predict_chunks(self, observations: list[PolicyObservation]) -> list[ActionChunk]:
        if any(obs.state_rad[0] == 9.0 for obs in observations):
            raise RuntimeError("the model met a state it cannot handle")
        return super().predict_chunks(observations)


@pytest.mark.parametrize(
    "bad, refusal",
    [
        (dict(delay=-1), "delay_ticks -1 not in"),
        (dict(in_flight=np.zeros((3, 4))), "in_flight has shape (3, 4)"),
        (dict(state=np.zeros(5)), "state has shape (5,)"),
        (dict(state=np.full(6, np.nan)), "NaN"),
        (dict(state=np.full(6, 1e300)), "beyond +-10000"),
    ],
)
def test_a_malformed_request_is_refused_to_its_sender_alone(bad, refusal):
    """The bad request gets one error; the other robot is answered before and after it,
    and every server thread is still alive."""
    with PolicyServer(RampPolicy(), ServerConfig(endpoint="tcp://127.0.0.1:*", batch_wait_ms=20)) as server:
        with (
            ClientSocket(server.endpoint, robot_id="good") as good,
            ClientSocket(server.endpoint, robot_id="bad") as evil,
        ):
            good.connect(timeout_s=5)
            evil.connect(timeout_s=5)
            state = bad.pop("state", np.zeros(6))
            evil.send(request("bad", 1, state, **bad))
            good.send(request("good", 1, np.full(6, 0.2)))  # likely in the same batch
            reply = evil.recv(timeout_s=5)
            assert reply.code == "bad_request" and refusal in reply.message
            answer = good.recv(timeout_s=5)
            assert isinstance(answer, ChunkReply)
            np.testing.assert_allclose(answer.actions[0], np.full(6, 0.21), atol=1e-6)
            assert isinstance(good.request(request("good", 2, np.full(6, 0.3)), 5), ChunkReply)
        health = server.health()
    assert all(health["threads_alive"].values()) and health["refused"] == 1
    assert health["errors"] == {"bad request": 1}


def test_a_policy_failure_on_one_request_never_reaches_another_robot():
    with PolicyServer(FailsOnMarker(), ServerConfig(endpoint="tcp://127.0.0.1:*", batch_wait_ms=50)) as server:
        with ClientSocket(server.endpoint, robot_id="a") as a, ClientSocket(server.endpoint, robot_id="b") as b:
            a.connect(timeout_s=5)
            b.connect(timeout_s=5)
            a.send(request("a", 1, np.full(6, 9.0)))
            b.send(request("b", 1, np.full(6, 0.5)))
            failed, served = a.recv(timeout_s=5), b.recv(timeout_s=5)
        health = server.health()
    assert failed.code == "server" and "cannot handle" in failed.message
    assert isinstance(served, ChunkReply) and served.request_id == 1  # b got its own chunk, not a's error
    np.testing.assert_allclose(served.actions[0], np.full(6, 0.51), atol=1e-6)
    assert all(health["threads_alive"].values()) and health["errors"]["policy"] == 1


def test_a_missing_camera_is_refused_before_it_reaches_the_slow_pathway(tiny_flow):
    policy = tiny_flow(cameras=("front",), horizon=H)
    with PolicyServer(policy, ServerConfig(endpoint="tcp://127.0.0.1:*", slow_rate_hz=20.0)) as server:
        with ClientSocket(server.endpoint, robot_id="arm") as client:
            client.connect(timeout_s=5)
            refused = client.request(request("arm", 1, np.zeros(6)), 5)
            seen = request("arm", 2, np.zeros(6), tick=11)
            seen.images = {"front": np.zeros((16, 16, 3), np.uint8)}
            served = client.request(seen, 5)
            time.sleep(0.2)  # the slow pathway refreshes from the newest images meanwhile
        health = server.health()
    assert refused.code == "bad_request" and "no image from camera 'front'" in refused.message
    assert isinstance(served, ChunkReply)
    assert all(health["threads_alive"].values()) and "slow pathway" not in health["errors"]


class Seen(RampPolicy):
    """A `RampPolicy` that keeps every observation it answered."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[PolicyObservation] = []

    def predict_chunks(self, observations: list[PolicyObservation]) -> list[ActionChunk]:
        self.seen += observations
        return super().predict_chunks(observations)


def test_vlash_rtc_through_a_server_sees_the_state_the_stepped_path_forwards():
    """The executor forwards the state and sends the RTC plan as `prefix`: the server
    neither forwards it again nor mistakes the plan for in-flight rows."""
    d, ticks, config = 3, 40, ExecutorConfig("vlash+rtc")
    local_policy, served_policy = Seen(), Seen()
    env = TaskEnv("reach", cameras=())
    try:
        from robotrl.inference.executor import LocalChunkSource

        executor = Executor(env.robot, LocalChunkSource(local_policy, d), H, config, initial_delay_ticks=d)
        runner = EpisodeRunner(env.robot, env, executor, env.clock)
        runner.begin(3)
        for _ in range(ticks):
            runner.tick()
        remote_env = TaskEnv("reach", cameras=())
        with PolicyServer(served_policy, ServerConfig(endpoint="tcp://127.0.0.1:*", warmup_calls=0)) as server:
            with ClientSocket(server.endpoint, robot_id="arm") as client:
                info = client.connect(timeout_s=5)
                executor = remote_executor(remote_env.robot, client, info, config, robot_id="arm", stepped_delay=d)
                runner = EpisodeRunner(remote_env.robot, remote_env, executor, remote_env.clock)
                runner.begin(3)
                for _ in range(ticks):
                    runner.tick()
        remote_env.close()
    finally:
        env.close()
    assert len(served_policy.seen) == len(local_policy.seen) >= 4
    assert any(obs.prefix_rad is not None for obs in local_policy.seen)
    for local, served in zip(local_policy.seen, served_policy.seen):
        assert (served.tick, served.delay_ticks) == (local.tick, local.delay_ticks)
        np.testing.assert_allclose(served.state_rad, local.state_rad, atol=1e-6)
        if local.prefix_rad is None:
            assert served.prefix_rad is None
        else:
            np.testing.assert_allclose(served.prefix_rad, local.prefix_rad, atol=1e-6)


def test_health_on_request_and_from_the_health_command(capsys):
    import json

    from robotrl.cli import main
    from robotrl.wire.messages import HealthReply, HealthRequest

    with PolicyServer(RampPolicy(), ServerConfig(endpoint="tcp://127.0.0.1:*")) as server:
        with ClientSocket(server.endpoint, robot_id="arm0") as arm0:
            arm0.connect(timeout_s=5)
            for i in range(5):
                assert isinstance(arm0.request(request("arm0", i, np.full(6, 0.1)), 5), ChunkReply)
            arm0.send(HealthRequest())
            reply = arm0.recv(5)
        assert main(["health", server.endpoint]) == 0
        printed = json.loads(capsys.readouterr().out)
    assert isinstance(reply, HealthReply) and all(reply.health["threads_alive"].values())
    assert reply.health["batches_per_s"] == pytest.approx(5 / 10)  # 5 batches in the 10 s window
    assert reply.health["errors"] == {} and reply.health["learner"] is None and reply.health["version"] == 0
    assert printed["threads_alive"] == reply.health["threads_alive"]
    t0 = time.monotonic()
    assert main(["health", "tcp://127.0.0.1:1", "--timeout-s", "0.5"]) == 2  # nothing there: one line, exit 2
    assert time.monotonic() - t0 < 2.0 and "no hello from a server" in capsys.readouterr().err


def test_a_robot_id_belongs_to_the_connection_that_said_hello_with_it():
    with PolicyServer(RampPolicy(), ServerConfig(endpoint="tcp://127.0.0.1:*")) as server:
        with (
            ClientSocket(server.endpoint, robot_id="arm0") as arm0,
            ClientSocket(server.endpoint, robot_id="thief") as thief,
        ):
            arm0.connect(timeout_s=5)
            thief.connect(timeout_s=5)
            refused = thief.request(request("arm0", 7, np.full(6, 0.4)), 5)
            served = arm0.request(request("arm0", 1, np.full(6, 0.1)), 5)
        health = server.health()
    assert refused.code == "wrong_robot_id" and "said hello as 'thief'" in refused.message
    assert isinstance(served, ChunkReply) and served.request_id == 1
    np.testing.assert_allclose(served.actions[0], np.full(6, 0.11), atol=1e-6)
    assert health["errors"] == {"wrong robot id": 1}


def test_an_oversized_message_disconnects_its_sender_and_nobody_else():
    config = ServerConfig(endpoint="tcp://127.0.0.1:*", max_message_bytes=1_000_000)
    with PolicyServer(RampPolicy(), config) as server:
        with ClientSocket(server.endpoint, robot_id="big") as big, ClientSocket(server.endpoint, robot_id="ok") as ok:
            big.connect(timeout_s=5)
            ok.connect(timeout_s=5)
            huge = request("big", 1, np.zeros(6))
            huge.images = {"front": np.zeros((1000, 1000, 3), np.uint8)}  # 3 MB
            big.send(huge)
            with pytest.raises(WireError):  # never answered
                big.recv(timeout_s=1.0)
            served = ok.request(request("ok", 1, np.full(6, 0.2)), 5)
        health = server.health()
    assert isinstance(served, ChunkReply)
    assert all(health["threads_alive"].values()) and health["queued_requests"] == 0


def test_a_dead_server_is_noticed_within_a_second_by_default():
    """Default client heartbeats: the arm holds within about 0.6 s of the server dying,
    not after the 2 s reply timeout."""
    env = TaskEnv("reach", cameras=(), clock=WallClock())
    server = PolicyServer(RampPolicy(), ServerConfig(endpoint="tcp://127.0.0.1:*", warmup_calls=0))
    server.start()
    client = ClientSocket(server.endpoint, robot_id="arm0")
    try:
        info = client.connect(timeout_s=5)
        executor = remote_executor(env.robot, client, info, ExecutorConfig(), robot_id="arm0")
        runner = EpisodeRunner(env.robot, env, executor, env.clock)
        runner.begin(5)
        for _ in range(15):
            runner.tick()
        server.stop()
        stopped = time.monotonic()
        while not executor.lost and time.monotonic() - stopped < 3.0:
            runner.tick()
        noticed_s = time.monotonic() - stopped
    finally:
        client.close()
        env.close()
    assert executor.lost and noticed_s < 1.0
