"""Online learning algorithms (robotrl.learn): SAC improves a tiny task, hil-flow weights,
DSRL shapes and critic learning, bitwise state_dict resume, served policies."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robotrl.buffer.episode import ROW_FIELDS, Episode
from robotrl.buffer.online import OnlineBuffer
from robotrl.buffer.sampler import ChunkSample, TransitionSample
from robotrl.buffer.spec import TransitionSpec
from robotrl.core.errors import ConfigError
from robotrl.core.policy import ChunkPolicy, PolicyObservation
from robotrl.learn.algorithm import Algorithm, ess_fraction
from robotrl.learn.dsrl import Dsrl, DsrlConfig, chunk_returns
from robotrl.learn.hil_flow import HilFlow, HilFlowConfig, accepted_rows, flow_batch, offset_chunks, row_weights
from robotrl.learn.registry import make_algorithm
from robotrl.learn.sac import SAC_PRESETS, Sac
from robotrl.policies.fastslow import FastSlowConfig, FastSlowPolicy
from robotrl.policies.fastslow.model import FastSlowModel
from robotrl.policies.fastslow.normalize import Normalizer
from robotrl.policies.fastslow.vocab import Vocabulary
from robotrl.policies.sac.policy import SacChunkPolicy, delta_to_unit, unit_to_chunk
from robotrl.train.loss import flow_matching_loss
from robotrl.wire.messages import TransitionBatch

torch.set_num_threads(1)


# --- pure maths ----------------------------------------------------------------------------


def test_row_weights_golden():
    # Online examples 0-2 are accepted with returns 0, 1, 2: mean 1, std sqrt(2/3) = 0.81650;
    # z = -1.2247, 0, 1.2247; exp(z) = 0.29384, 1, 3.4029 -> clipped to 3. Example 3 is
    # rejected (weight 0). Example 4 is a demo: weight 1 whatever its return (3 would be
    # z = 2.4 among the online ones). Example 0 row 1 is a human row: w_int = 3, not scaled
    # by its episode's low return. Example 1 row 1 is padding.
    # Positive weights 0.29384, 3, 1, 3, 3, 1, 1 average 12.29384 / 7 = 1.756263.
    w = row_weights(
        np.array([0.0, 1.0, 2.0, 5.0, 3.0]),
        np.array([True, True, True, False, True]),
        np.array([[False, True], [False, False], [False, False], [True, True], [False, False]]),
        np.array([[True, True], [True, False], [True, True], [True, True], [True, True]]),
        np.array([False, False, False, False, True]),
        beta=1.0,
        max_weight=3.0,
        w_int=3.0,
    )
    expected = np.array([[0.29384, 3.0], [1.0, 0.0], [3.0, 3.0], [0.0, 0.0], [1.0, 1.0]]) / 1.756263
    np.testing.assert_allclose(w, expected, rtol=1e-4)
    # beta = 0: returns ignored, only the human rows stand out.
    w0 = row_weights(
        np.array([0.0, 9.0]),
        np.ones(2, bool),
        np.array([[True, False], [False, False]]),
        np.ones((2, 2), bool),
        np.zeros(2, bool),
        beta=0.0,
        max_weight=3.0,
        w_int=3.0,
    )
    np.testing.assert_allclose(w0, np.array([[3.0, 1.0], [1.0, 1.0]]) / 1.5)
    # Nothing accepted: all zero, no division by zero.
    assert not row_weights(
        np.ones(2),
        np.zeros(2, bool),
        np.zeros((2, 3), bool),
        np.ones((2, 3), bool),
        np.zeros(2, bool),
        beta=1.0,
        max_weight=3.0,
        w_int=3.0,
    ).any()


def test_accepted_rows_golden():
    # 0: demo, all real -> all kept. 1: failed online episode, human takes over at row 2 ->
    # only the human rows. 2: successful episode, human at row 1 only -> row 0 (drift before
    # the correction) dropped, row 1 kept, rows 2-3 (policy after hand-back) kept.
    # 3: successful, no human, last row padding -> rows 0-2.
    intervention = np.array([[0, 0, 0, 0], [0, 0, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]], bool)
    mask = np.array([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0]], bool)
    rows = accepted_rows(
        np.array([True, False, False, False]), np.array([False, False, True, True]), intervention, mask
    )
    expected = np.array([[1, 1, 1, 1], [0, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 0]], bool)
    np.testing.assert_array_equal(rows, expected)


def test_ess_and_chunk_returns_golden():
    assert ess_fraction(np.ones(8)) == 1.0
    assert ess_fraction(np.array([1.0, 0, 0, 0])) == 0.25  # (1)^2 / (4 * 1)
    assert abs(ess_fraction(np.array([1.0, 3.0])) - 16 / 20) < 1e-12  # 4^2 / (2 * 10)
    # rows r = [1, 2, 4] with gamma 0.5 and the last row padding: 1 + 0.5 * 2 = 2, gamma^2 = 0.25
    ret, gn = chunk_returns(np.array([[1.0, 2.0, 4.0]]), np.array([[True, True, False]]), 0.5)
    assert ret.tolist() == [2.0] and gn.tolist() == [0.25]


def test_delta_actions_golden():
    state = np.array([0.1, -0.2, 0.3])
    unit = delta_to_unit(np.array([0.125, -0.3]), state, 0.05)  # (0.025 / 0.05, -0.1 / 0.05 -> clip)
    np.testing.assert_allclose(unit, [0.5, -1.0])
    np.testing.assert_allclose(unit_to_chunk(np.array([0.5, -1.0]), state, 0.05, 2), [[0.125, -0.25], [0.15, -0.3]])


# --- SAC on a 1-D point mass ---------------------------------------------------------------

MAX_STEP = 0.1


class PointMassBuffer:
    """Random-action rollouts of x' = x + 0.1 a, reward -|x'| (goal 0), 20-tick episodes."""

    def __init__(self, episodes: int = 60, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        s, a, r, d, n = [], [], [], [], []
        for _ in range(episodes):
            x = rng.uniform(-1, 1)
            for t in range(20):
                u = rng.uniform(-1, 1)
                x2 = x + MAX_STEP * u
                s.append([x]), a.append([x2]), r.append(-abs(x2)), d.append(t == 19), n.append([x2])
                x = x2
        self.state, self.action = np.array(s, np.float32), np.array(a, np.float32)
        self.reward, self.done, self.next_state = np.array(r, np.float32), np.array(d), np.array(n, np.float32)

    def sample_transitions(self, batch_size, learner_version, rng) -> TransitionSample:
        i = rng.integers(0, len(self.state), batch_size)
        b = len(i)
        return TransitionSample(
            self.state[i],
            None,
            {},
            self.action[i],
            self.reward[i],
            self.done[i],
            self.next_state[i],
            None,
            {},
            np.zeros(b, bool),
            np.zeros(b, np.int64),
            np.zeros(b, np.int64),
            np.zeros(b, bool),
        )


def point_mass_return(policy: ChunkPolicy) -> float:
    total = 0.0
    for x0 in (-0.9, -0.5, 0.6, 0.95):
        x = x0
        for t in range(20):
            x = float(policy.predict_chunk(PolicyObservation(np.array([x]), tick=t)).actions_rad[0, 0])
            total -= abs(x)
    return total


def make_sac(**overrides) -> Sac:
    spec = TransitionSpec(1, 1)
    return make_algorithm(
        "sac",
        spec,
        preset="tiny",
        overrides={"max_step_rad": MAX_STEP, "deterministic_serving": True, "discount": 0.9, **overrides},
        seed=0,
    )


def test_sac_improves_the_return_of_a_point_mass():
    algo, buffer, rng = make_sac(tau=0.02), PointMassBuffer(), np.random.default_rng(0)
    assert isinstance(algo, Algorithm)
    before = point_mass_return(algo.served_policy())
    for _ in range(250):
        metrics = algo.update(buffer, 0, rng)
    after = point_mass_return(algo.served_policy())
    # Doing nothing scores about -60; driving to 0 at 0.1 rad/tick scores about -22.
    assert after > before + 10 and after > -35, (before, after)
    assert metrics["ess"] == 1.0 and metrics["staleness_mean"] == 0.0 and np.isfinite(metrics["loss_critic"])
    # The served policy takes the learner's weights over the wire format.
    served = SacChunkPolicy(make_sac().actor, deterministic=True)
    served.load_weights(algo.policy_weights())
    assert point_mass_return(served) == after


def resume(algo: Algorithm, state: dict, rng_state: dict, buffer, updates: int) -> None:
    """Load `state` into `algo`, then run `updates` updates with a generator restored to
    `rng_state` (the bit generator state saved along with `state`)."""
    algo.load_state_dict(state)
    rng = np.random.default_rng()
    rng.bit_generator.state = rng_state
    for _ in range(updates):
        algo.update(buffer, 0, rng)


def test_sac_state_dict_resumes_bitwise():
    buffer = PointMassBuffer(10)
    a, rng = make_sac(), np.random.default_rng(1)
    for _ in range(3):
        a.update(buffer, 0, rng)
    state, rng_state = a.state_dict(), rng.bit_generator.state
    for _ in range(2):
        a.update(buffer, 0, rng)
    b = make_algorithm(
        "sac",
        TransitionSpec(1, 1),
        preset="tiny",
        overrides={"max_step_rad": MAX_STEP, "deterministic_serving": True, "discount": 0.9},
        seed=5,
    )
    resume(b, state, rng_state, buffer, 2)
    assert a.policy_weights() == b.policy_weights()
    for k, v in a.critic_target.state_dict().items():
        assert torch.equal(v, b.critic_target.state_dict()[k])


def test_sac_policy_with_images_and_env_state(tmp_path):
    spec = TransitionSpec(6, 6, {"front": (64, 64)}, 3)
    algo = make_algorithm(
        "sac", spec, preset="default", overrides={"latent_dim": 32, "hidden_dims": (32,), "cnn_channels": 8}
    )
    policy = algo.served_policy()
    obs = PolicyObservation(
        np.full(6, 0.2), tick=4, images={"front": np.zeros((96, 128, 3), np.uint8)}, env_state=np.ones(3), delay_ticks=2
    )
    chunk = policy.predict_chunk(obs)
    assert chunk.actions_rad.shape == (2, 6) and chunk.start_tick == 6
    step = chunk.actions_rad[0] - 0.2  # row 1 = state + 2 x (row 0 - state), each |delta| <= 0.05
    np.testing.assert_allclose(chunk.actions_rad[1] - 0.2, 2 * step, atol=1e-12)
    assert np.abs(step).max() <= 0.05 + 1e-9
    policy.save(tmp_path / "sac")
    loaded = SacChunkPolicy.load(tmp_path / "sac")
    np.testing.assert_array_equal(loaded.predict_chunk(obs).actions_rad, chunk.actions_rad)
    with pytest.raises(ConfigError, match="do not fit"):
        loaded.load_weights(make_sac().policy_weights())
    with pytest.raises(ValueError, match="env_state"):
        policy.predict_chunk(PolicyObservation(np.zeros(6), 0, images=obs.images))


def test_factory_errors():
    with pytest.raises(ConfigError, match="unknown algorithm"):
        make_algorithm("ppo", TransitionSpec(1, 1))
    with pytest.raises(ConfigError, match="no preset"):
        make_algorithm("sac", TransitionSpec(1, 1), preset="huge")
    with pytest.raises(ConfigError, match="--policy"):
        make_algorithm("hil-flow", TransitionSpec(6, 6))
    assert set(SAC_PRESETS) == {"default", "state", "tiny"}


# --- flow policies -------------------------------------------------------------------------

H, A = 4, 6
HOME = np.zeros(6)


def tiny_flow(seed: int = 0, **config) -> FastSlowPolicy:
    cfg = FastSlowConfig(
        width=16,
        cnn_channels=(8, 8),
        expert_hidden=32,
        expert_blocks=1,
        horizon=H,
        execute_steps=2,
        image_size_px=16,
        flow_steps=3,
        cameras=("front",),
        use_env_state=True,
        env_state_dim=3,
        **config,
    )
    torch.manual_seed(seed)
    model = FastSlowModel(cfg, vocab_size=4)
    with torch.no_grad():
        model.expert.out.weight.normal_(0, 0.02)
    norm = Normalizer("delta", HOME, np.full(6, 0.3), np.zeros((H, A)), np.full((H, A), 0.05), np.zeros(3), np.ones(3))
    return FastSlowPolicy(model, norm, Vocabulary(["<pad>", "<unk>", "pick", "cube"]))


class ChunkBuffer:
    """A fixed pool of 24 chunks: 1/3 demos, 1/3 successful online, 1/3 failed online."""

    def __init__(self, seed: int = 0, env_state: bool = True) -> None:
        rng = np.random.default_rng(seed)
        n = 24
        self.has_env = env_state
        self.state = rng.normal(0, 0.2, (n, 6)).astype(np.float32)
        pattern = 0.05 * np.sin(np.arange(H * A)).reshape(H, A)  # one learnable delta chunk (+-1 std)
        self.actions = (self.state[:, None] + pattern + rng.normal(0, 0.005, (n, H, A))).astype(np.float32)
        self.env = rng.normal(0, 1, (n, 3)).astype(np.float32)
        self.images = rng.integers(0, 255, (n, 24, 24, 3), dtype=np.uint8)
        kind = np.arange(n) % 3
        self.is_demo, self.success = kind == 0, kind == 1
        self.reward = np.where(self.success[:, None] & (np.arange(H) == H - 1), 1.0, 0.0).astype(np.float32)

    def sample_chunks(self, batch_size, horizon, learner_version, rng) -> ChunkSample:
        i = rng.integers(0, len(self.state), batch_size)
        b = len(i)
        intervention = np.zeros((b, H), bool)
        intervention[:, 1] = self.success[i]
        images = {"front": self.images[i]}
        return ChunkSample(
            state=self.state[i],
            env_state=self.env[i] if self.has_env else None,
            images=images,
            instruction=["pick cube"] * b,
            actions=self.actions[i],
            mask=np.ones((b, H), bool),
            intervention=intervention,
            episode_return=self.reward[i].sum(1),
            episode_success=self.success[i],
            episode_intervened=intervention.any(1),
            version=np.zeros(b, np.int64),
            staleness=np.zeros(b, np.int64),
            is_demo=self.is_demo[i],
            reward=self.reward[i],
            next_state=self.state[i],
            next_env_state=self.env[i] if self.has_env else None,
            next_images=images,
            done=self.success[i],
        )


def test_hil_flow_update_lowers_the_weighted_loss_and_resumes_bitwise():
    spec = TransitionSpec(6, 6, {"front": (24, 24)}, 3)
    algo = HilFlow(spec, tiny_flow(), HilFlowConfig(batch_size=16, lr=3e-3, flow_samples=2), seed=0)
    buffer, rng = ChunkBuffer(), np.random.default_rng(0)
    first = algo.update(buffer, 0, rng)
    assert 0.4 < first["accepted_frac"] < 0.95 and 0 < first["ess"] <= 1.0 and first["skipped"] == 0.0
    state, rng_state = algo.state_dict(), rng.bit_generator.state
    losses = [algo.update(buffer, 0, rng)["loss_flow"] for _ in range(60)]
    assert np.mean(losses[-5:]) < 0.7 * first["loss_flow"], (first["loss_flow"], losses[-5:])
    resumed = HilFlow(spec, tiny_flow(seed=9), HilFlowConfig(batch_size=16, lr=3e-3, flow_samples=2), seed=3)
    resume(resumed, state, rng_state, buffer, 60)
    assert resumed.policy_weights() == algo.policy_weights()
    served = tiny_flow(seed=9)  # the server's copy takes the weights as bytes
    served.load_weights(algo.policy_weights())
    obs = PolicyObservation(HOME, 3, "pick cube", {"front": buffer.images[0]}, env_state=np.zeros(3))
    np.testing.assert_array_equal(
        served.predict_chunk(obs).actions_rad, algo.served_policy().predict_chunk(obs).actions_rad
    )


def test_hil_flow_serves_the_moving_average_of_its_weights():
    spec = TransitionSpec(6, 6, {"front": (24, 24)}, 3)
    algo = HilFlow(spec, tiny_flow(), HilFlowConfig(batch_size=16, lr=3e-3, flow_samples=2, ema_decay=0.9), seed=0)
    buffer, rng = ChunkBuffer(), np.random.default_rng(0)
    before = {k: v.clone() for k, v in algo.model.state_dict().items()}
    algo.update(buffer, 0, rng)
    after = algo.model.state_dict()
    ema = algo.ema.model.state_dict()
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    assert moved  # the update changed the trained weights...
    for k in moved:  # ...and the served ones by a tenth of that: 0.9 * old + 0.1 * new
        torch.testing.assert_close(ema[k], 0.9 * before[k] + 0.1 * after[k])
    served = tiny_flow(seed=9)
    served.load_weights(algo.policy_weights())
    for k, v in served.model.state_dict().items():
        torch.testing.assert_close(v, ema[k])
    raw = HilFlow(spec, tiny_flow(), HilFlowConfig(batch_size=16, lr=3e-3, flow_samples=2, ema_decay=0.0), seed=0)
    raw.update(ChunkBuffer(), 0, np.random.default_rng(0))
    for k, v in raw.ema.model.state_dict().items():  # decay 0: the raw weights are served
        torch.testing.assert_close(v, raw.model.state_dict()[k])


def test_hil_flow_frozen_encoder_trains_the_fast_pathway_only():
    spec = TransitionSpec(6, 6, {"front": (24, 24)}, 3)
    config = HilFlowConfig(batch_size=16, lr=3e-3, flow_samples=2, freeze_encoder=True)
    algo = HilFlow(spec, tiny_flow(), config, seed=0)
    slow = {k: v.clone() for k, v in algo.model.slow.state_dict().items()}
    expert = {k: v.clone() for k, v in algo.model.expert.state_dict().items()}
    buffer, rng = ChunkBuffer(), np.random.default_rng(0)
    first = algo.update(buffer, 0, rng)["loss_flow"]
    losses = [algo.update(buffer, 0, rng)["loss_flow"] for _ in range(60)]
    assert np.mean(losses[-5:]) < 0.7 * first, (first, losses[-5:])
    for k, v in algo.model.slow.state_dict().items():  # the cameras' CNN and the text encoder as they were
        assert torch.equal(v, slow[k]), k
    assert sum(not torch.equal(v, expert[k]) for k, v in algo.model.expert.state_dict().items()) > 0
    optimized = sum(p.numel() for g in algo.optimizer.param_groups for p in g["params"])
    assert optimized == algo.model.num_parameters - sum(p.numel() for p in algo.model.slow.parameters())


def test_hil_flow_fine_tunes_a_policy_estimating_the_scene_without_the_simulators_state():
    """A real arm streams no env_state: a policy that estimates it (`estimate_env_state`)
    learns on its own estimate, which its fast pathway reads as when deployed (another
    estimate, another loss), and the estimate, with no target, stays as it was: its head
    and the slow pathway it reads."""
    spec = TransitionSpec(6, 6, {"front": (24, 24)}, 0)
    algo = HilFlow(spec, tiny_flow(estimate_env_state=True), HilFlowConfig(batch_size=16, lr=3e-3, flow_samples=2))
    head = {k: v.clone() for k, v in algo.model.env_head.state_dict().items()}
    slow = {k: v.clone() for k, v in algo.model.slow.state_dict().items()}
    buffer, rng = ChunkBuffer(env_state=False), np.random.default_rng(0)
    first = algo.update(buffer, 0, rng)["loss_flow"]
    losses = [algo.update(buffer, 0, rng)["loss_flow"] for _ in range(60)]
    assert np.mean(losses[-5:]) < 0.7 * first, (first, losses[-5:])
    assert all(torch.equal(v, head[k]) for k, v in algo.model.env_head.state_dict().items())
    assert all(torch.equal(v, slow[k]) for k, v in algo.model.slow.state_dict().items())
    sample = buffer.sample_chunks(16, H, 0, np.random.default_rng(1))
    batch = flow_batch(algo.policy, sample, offset_chunks(sample, np.zeros(16, np.int64), H), np.arange(16))
    assert batch.env_state is None

    def loss() -> float:
        torch.manual_seed(0)
        with torch.no_grad():
            return float(flow_matching_loss(algo.model, algo.policy.normalizer, batch, 2))

    before = loss()
    with torch.no_grad():
        algo.model.env_head[-1].bias += 5.0  # another estimate of the scene (the same draws: equal if unread)
    assert abs(loss() - before) > 1e-5


def test_dsrl_steers_a_policy_estimating_the_scene_without_the_simulators_state():
    spec = TransitionSpec(6, 6, {"front": (24, 24)}, 0)
    algo = Dsrl(spec, tiny_flow(estimate_env_state=True), DsrlConfig(batch_size=16, hidden_dims=(64, 64)), seed=0)
    metrics = algo.update(ChunkBuffer(env_state=False), 0, np.random.default_rng(0))
    assert np.isfinite(metrics["loss_critic"]) and algo.net.env_state_dim == 0
    obs = PolicyObservation(HOME, 7, "pick cube", {"front": np.zeros((24, 24, 3), np.uint8)}, delay_ticks=1)
    assert np.all(np.isfinite(algo.served_policy().predict_chunk(obs).actions_rad))  # no env_state asked


def test_dsrl_shapes_noise_range_and_critic_learning():
    spec = TransitionSpec(6, 6, {"front": (24, 24)}, 3)
    algo = Dsrl(
        spec,
        tiny_flow(),
        DsrlConfig(batch_size=16, latent_dim=32, hidden_dims=(64, 64), noise_bound=1.5, critic_lr=1e-3),
        seed=0,
    )
    policy = algo.served_policy()
    meta, flow = policy.metadata, algo.flow.metadata
    assert (meta.policy_type, meta.follows_rtc_prefix, meta.execute_steps) == ("dsrl", False, 2)  # rtc modes refuse it
    assert (meta.cameras, meta.env_state_dim, meta.start_state_rad) == (flow.cameras, 3, flow.start_state_rad)
    obs = PolicyObservation(
        HOME, 7, "pick cube", {"front": np.zeros((24, 24, 3), np.uint8)}, env_state=np.ones(3), delay_ticks=1
    )
    chunk = policy.predict_chunk(obs)
    assert chunk.actions_rad.shape == (H, A) and chunk.start_tick == 8 and np.all(np.isfinite(chunk.actions_rad))
    with torch.no_grad():
        unit, _ = algo.actor({"state": torch.zeros(64, 6), "env_state": torch.randn(64, 3) * 5})
    assert unit.shape == (64, H * A) and float((1.5 * unit).abs().max()) <= 1.5
    buffer, rng = ChunkBuffer(), np.random.default_rng(0)
    losses = [algo.update(buffer, 0, rng)["loss_critic"] for _ in range(15)]
    assert losses[-1] < 0.5 * losses[0], losses
    before = policy.predict_chunk(obs).actions_rad
    policy.load_weights(algo.policy_weights())
    assert not np.allclose(policy.predict_chunk(obs).actions_rad, before)  # the noise actor moved


# --- every algorithm against a real OnlineBuffer -------------------------------------------


def synthetic_batches(
    episode: int, n: int, *, success: bool, intervene: slice = slice(0, 0), version: int = 0
) -> list[TransitionBatch]:
    """One online episode of n rows in 4-row TransitionBatches: the arm steps 0.01 rad/tick
    towards a per-episode offset; reward 1 on the last row of a success; rows `intervene`
    are human rows."""
    rng = np.random.default_rng(episode)
    t = np.arange(n)
    state = (rng.normal(0, 0.1, 6) + 0.01 * t[:, None]).astype(np.float32)
    intervention = np.zeros(n, bool)
    intervention[intervene] = True
    reward = np.where(success & (t == n - 1), 1.0, 0.0).astype(np.float32)
    images = rng.integers(0, 255, (n, 16, 16, 3), dtype=np.uint8)
    env = rng.normal(0, 1, (n, 3)).astype(np.float32)
    return [
        TransitionBatch(
            robot_id="sim0",
            episode_id=episode,
            seq=r.start,
            ticks=t[r].astype(np.int64),
            state=state[r],
            action=state[r] + 0.01,
            policy_action=state[r] + 0.02,
            reward=reward[r],
            intervention=intervention[r],
            version=np.full(len(t[r]), version, np.int64),
            delay_ticks=np.ones(len(t[r]), np.int64),
            images={"front": images[r]},
            env_state=env[r],
            instruction="pick cube",
            episode_done=r.stop >= n,
            success=success,
        )
        for r in (slice(s, s + 4) for s in range(0, n, 4))
    ]


def real_buffer(root) -> OnlineBuffer:
    """3 online episodes (a success, a failure with 3 intervention rows, a failure) and
    one demo episode, 10 rows each, spec state/action 6, camera front 16x16, env_state 3."""
    spec = TransitionSpec(6, 6, {"front": (16, 16)}, 3)
    buf = OnlineBuffer(root, spec, capacity=200, fsync=False)
    for ep, kw in enumerate([{"success": True}, {"success": False, "intervene": slice(2, 5)}, {"success": False}]):
        for batch in synthetic_batches(ep, 10, version=ep, **kw):
            buf.add(batch)
    d = synthetic_batches(99, 10, success=True)
    rows = {k: np.concatenate([getattr(b, k) for b in d]) for k in ROW_FIELDS}
    rows["version"][:] = -1
    buf.add_demo_episodes(
        [
            Episode(
                "demo",
                0,
                **rows,
                images={"front": np.concatenate([b.images["front"] for b in d])},
                env_state=np.concatenate([b.env_state for b in d]),
                instruction="pick cube",
                success=True,
                source="demo",
            )
        ]
    )
    assert buf.committed_episodes == 3 and len(buf) == 40
    return buf


@pytest.mark.filterwarnings("error:Converting a tensor with requires_grad")
@pytest.mark.parametrize("name, preset", [("sac", "tiny"), ("hil-flow", "small"), ("dsrl", "small")])
def test_update_against_a_real_online_buffer(tmp_path, name, preset):
    buf = real_buffer(tmp_path / "buffer")
    tiny_flow().save(tmp_path / "flow")
    algo = make_algorithm(name, buf.spec, policy_path=tmp_path / "flow", preset=preset, seed=0)
    served = algo.served_policy()
    before = algo.policy_weights()
    rng = np.random.default_rng(0)
    for _ in range(3):
        metrics = algo.update(buf, 3, rng)
        losses = {k: v for k, v in metrics.items() if k.startswith("loss")}
        assert losses and all(np.isfinite(v) for v in losses.values()), metrics
    assert 0 <= metrics["staleness_mean"] <= 3 and np.isfinite(metrics["grad_norm"])
    if name == "hil-flow":  # the success, the intervened episode and the demo are accepted
        assert metrics["accepted_frac"] > 0.3 and metrics["skipped"] == 0.0
    after = algo.policy_weights()
    assert after != before
    served.load_weights(after)  # the server's copy takes the new weights
    obs = PolicyObservation(
        np.zeros(6), 0, "pick cube", {"front": np.zeros((16, 16, 3), np.uint8)}, env_state=np.zeros(3)
    )
    assert np.all(np.isfinite(served.predict_chunk(obs).actions_rad))


# --- offset augmentation online -------------------------------------------------------------


def test_offset_chunks_golden():
    """Chunks k rows after their images' row t, as offline training offsets them: the
    measured state when k = 0, else the action executed at row t + k - 1; k clipped to the
    episode's last row."""
    length = H + 4
    sample = ChunkBuffer().sample_chunks(3, length, 0, np.random.default_rng(0))
    sample.actions = np.arange(3 * length * A, dtype=np.float32).reshape(3, length, A)
    sample.mask = np.ones((3, length), bool)
    sample.mask[2, 5:] = False  # example 2's episode ends 5 rows after its row t
    sample.intervention = np.zeros((3, length), bool)
    sample.intervention[1, 4] = True
    out = offset_chunks(sample, np.array([0, 3, 7]), H)
    assert out.age.tolist() == [0, 3, 4]
    np.testing.assert_array_equal(out.state, np.stack([sample.state[0], sample.actions[1, 2], sample.actions[2, 3]]))
    np.testing.assert_array_equal(out.actions[1], sample.actions[1, 3 : 3 + H])
    np.testing.assert_array_equal(out.actions[0], sample.actions[0, :H])
    assert out.mask[2].tolist() == [True] + [False] * (H - 1) and out.mask[:2].all()
    assert out.intervention[1].tolist() == [False, True] + [False] * (H - 2)


