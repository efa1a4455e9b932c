"""A policy that reads past frames (`--past-frame-ticks`, `--past-frames`): trained on a
scene whose motion only two frames show, it acts on the direction of motion, and with
three frames on a turn two frames cannot see; the checkpoint and the server's hello carry
G and P; a request without the past frames is refused with one line; online learning
(hil-flow, DSRL) trains it on the past frames the replay buffer gives."""

from __future__ import annotations

import numpy as np
import pytest
from toy_data import INSTRUCTIONS, S0, TINY, TURN_TICK, motion_image, motion_x, turn_x, write_motion_dataset

from robotrl.core.policy import PolicyObservation, past_image_key
from robotrl.inference.requests import request_problem
from robotrl.policies.fastslow.policy import FastSlowPolicy
from robotrl.record.dataset import load_frames
from robotrl.train.trainer import TrainConfig, Trainer
from robotrl.wire.messages import ObservationRequest

G = 2


def _trained(base, path, past_frames: int) -> FastSlowPolicy:
    """A tiny policy reading P past frames G = 2 ticks apart, trained on the motion dataset
    whose square follows `path`."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HOME", str(base / "hf"))
        mp.setenv("HF_DATASETS_CACHE", str(base / "hf" / "datasets"))
        write_motion_dataset(base / "ds", path=path)
        frames = load_frames(base / "ds", image_size_px=32, progress=False)
    cfg = TrainConfig(
        dataset=base / "ds",
        out=base / "ckpt",
        steps=300,
        batch_size=16,
        lr=2e-3,
        warmup_steps=20,
        k_max=0,  # a forwarded state (the recorded action) would give the direction away
        flow_samples=2,
        save_every=10_000,
        policy={**TINY, "past_frame_ticks": G, "past_frames": past_frames},
    )
    trainer = Trainer(cfg, frames, progress=False)
    trainer.train()
    return trainer.policy()


@pytest.fixture(scope="module")
def motion_policy(tmp_path_factory):
    """One past frame, trained on a square moving one way or the other."""
    base = tmp_path_factory.mktemp("motion")
    return _trained(base, motion_x, 1), base


@pytest.fixture(scope="module")
def turn_policy(tmp_path_factory):
    """Two past frames, trained on a square that turns or goes straight (`turn_x`)."""
    return _trained(tmp_path_factory.mktemp("turn"), turn_x, 2)


def _obs(*xs: int) -> PolicyObservation:
    """The square at columns xs: the newest frame, then its past frames (k = 1, 2, ..)."""
    images = {}
    for k, x in enumerate(xs):
        frame = motion_image(x)
        images[past_image_key("front", k) if k else "front"] = frame
        images[past_image_key("wrist", k) if k else "wrist"] = frame[::-1].copy()
    return PolicyObservation(S0.copy(), tick=10, instruction=INSTRUCTIONS[0], images=images)


def test_the_policy_acts_on_the_motion_two_frames_show(motion_policy):
    """At the same newest frame the square can be moving either way; the past frame alone
    says which, and the chunk's joint 0 takes the direction's +-0.3 rad."""
    policy, _ = motion_policy
    for t in (6, 9, 12):
        x_right, x_left = motion_x(t, 1.0), motion_x(19 - t, -1.0)
        assert x_right == x_left  # the same newest frame in both directions
        right = policy.predict_chunk(_obs(x_right, motion_x(t - G, 1.0))).actions_rad
        left = policy.predict_chunk(_obs(x_left, motion_x(19 - t - G, -1.0))).actions_rad
        assert right[0, 0] - S0[0] == pytest.approx(0.3, abs=0.1), t
        assert left[0, 0] - S0[0] == pytest.approx(-0.3, abs=0.1), t


def test_three_frames_tell_a_turn_that_two_frames_cannot(turn_policy):
    """At ticks TURN_TICK + G and + 2 G - 1 the newest frame and the one G back are the
    same whether the square turned or went straight; the frame 2 G back alone says which,
    and the chunk's joint 0 takes the episode's sign (+-0.3 rad; after the turn's last
    trace leaves the frames the two are alike and the policy answers about 0, which pulls
    these answers toward 0 in 300 steps)."""
    for t in (TURN_TICK + G, TURN_TICK + 2 * G - 1):
        turned, straight = [turn_x(t - k * G, 1.0) for k in range(3)], [turn_x(t - k * G, -1.0) for k in range(3)]
        assert turned[:2] == straight[:2] and turned[2] != straight[2]
        up = turn_policy.predict_chunk(_obs(*turned)).actions_rad[0, 0] - S0[0]
        down = turn_policy.predict_chunk(_obs(*straight)).actions_rad[0, 0] - S0[0]
        assert up > 0.15 and down < -0.1 and up - down > 0.35, (t, up, down)


def test_the_checkpoint_and_metadata_carry_the_past_frame_ticks(motion_policy, turn_policy, tmp_path):
    policy, _ = motion_policy
    policy.save(tmp_path / "ck")
    meta = FastSlowPolicy.load(tmp_path / "ck").metadata
    assert (meta.past_frame_ticks, meta.past_frames) == (G, 1)
    assert meta.image_keys == ("front", "wrist", "front@past", "wrist@past")
    turn_policy.save(tmp_path / "turn")
    meta = FastSlowPolicy.load(tmp_path / "turn").metadata
    assert (meta.past_frame_ticks, meta.past_frames) == (G, 2)
    assert meta.image_keys == ("front", "wrist", "front@past", "wrist@past", "front@past2", "wrist@past2")


def test_a_request_without_the_past_frames_is_refused_in_one_line(turn_policy):
    obs = _obs(10, 8, 6)
    req = ObservationRequest(
        robot_id="a", request_id=1, tick=1, state=S0.astype(np.float32), in_flight=np.zeros((0, 6)), images=obs.images
    )
    assert request_problem(req, turn_policy.metadata) is None
    del req.images["wrist@past2"]
    problem = request_problem(req, turn_policy.metadata)
    assert problem is not None and "wrist@past2" in problem and "\n" not in problem


def test_the_server_tells_the_arm_g_and_p_and_answers_from_the_three_frames(turn_policy):
    """Through a real socket: the hello carries G and P, the arm's executor keeps P G
    ticks of frames, and a request with the past frames gets the turn they show."""
    from robotrl.hardware.safety import SafeRobot
    from robotrl.hardware.sim_arm.robot import SimRobot
    from robotrl.inference.executor import ExecutorConfig
    from robotrl.inference.remote import remote_executor
    from robotrl.inference.server import PolicyServer, ServerConfig
    from robotrl.wire.client import ClientSocket

    obs = _obs(*(turn_x(TURN_TICK + G - k * G, 1.0) for k in range(3)))
    req = ObservationRequest(
        robot_id="arm", request_id=1, tick=10, state=S0, in_flight=np.zeros((0, 6)), images=obs.images
    )
    req.instruction = INSTRUCTIONS[0]
    with PolicyServer(turn_policy, ServerConfig(endpoint="tcp://127.0.0.1:*", warmup_calls=1)) as server:
        with ClientSocket(server.endpoint, robot_id="arm") as client:
            info = client.connect(timeout_s=5)
            assert (info["past_frame_ticks"], info["past_frames"]) == (G, 2)
            executor = remote_executor(SafeRobot(SimRobot()), client, info, ExecutorConfig("vlash"), robot_id="arm")
            assert (executor.past_frames.ticks, executor.past_frames.count) == (G, 2)
            reply = client.request(req, 5)
    assert reply.actions[0, 0] - S0[0] == pytest.approx(0.3, abs=0.1)


def _demo_buffer(base, path, past_ticks):
    """An `OnlineBuffer` holding the motion dataset written along `path` as demonstrations,
    sampling each camera's frames `past_ticks` rows back."""
    from robotrl.buffer.online import OnlineBuffer
    from robotrl.buffer.spec import TransitionSpec

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HOME", str(base / "hf"))
        mp.setenv("HF_DATASETS_CACHE", str(base / "hf" / "datasets"))
        write_motion_dataset(base / "ds", path=path)
        spec = TransitionSpec(6, 6, {"front": (32, 32), "wrist": (32, 32)}, 0)
        buf = OnlineBuffer(base / "buf", spec, capacity=100, fsync=False, past_ticks=past_ticks)
        buf.add_demo_dataset(base / "ds")
    return buf


