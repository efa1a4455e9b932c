"""A policy that reads past frames (`--past-frame-ticks`): trained on a scene whose motion
only two frames show, it acts on the direction of motion; the checkpoint and the
server's hello carry G; a request without the past frames is refused with one line."""

from __future__ import annotations

import numpy as np
import pytest
from toy_data import INSTRUCTIONS, S0, TINY, motion_image, motion_x, write_motion_dataset

from robotrl.core.policy import PolicyObservation, past_image_key
from robotrl.inference.requests import request_problem
from robotrl.policies.fastslow.policy import FastSlowPolicy
from robotrl.record.dataset import load_frames
from robotrl.train.trainer import TrainConfig, Trainer
from robotrl.wire.messages import ObservationRequest

G = 2


@pytest.fixture(scope="module")
def motion_policy(tmp_path_factory):
    """A tiny policy with past frames (G = 2) trained on the motion dataset."""
    base = tmp_path_factory.mktemp("motion")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HOME", str(base / "hf"))
        mp.setenv("HF_DATASETS_CACHE", str(base / "hf" / "datasets"))
        write_motion_dataset(base / "ds")
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
        policy={**TINY, "past_frame_ticks": G},
    )
    trainer = Trainer(cfg, frames, progress=False)
    trainer.train()
    return trainer.policy(), base


def _obs(now_x: int, past_x: int) -> PolicyObservation:
    now, past = motion_image(now_x), motion_image(past_x)
    images = {"front": now, "wrist": now[::-1].copy()}
    images |= {past_image_key("front"): past, past_image_key("wrist"): past[::-1].copy()}
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


def test_the_checkpoint_and_metadata_carry_the_past_frame_ticks(motion_policy, tmp_path):
    policy, _ = motion_policy
    policy.save(tmp_path / "ck")
    meta = FastSlowPolicy.load(tmp_path / "ck").metadata
    assert meta.past_frame_ticks == G
    assert meta.image_keys == ("front", "wrist", "front@past", "wrist@past")


def test_a_request_without_the_past_frames_is_refused_in_one_line(motion_policy):
    policy, _ = motion_policy
    obs = _obs(10, 8)
    req = ObservationRequest(
        robot_id="a", request_id=1, tick=1, state=S0.astype(np.float32), in_flight=np.zeros((0, 6)), images=obs.images
    )
    assert request_problem(req, policy.metadata) is None
    del req.images["wrist@past"]
    problem = request_problem(req, policy.metadata)
    assert problem is not None and "wrist@past" in problem and "\n" not in problem


def test_the_server_tells_the_arm_g_and_answers_from_both_frames(motion_policy):
    """Through a real socket: the hello carries G, the arm's executor keeps G ticks of
    frames, and a request with the past frames gets the direction they show."""
    from robotrl.hardware.safety import SafeRobot
    from robotrl.hardware.sim_arm.robot import SimRobot
    from robotrl.inference.executor import ExecutorConfig
    from robotrl.inference.remote import remote_executor
    from robotrl.inference.server import PolicyServer, ServerConfig
    from robotrl.wire.client import ClientSocket

    policy, _ = motion_policy
    obs = _obs(motion_x(9, 1.0), motion_x(9 - G, 1.0))
    req = ObservationRequest(
        robot_id="arm", request_id=1, tick=10, state=S0, in_flight=np.zeros((0, 6)), images=obs.images
    )
    req.instruction = INSTRUCTIONS[0]
    with PolicyServer(policy, ServerConfig(endpoint="tcp://127.0.0.1:*", warmup_calls=1)) as server:
        with ClientSocket(server.endpoint, robot_id="arm") as client:
            info = client.connect(timeout_s=5)
            assert info["past_frame_ticks"] == G
            executor = remote_executor(SafeRobot(SimRobot()), client, info, ExecutorConfig("vlash"), robot_id="arm")
            assert executor.past_frames.ticks == G
            reply = client.request(req, 5)
    assert reply.actions[0, 0] - S0[0] == pytest.approx(0.3, abs=0.1)


def test_online_learning_refuses_a_policy_with_past_frames(motion_policy):
    """Transitions carry each tick's newest frames only: hil-flow says so instead of
    training the camera encoders on frames they were not built for."""
    from robotrl.buffer.spec import TransitionSpec
    from robotrl.core.errors import ConfigError
    from robotrl.learn.hil_flow import HilFlow, HilFlowConfig

    policy, _ = motion_policy
    spec = TransitionSpec(6, 6, {"front": (32, 32), "wrist": (32, 32)}, 0)
    with pytest.raises(ConfigError, match="past frames"):
        HilFlow(spec, policy, HilFlowConfig())