def test_hil_flow_with_offsets_learns_at_the_delays_the_arm_runs_at(tmp_path):
    """k_max = 0 trains latent age 0 only: the age embeddings of older latents, which a
    delayed arm's requests carry, stay as they were. With k_max = 3 (and forwarded states
    noised) ages 1..3 train too, and older ones stay."""
    buf = real_buffer(tmp_path / "buffer")
    trained = {}
    for k_max in (0, 3):
        config = HilFlowConfig(batch_size=16, lr=3e-3, flow_samples=2, k_max=k_max, forward_noise=1.0 if k_max else 0)
        algo = HilFlow(buf.spec, tiny_flow(), config, seed=0)
        before = algo.model.expert.age_embed.weight.detach().clone()
        rng = np.random.default_rng(0)
        for _ in range(5):
            assert np.isfinite(algo.update(buf, 0, rng)["loss_flow"])
        moved = (algo.model.expert.age_embed.weight != before).any(1)
        trained[k_max] = np.flatnonzero(moved.numpy()).tolist()
    assert trained == {0: [0], 3: [0, 1, 2, 3]}
    with pytest.raises(ConfigError, match="latent ages up to 32"):
        HilFlow(buf.spec, tiny_flow(), HilFlowConfig(k_max=33))
    with pytest.raises(ConfigError, match="forward_noise only with k_max"):
        HilFlowConfig(forward_noise=1.0)