def _answers(policy) -> tuple[float, float]:
    """Joint 0's first target (rad from S0) with the square at column 12 moving right, and left."""
    right = policy.predict_chunk(_obs(12, motion_x(8 - G, 1.0))).actions_rad[0, 0] - S0[0]
    left = policy.predict_chunk(_obs(12, motion_x(11 - G, -1.0))).actions_rad[0, 0] - S0[0]
    return right, left


def test_hil_flow_relearns_from_the_past_frames_the_buffer_gives(motion_policy, tmp_path):
    """Demonstrations where each direction of motion asks for the other answer: hil-flow,
    drawing each row's frame G rows back in its episode from the buffer, turns the policy's
    answers around. The newest frames of both directions are the same, so a policy not
    given the right past frames could only answer both alike."""
    from robotrl.learn.registry import make_algorithm

    policy, _ = motion_policy
    right, left = _answers(policy)
    assert right > 0.15 and left < -0.15 and right - left > 0.4, (right, left)
    policy.save(tmp_path / "policy")
    buf = _demo_buffer(tmp_path, lambda t, direction: motion_x(t, -direction), (G,))
    algo = make_algorithm(
        "hil-flow",
        buf.spec,
        policy_path=tmp_path / "policy",
        preset="small",
        overrides={"lr": 2e-3, "batch_size": 16, "ema_decay": 0.0},
    )
    rng = np.random.default_rng(0)
    for _ in range(200):
        algo.update(buf, 0, rng)
    right, left = _answers(algo.served_policy())
    assert right < -0.15 and left > 0.15 and left - right > 0.4, (right, left)


def test_dsrl_steers_a_policy_reading_past_frames_and_serves_them(turn_policy, tmp_path):
    """DSRL conditions its critic and actor on the flow's encoding of the sampled frames and
    their past frames (start and next rows); the policy it serves asks the arm for G and P."""
    from robotrl.learn.registry import make_algorithm

    turn_policy.save(tmp_path / "policy")
    buf = _demo_buffer(tmp_path, turn_x, (G, 2 * G))
    algo = make_algorithm("dsrl", buf.spec, policy_path=tmp_path / "policy", preset="small")
    rng = np.random.default_rng(0)
    before = algo.policy_weights()
    for _ in range(3):
        metrics = algo.update(buf, 0, rng)
        assert all(np.isfinite(v) for k, v in metrics.items() if k.startswith("loss")), metrics
    served = algo.served_policy()
    served.load_weights(algo.policy_weights())
    assert algo.policy_weights() != before
    meta = served.metadata
    assert (meta.past_frame_ticks, meta.past_frames, meta.image_keys) == (G, 2, turn_policy.metadata.image_keys)
    assert np.all(np.isfinite(served.predict_chunk(_obs(10, 8, 6)).actions_rad))
