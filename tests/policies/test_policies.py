"""Fast/slow policy: RTC maths (golden), vocabulary, shapes and units, determinism,
checkpoints, and clear errors on bad input. Untrained weights: fast, no dataset."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from robotrl.core.errors import ConfigError
from robotrl.core.policy import ChunkPolicy, PolicyObservation
from robotrl.policies.checkpoint import write_checkpoint
from robotrl.policies.fastslow import FastSlowConfig, FastSlowPolicy, flow
from robotrl.policies.fastslow.model import FastSlowModel
from robotrl.policies.fastslow.normalize import Normalizer, object_offsets_dm
from robotrl.policies.fastslow.vocab import Vocabulary
from robotrl.policies.loading import load_policy

H, A = 8, 6
HOME = np.array([0.0, -1.2, 1.1, 1.3, 0.0, 0.0])


# --- RTC maths ---------------------------------------------------------------------


def test_rtc_weights_golden():
    # H = 8, s = 2, d = 2: rows 0, 1 frozen (1); rows 2..5 decay with
    # c_i = (H - s - i) / (H - s - d + 1) = (6 - i) / 5 -> 0.8, 0.6, 0.4, 0.2 and
    # w = c (e^c - 1) / (e - 1); rows 6, 7 (the last s) free (0).
    w = flow.rtc_weights(8, 2, 2)
    expected = [1, 1] + [c * (math.exp(c) - 1) / (math.e - 1) for c in (0.8, 0.6, 0.4, 0.2)] + [0, 0]
    np.testing.assert_allclose(w.numpy(), expected, rtol=1e-6)
    # e.g. c = 0.8: 0.8 * (2.22554 - 1) / 1.71828 = 0.57059; c = 0.2: 0.2 * 0.22140 / 1.71828 = 0.02577.
    np.testing.assert_allclose(w[2:6].numpy(), [0.57059, 0.28707, 0.11449, 0.02577], atol=1e-5)
    # d = 0: nothing frozen, row 0 has c = 6 / 7.
    assert flow.rtc_weights(8, 2, 0)[0] == pytest.approx(6 / 7 * (math.exp(6 / 7) - 1) / (math.e - 1), rel=1e-6)


def test_rtc_guidance_scale_golden():
    # tau = 0: the ratio is infinite -> beta.
    assert flow.rtc_guidance_scale(0.0, 5.0) == 5.0
    # tau = 0.5: r2 = 0.25 / (0.25 + 0.25) = 0.5; (1 - tau) / (tau r2) = 0.5 / 0.25 = 2.
    assert flow.rtc_guidance_scale(0.5, 5.0) == pytest.approx(2.0)
    # tau = 0.9: r2 = 0.01 / 0.82; 0.1 / (0.9 * 0.0122) = 9.1 -> capped at beta = 5.
    assert flow.rtc_guidance_scale(0.9, 5.0) == 5.0
    assert flow.rtc_guidance_scale(1.0, 5.0) == 0.0


def test_rtc_guided_velocity_golden_on_a_linear_field():
    # v(x) = -x: A1_hat = x + (1 - tau)(-x) = tau x, dA1_hat/dx = tau I.
    # x = 1, target 0, tau = 0.5 (scale 2): v_guided = -1 + 2 * 0.5 * W * (0 - 0.5) = -1 - 0.5 W.
    x = torch.ones(1, 3, 2)
    w = torch.tensor([1.0, 0.5, 0.0])
    v = flow.rtc_guided_velocity(lambda a, t: -a, x, 0.5, torch.zeros(1, 3, 2), w, beta=5.0)
    np.testing.assert_allclose(v[0, :, 0].numpy(), [-1.5, -1.25, -1.0])
    assert not x.requires_grad  # the caller's tensor is untouched


def test_euler_sampling_and_clean_prefix():
    # The straight-path velocity (x1 - x0) is integrated exactly by Euler steps.
    x0, x1 = torch.randn(2, 4, 3), torch.randn(2, 4, 3)
    out = flow.sample(lambda x, t: x1 - x0, x0, steps=5)
    torch.testing.assert_close(out, x1)
    # Training-time RTC at inference: prefix rows are held clean and seen with tau = 1.
    seen = []
    out = flow.sample(lambda x, t: seen.append(t.clone()) or torch.zeros_like(x), x0, steps=3, prefix=x1, prefix_rows=2)
    torch.testing.assert_close(out[:, :2], x1[:, :2])
    torch.testing.assert_close(out[:, 2:], x0[:, 2:])
    assert all(torch.all(t[:, :2] == 1) for t in seen) and seen[1][0, 2] == pytest.approx(1 / 3)
    assert flow.prefix_tau(torch.tensor([0.25]), torch.tensor([1]), 3).tolist() == [[1.0, 0.25, 0.25]]


def test_end_effector_features():
    from robotrl.policies.fastslow.features import EndEffectorFeatures

    feats = EndEffectorFeatures("so101")(np.stack([HOME, HOME + 0.1]))
    assert feats.shape == (2, 9) and feats.dtype == np.float32
    # Home: the fingertip frame sits 0.159 m ahead of the base, 0.051 m above the table.
    np.testing.assert_allclose(feats[0, :3], [0.1585, 0.0, 0.0509], atol=1e-3)
    np.testing.assert_allclose(np.linalg.norm(feats[:, 3:6], axis=1), 1.0, atol=1e-5)  # unit axes


REACHING = np.array([0.0, -0.3, 0.4, 1.2, 0.0, 0.5])
"""A pose in the middle of the workspace (gripper 23 cm ahead, 7 cm up)."""


def _ik_trajectory(steps: int = 8) -> np.ndarray:
    """(steps, 6) joint rows of a smooth gripper path from REACHING: 1 cm per row along
    +y and 0.5 cm down, the wrist rolling 0.02 rad per row."""
    from robotrl.policies.fastslow.ee_actions import EndEffectorActions

    rows = EndEffectorActions("so101")
    start = rows.to_ee(REACHING[None])[0]
    ee = np.array([start + [0.0, 0.01 * (i + 1), -0.005 * (i + 1), 0.0, 0.02 * i, 0.1] for i in range(steps)])
    return rows.to_joints(ee, REACHING)


def test_end_effector_action_rows_round_trip():
    from robotrl.policies.fastslow.ee_actions import EndEffectorActions

    rows = EndEffectorActions("so101")
    ee = rows.to_ee(HOME[None])
    assert ee.shape == (1, 6) and ee.dtype == np.float32
    np.testing.assert_allclose(ee[0, :3], [0.1585, 0.0, 0.0509], atol=1e-3)  # the home fingertip (above)
    np.testing.assert_array_equal(ee[0, 3:], HOME[3:].astype(np.float32))  # wrist and gripper pass through
    joints = _ik_trajectory()
    back = rows.to_ee(joints)
    # Each row reaches its commanded position (IK tolerance 0.1 mm) with the wrist as given.
    start = rows.to_ee(REACHING[None])[0]
    np.testing.assert_allclose(back[:, 1] - start[1], 0.01 * np.arange(1, 9), atol=3e-4)
    np.testing.assert_allclose(back[:, 2] - start[2], -0.005 * np.arange(1, 9), atol=3e-4)
    np.testing.assert_allclose(back[:, 4], 0.02 * np.arange(8), atol=1e-6)
    # Moving sideways turns the pan joint one way; rows stay on one branch (small steps).
    assert len(set(np.sign(np.diff(joints[:, 0])))) == 1 and np.abs(np.diff(joints[:, :3], axis=0)).max() < 0.1
    np.testing.assert_allclose(rows.to_joints(rows.to_ee(joints), REACHING), joints, atol=2e-3)


@pytest.mark.parametrize("mode", ["ee_delta", "ee_absolute"])
def test_end_effector_normaliser_encodes_and_decodes_joint_chunks(mode):
    joints = torch.from_numpy(_ik_trajectory().astype(np.float32))[None]  # (1, 8, 6)
    state = torch.from_numpy(REACHING.astype(np.float32))[None]
    norm = Normalizer.fit(mode, REACHING[None], joints.numpy(), REACHING[None], np.ones((1, 8), bool), arm="so101")
    assert norm.arm == "so101" and norm.action_mean.shape == ((8, 6) if mode == "ee_delta" else (6,))
    x = norm.encode_chunk(joints, state)
    assert x.shape == (1, 8, 6)
    np.testing.assert_allclose(norm.decode_chunk(x, state).numpy(), joints.numpy(), atol=2e-3)
    # Statistics in metres for the position columns: row i moved 1 cm x (i + 1) in y.
    start_y = norm.ee_actions.to_ee(REACHING[None])[0, 1]
    if mode == "ee_delta":
        np.testing.assert_allclose(norm.action_mean[:, 1], 0.01 * np.arange(1, 9), atol=3e-4)
    else:
        assert norm.action_mean[1] - start_y == pytest.approx(0.045, abs=3e-4)  # mean of 1..8 cm
    again = Normalizer.from_dict(norm.to_dict())
    assert again.arm == "so101" and again.id == norm.id
    with pytest.raises(ValueError, match="arm"):
        Normalizer(mode, HOME, np.ones(6), np.zeros((8, 6)), np.ones((8, 6)))


def test_a_joint_the_demonstrations_never_moved_is_left_out_of_the_state():
    """On `track` the demonstrations never move the wrist roll or the gripper, so their state
    std is at the floor (0.01 rad). Their readings are normalised to 0: 0.004 rad of sensor
    noise on them changes nothing (amplified by 1 / 0.01, it threw a track policy off on
    every seed). A joint that moved is normalised as (q - mean) / std. A saved checkpoint
    (std stored at the floor) keeps the rule."""
    rng = np.random.default_rng(0)
    states = np.zeros((100, 6))
    states[:, :4] = rng.normal(0.0, 0.3, (100, 4))
    states[:, 4] = 0.5 + 1e-4 * rng.normal(size=100)  # a servo holding still
    chunks = np.repeat(states[:, None], 2, axis=1)
    norm = Normalizer.fit("absolute", states, chunks, states, np.ones((100, 2), bool))
    q = torch.tensor(states[:3], dtype=torch.float32)
    noisy = q + torch.tensor([0.0, 0.0, 0.0, 0.0, 0.004, -0.004])
    z = norm.state(noisy)
    assert torch.count_nonzero(z[:, 4:]) == 0
    moved = (states[:3, :4] - states[:, :4].mean(0)) / states[:, :4].std(0)
    np.testing.assert_allclose(z[:, :4].numpy(), moved, rtol=1e-4)
    again = Normalizer.from_dict(json.loads(json.dumps(norm.to_dict())))
    assert again.state_std[4] == np.float32(0.01)
    assert torch.equal(again.state(noisy), z)


def test_vocabulary():
    vocab = Vocabulary.build(["Put the red cube in the bin", "put the blue cube in the bin"])
    assert vocab.tokens[:2] == ["<pad>", "<unk>"] and "blue" in vocab.tokens
    ids = vocab.encode("put the GREEN cube!", 6)
    assert ids.tolist() == [vocab.index["put"], vocab.index["the"], 1, vocab.index["cube"], 0, 0]
    assert vocab.encode("", 3).tolist() == [0, 0, 0]
    assert len(vocab.encode("a " * 20, 4)) == 4


# --- an untrained policy -----------------------------------------------------------


def make_policy(seed: int = 0, **overrides) -> FastSlowPolicy:
    cfg = FastSlowConfig(
        **{
            "width": 32,
            "cnn_channels": (8, 16, 16),
            "expert_hidden": 64,
            "expert_blocks": 1,
            "horizon": H,
            "execute_steps": 2,
            "image_size_px": 32,
            "flow_steps": 3,
            **overrides,
        }
    )
    torch.manual_seed(0)
    model = FastSlowModel(cfg, vocab_size=6)
    with torch.no_grad():  # the zero-initialised output layer would make every chunk the mean
        model.expert.out.weight.normal_(0, 0.02)
    env, ee = cfg.use_env_state, bool(cfg.ee_features_arm)
    norm = Normalizer(
        "delta",
        HOME,
        np.full(6, 0.3),
        np.zeros((H, A)),
        np.full((H, A), 0.05),
        np.zeros(3) if env else None,
        np.ones(3) if env else None,
        np.zeros(9) if ee else None,
        np.full(9, 0.1) if ee else None,
    )
    vocab = Vocabulary(["<pad>", "<unk>", "put", "red", "blue", "cube"])
    return FastSlowPolicy(model, norm, vocab, seed=seed)


def obs(**kw) -> PolicyObservation:
    rng = np.random.default_rng(1)
    images = {c: rng.integers(0, 255, (48, 48, 3), dtype=np.uint8) for c in ("front", "wrist")}
    return PolicyObservation(
        **{"state_rad": HOME.copy(), "tick": 10, "instruction": "put red cube", "images": images, **kw}
    )


def test_chunk_shape_units_and_protocol():
    policy = make_policy()
    assert isinstance(policy, ChunkPolicy)
    chunk = policy.predict_chunk(obs(delay_ticks=3))
    assert chunk.actions_rad.shape == (H, A) and chunk.actions_rad.dtype == np.float64
    assert chunk.start_tick == 13 and np.all(np.isfinite(chunk.actions_rad))
    # Delta mode: rows are the state plus a few std (0.05 rad) of normalised output.
    assert np.abs(chunk.actions_rad - HOME).max() < 0.5
    meta = policy.metadata
    assert (meta.policy_type, meta.horizon, meta.action_dim, meta.cameras) == (
        "fastslow_flow",
        H,
        A,
        ("front", "wrist"),
    )
    assert len(meta.normalization_id) == 16
    latent = policy.encode_slow(obs())
    assert latent.shape == (3, 32)  # text token + one per camera


def test_same_seed_same_chunk_different_seed_different_chunk():
    a = make_policy(seed=0).predict_chunk(obs()).actions_rad
    b = make_policy(seed=0).predict_chunk(obs()).actions_rad
    c = make_policy(seed=1).predict_chunk(obs()).actions_rad
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_batched_chunks_match_single_requests():
    policy = make_policy(use_env_state=True, env_state_dim=3, ee_features_arm="so101")
    observations = [
        obs(env_state=np.zeros(3)),
        obs(tick=12, state_rad=HOME + 0.1, env_state=np.ones(3), delay_ticks=1),
        obs(tick=14, env_state=np.zeros(3), delay_ticks=2, prefix_rad=np.tile(HOME, (4, 1))),
    ]
    latents = [policy.encode_slow(o) for o in observations]
    batched = policy.predict_chunks(observations, latents, [0, 2, 1])
    for o, latent, age, chunk in zip(observations, latents, [0, 2, 1], batched):
        single = policy.predict_chunk(o, latent, age)
        np.testing.assert_allclose(chunk.actions_rad, single.actions_rad, atol=1e-5)
        assert chunk.start_tick == single.start_tick


def test_checkpoint_round_trip_is_bitwise(tmp_path):
    policy = make_policy(seed=3)
    policy.save(tmp_path / "ck")
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["config.json", "model.safetensors"]
    loaded = load_policy(tmp_path / "ck", seed=3)
    for o in (obs(), obs(tick=11, instruction="put blue cube", delay_ticks=2)):
        np.testing.assert_array_equal(loaded.predict_chunk(o).actions_rad, policy.predict_chunk(o).actions_rad)


def test_a_noise_scale_of_zero_gives_the_central_chunk_whatever_the_seed_or_tick(tmp_path):
    """`load_policy(..., noise_scale=0)`: the chunk no longer depends on the sampling seed
    or the request's tick (two requests of the same scene a tick apart agree), where
    sampled chunks differ by both; a policy type without flow noise takes no other scale."""
    make_policy(seed=3).save(tmp_path / "ck")
    draws = ((0, 10), (1, 10), (0, 11))
    central = [load_policy(tmp_path / "ck", seed=s, noise_scale=0.0).predict_chunk(obs(tick=t)) for s, t in draws]
    sampled = [load_policy(tmp_path / "ck", seed=s).predict_chunk(obs(tick=t)) for s, t in draws]
    for chunk in central[1:]:
        np.testing.assert_array_equal(chunk.actions_rad, central[0].actions_rad)
    assert not np.allclose(sampled[0].actions_rad, sampled[1].actions_rad)
    assert not np.allclose(sampled[0].actions_rad, sampled[2].actions_rad)
    with pytest.raises(ConfigError, match="noise scale must be >= 0, got -1"):
        load_policy(tmp_path / "ck", noise_scale=-1.0)
    write_checkpoint(tmp_path / "sac", "sac", {"w": torch.zeros(1)}, {})
    with pytest.raises(ConfigError, match="is a sac policy: a noise scale applies to robotrl's flow-matching"):
        load_policy(tmp_path / "sac", noise_scale=0.0)


def test_inference_rtc_guidance_follows_the_prefix():
    policy = make_policy()
    prefix = np.tile(HOME + 0.05, (6, 1))  # 6 committed rows, 0.05 rad (1 std) away
    free = policy.predict_chunk(obs(delay_ticks=2)).actions_rad
    guided = policy.predict_chunk(obs(delay_ticks=2, prefix_rad=prefix)).actions_rad
    np.testing.assert_array_equal(guided[:2], prefix[:2])  # the first d rows are frozen
    # The guided rows d..H-s are pulled toward the prefix.
    assert np.abs(guided[2:6] - prefix[2:6]).mean() < np.abs(free[2:6] - prefix[2:6]).mean()
    policy.rtc_guidance = False
    unguided = policy.predict_chunk(obs(delay_ticks=2, prefix_rad=prefix)).actions_rad
    np.testing.assert_array_equal(unguided[2:], free[2:])


@pytest.mark.parametrize(
    "change, match",
    [
        ({"state_rad": np.zeros(5)}, "state_rad has shape"),
        ({"state_rad": np.full(6, np.nan)}, "NaN"),
        ({"images": {"front": np.zeros((32, 32, 3), np.uint8)}}, "camera 'wrist'"),
        (
            {"images": {"front": np.zeros((32, 32), np.uint8), "wrist": np.zeros((32, 32, 3), np.uint8)}},
            "image 'front'",
        ),
        ({"images": {"front": np.zeros((32, 32, 3)), "wrist": np.zeros((32, 32, 3), np.uint8)}}, "uint8"),
        ({"prefix_rad": np.zeros((3, 4))}, "prefix_rad"),
        ({"delay_ticks": -1}, "delay_ticks"),
    ],
)
def test_bad_observations_raise_clear_errors(change, match):
    with pytest.raises(ValueError, match=match):
        make_policy().predict_chunk(obs(**change))


def test_env_state_policy_needs_env_state():
    policy = make_policy(use_env_state=True, env_state_dim=3)
    assert policy.metadata.env_state_dim == 3 and make_policy().metadata.env_state_dim == 0
    with pytest.raises(ValueError, match="env_state"):
        policy.predict_chunk(obs())
    with pytest.raises(ValueError, match=r"env_state has shape \(2,\)"):
        policy.predict_chunk(obs(env_state=np.zeros(2)))
    assert policy.predict_chunk(obs(env_state=np.zeros(3))).actions_rad.shape == (H, A)


def test_loading_the_wrong_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_policy(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="config.json"):
        load_policy(tmp_path / "empty")
    write_checkpoint(tmp_path / "sac", "sac_mlp", {"w": torch.zeros(1)}, {})
    with pytest.raises(ConfigError, match="'sac_mlp'"):
        load_policy(tmp_path / "sac")
    with pytest.raises(ConfigError, match="holds a 'sac_mlp' policy, not 'fastslow_flow'"):
        FastSlowPolicy.load(tmp_path / "sac")


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"execute_steps": 20}, "execute_steps"),
        ({"action_mode": "velocity"}, "action_mode"),
        ({"use_env_state": True}, "env_state_dim"),
        ({"horizon": 0}, "horizon"),
        ({"action_mode": "ee_delta"}, "ee_features_arm"),
        ({"action_mode": "ee_absolute"}, "ee_features_arm"),
        ({"past_frame_ticks": -1}, "past_frame_ticks"),
        ({"past_frames": 2}, "past_frames .2. must be >= 1, and > 1 only with past_frame_ticks"),
        ({"past_frame_ticks": 4, "past_frames": 0}, "past_frames"),
    ],
)
def test_config_validation(bad, match):
    with pytest.raises(ConfigError, match=match):
        FastSlowConfig(**bad)
    assert FastSlowConfig.from_dict(FastSlowConfig().to_dict()) == FastSlowConfig()


# --- the instruction gates the fresh features (pick_place regression) ----------------


def _fresh_jacobian(policy: FastSlowPolicy, instruction: str) -> torch.Tensor:
    """d(conditioning) / d(fresh features) at one fixed state and env_state."""
    latent = policy.encode_slow(obs(instruction=instruction))[None]
    fresh = torch.zeros(1, policy.config.fresh_dim)
    age = torch.zeros(1, dtype=torch.long)
    return torch.autograd.functional.jacobian(lambda f: policy.model.expert.condition(latent, age, f), fresh)


def test_instruction_changes_how_env_state_moves_the_expert():
    # pick_place needs "which cube's position matters" to depend on the instruction. When the
    # text (slow latent) and the cube positions (fresh env_state) only met as a sum, the
    # derivative of the conditioning w.r.t. env_state could not depend on the instruction,
    # and trained policies ignored the named cube (0/50 even with --env-state). The text
    # token FiLMs the fresh features, so that derivative now changes with the instruction.
    gated = make_policy(use_env_state=True, env_state_dim=3)
    assert gated.config.text_gates_fresh
    with torch.no_grad():  # zero-initialised like the other FiLM layers; trained weights are not
        gated.model.expert.fresh_film.weight.normal_(0, 0.5)
    j_red, j_blue = _fresh_jacobian(gated, "put red cube"), _fresh_jacobian(gated, "put blue cube")
    assert (j_red - j_blue).abs().max() > 1e-3 * j_red.abs().max()

    additive = make_policy(use_env_state=True, env_state_dim=3, text_gates_fresh=False)
    assert additive.model.expert.fresh_film is None
    j_red, j_blue = _fresh_jacobian(additive, "put red cube"), _fresh_jacobian(additive, "put blue cube")
    torch.testing.assert_close(j_red, j_blue)


def test_checkpoints_from_before_the_text_gate_load_ungated(tmp_path):
    old = make_policy(text_gates_fresh=False)
    data = old.config.to_dict()
    del data["text_gates_fresh"]  # a config.json written before the field existed
    assert FastSlowConfig.from_dict(data).text_gates_fresh is False
    assert FastSlowConfig().text_gates_fresh is True
    old.save(tmp_path / "old")
    loaded = FastSlowPolicy.load(tmp_path / "old")
    assert loaded.model.expert.fresh_film is None
    np.testing.assert_array_equal(loaded.predict_chunk(obs()).actions_rad, old.predict_chunk(obs()).actions_rad)


def test_object_selector_attends_by_instruction_and_shares_the_value_map():
    from robotrl.policies.fastslow.objects import ObjectSelector

    torch.manual_seed(0)
    sel = ObjectSelector(num_objects=3, object_dim=3, text_width=4, hidden=8)
    text = torch.eye(4)[:3] * 20.0  # three "instructions"
    with torch.no_grad():  # instruction i -> slot i: query = text @ W.T, logits = query @ keys.T
        sel.slot_keys.copy_(torch.eye(3, 8))
        sel.query.weight.copy_(torch.eye(8, 4))
        sel.query.bias.zero_()
    w = sel.weights(text)
    assert w.shape == (3, 3) and torch.allclose(w.sum(1), torch.ones(3))
    assert torch.all(w.argmax(1) == torch.arange(3)) and w.diagonal().min() > 0.9
    # The same value MLP for every slot: the output follows the named object's numbers,
    # whichever slot holds them.
    obj = torch.tensor([0.3, -0.2, 0.1])
    env = torch.zeros(3, 9)
    for i in range(3):
        env[i, 3 * i : 3 * i + 3] = obj
    out = sel(text, env)
    torch.testing.assert_close(out, sel.value(obj)[None].expand(3, -1), atol=0.05, rtol=0.05)


def test_env_objects_need_env_state_that_they_divide():
    with pytest.raises(ConfigError, match="env_object_dim"):
        FastSlowConfig(env_object_dim=3)
    with pytest.raises(ConfigError, match="env_object_dim"):
        FastSlowConfig(use_env_state=True, env_state_dim=4, env_object_dim=3)
    policy = make_policy(use_env_state=True, env_state_dim=3, env_object_dim=3)
    chunk = policy.predict_chunk(obs(env_state=np.array([0.2, 0.0, 0.02])))
    assert chunk.actions_rad.shape == (H, A) and np.all(np.isfinite(chunk.actions_rad))
    with pytest.raises(ConfigError, match="relative_objects"):
        FastSlowConfig(use_env_state=True, env_state_dim=3, env_object_dim=3, relative_objects=True)


def test_object_offsets_from_the_gripper_golden():
    # Two slots of 4 numbers (xyz + one more); gripper at (0.1, 0.0, 0.05) m.
    env = torch.tensor([[0.3, 0.1, 0.05, 9.0, 0.1, -0.2, 0.0, 9.0]])
    ee = torch.tensor([[0.1, 0.0, 0.05] + [0.0] * 6])
    expected = torch.tensor([[2.0, 1.0, 0.0, 0.0, -2.0, -0.5]])  # decimetres
    torch.testing.assert_close(object_offsets_dm(env, ee, 4), expected)
