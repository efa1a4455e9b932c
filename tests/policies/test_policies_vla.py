"""lerobot's VLAs (pi0, pi0.5, SmolVLA) served by robotrl, at tiny sizes on the CPU: local
folders load offline, the forwarded state reaches the input each model reads state from,
RTC prefixes go to lerobot's guidance, pi0 and SmolVLA split into a slow prefix and a fast
expert pathway whose chunk is the whole call's, batched as one by one, through a real server.
Tokenizers and SmolVLA's VLM config are built here (`presets.py`)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch

pytest.importorskip("transformers", reason="lerobot's VLAs need lerobot[pi,smolvla]")

from robotrl.core.errors import ConfigError  # noqa: E402
from robotrl.core.policy import BatchedPolicy, PolicyObservation, SlowFastPolicy  # noqa: E402
from robotrl.policies.lerobot_adapter import LerobotChunkPolicy  # noqa: E402
from robotrl.policies.lerobot_adapter.presets import build_vla, tiny_pi_architecture  # noqa: E402
from robotrl.policies.lerobot_adapter.split import LerobotSplitVlaPolicy  # noqa: E402
from robotrl.policies.lerobot_adapter.vla import LerobotVlaPolicy  # noqa: E402
from robotrl.policies.loading import load_policy  # noqa: E402

KINDS = ("pi0", "pi05", "smolvla")
SPLIT = ("pi0", "smolvla")
TOL = 1e-5
"""Radians: the same computation in other shapes (batch, one query instead of L) differs in
float32 rounding only."""


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """kind -> (policy, its pretrained_model folder): tiny, random weights, saved once."""
    made = {}
    for kind in KINDS:
        root = tmp_path_factory.mktemp(kind)
        policy = build_vla(kind, "tiny", root / "assets")
        folder = root / "pretrained_model"
        for part in (policy.policy, policy.preprocessor, policy.postprocessor):
            part.save_pretrained(folder)
        if kind != "smolvla":  # the PaliGemma tokenizer saved with the checkpoint
            for name in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(root / "assets" / name, folder / name)
        made[kind] = (policy, folder)
    return made


def load(folder, kind):
    with tiny_pi_architecture() if kind != "smolvla" else contextlib.nullcontext():
        return load_policy(folder)


def observation(tick=5, state=0.0, instruction="pick up the red cube", prefix=None, seed=0) -> PolicyObservation:
    image = np.random.default_rng(seed).integers(0, 255, (24, 24, 3), dtype=np.uint8)  # resized inside
    return PolicyObservation(
        state_rad=np.full(6, state),
        tick=tick,
        instruction=instruction,
        images={"front": image},
        delay_ticks=2,
        prefix_rad=prefix,
    )


def close(a, b) -> bool:
    return bool(np.abs(a.actions_rad - b.actions_rad).max() <= TOL)


@pytest.mark.parametrize("kind", KINDS)
def test_a_local_folder_loads_offline_and_serves_the_chunks_it_was_saved_with(built, kind, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    policy, folder = built[kind]
    loaded = load(folder, kind)
    assert type(loaded) is (LerobotSplitVlaPolicy if kind in SPLIT else LerobotVlaPolicy)
    assert isinstance(loaded, SlowFastPolicy) == (kind in SPLIT) and isinstance(loaded, BatchedPolicy)
    meta = loaded.metadata
    assert (meta.policy_type, meta.horizon, meta.action_dim, meta.cameras) == (f"lerobot_{kind}", 10, 6, ("front",))
    chunk = loaded.predict_chunk(observation())
    assert chunk.actions_rad.shape == (10, 6) and chunk.start_tick == 7
    assert close(chunk, policy.predict_chunk(observation()))


def test_a_missing_piece_is_one_line_naming_the_file_and_where_it_was_looked_for(built, tmp_path, monkeypatch):
    import huggingface_hub.constants

    hf_cache = tmp_path / "hf_cache"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hf_cache))
    _, pi0 = built["pi0"]
    bare = shutil.copytree(pi0, tmp_path / "pi0", ignore=shutil.ignore_patterns("tokenizer*"))
    with pytest.raises(ConfigError) as err:
        load(bare, "pi0")
    message = str(err.value)
    assert "\n" not in message and "tokenizer_config.json" in message and "google/paligemma-3b-pt-224" in message
    assert str(bare) in message and "HF cache" in message

    # The same tokenizer in the HF cache, where a download would have put it: found there.
    repo = hf_cache / "models--google--paligemma-3b-pt-224"
    (repo / "snapshots" / "0123abcd").mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(pi0 / name, repo / "snapshots" / "0123abcd" / name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    assert load(bare, "pi0").predict_chunk(observation()).actions_rad.shape == (10, 6)

    # Weights of another architecture (lerobot's pi loader only prints a warning): refused.
    doc = json.loads((bare / "config.json").read_text())
    (bare / "config.json").write_text(json.dumps(doc | {"max_action_dim": 12}))
    with pytest.raises(ConfigError, match="holds model.action_in_proj.weight with shape .* another architecture"):
        load(bare, "pi0")
    (bare / "model.safetensors").unlink()
    with pytest.raises(ConfigError, match="no model.safetensors"):
        load(bare, "pi0")
    with pytest.raises(ConfigError, match="load it with robotrl.policies.loading.load_policy"):
        LerobotChunkPolicy.from_pretrained(pi0)  # the ACT / Diffusion class does not take a VLA

    _, smolvla = built["smolvla"]
    hub = shutil.copytree(smolvla, tmp_path / "smolvla")
    config = (hub / "config.json").read_text()
    vlm = json.loads(config)["vlm_model_name"]
    (hub / "config.json").write_text(config.replace(vlm, "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"))
    with pytest.raises(ConfigError) as err:
        load(hub, "smolvla")
    assert "\n" not in str(err.value) and "config.json of its VLM" in str(err.value)


@pytest.mark.parametrize("kind", SPLIT)
def test_the_fast_pathway_on_a_fresh_prefix_is_the_whole_call_and_batches_as_one_by_one(built, kind):
    policy, _ = built[kind]
    assert isinstance(policy, LerobotSplitVlaPolicy)
    robots = [
        observation(tick=5 + i, state=0.1 * i, seed=i, instruction=("touch the ball" if i % 2 else ""))
        for i in range(3)
    ]
    prefixes = [policy.encode_slow(o) for o in robots]
    fast = policy.predict_chunks(robots, prefixes, [0, 0, 0])
    one_by_one = [policy.predict_chunk(o, p, 0) for o, p in zip(robots, prefixes)]
    whole = policy.predict_whole(robots)
    whole_alone = [policy.predict_whole([o])[0] for o in robots]
    for f, single, w, alone in zip(fast, one_by_one, whole, whole_alone):
        assert close(f, single) and close(f, w) and close(f, alone)


CACHE_TOL = 1e-5
"""Keys and values of the prefix cache (order 1 here), batched vs alone: float32 rounding
of the same sums in another batch shape only."""


def robots_of_three() -> list[PolicyObservation]:
    """Three robots: own ticks, states, images, instructions of different lengths (SmolVLA
    pads the batch to the longest)."""
    said = ("pick up the red cube", "touch the ball", "place the blue box on the green cube")
    return [observation(tick=5 + 3 * i, state=0.1 * i, seed=i, instruction=said[i]) for i in range(3)]


@pytest.mark.parametrize("kind", SPLIT)
def test_the_slow_pathway_batches_robots_as_one_by_one(built, kind):
    """One prefill for three robots: each robot's cache holds, on its real tokens, what its
    prefill alone holds (padding is masked), and the chunks from either are the whole call's."""
    policy, _ = built[kind]
    robots = robots_of_three()
    batched = policy.encode_slow_batch(robots)
    alone = [policy.encode_slow(o) for o in robots]
    for b, a in zip(batched, alone):
        assert b.pad_masks.shape[0] == 1 and int(b.pad_masks.sum()) == int(a.pad_masks.sum())
        real_b, real_a = b.pad_masks[0], a.pad_masks[0]
        for (kb, vb, _), (ka, va, _) in zip(b.cache, a.cache):
            assert kb.shape[0] == 1 and (kb[:, :, real_b] - ka[:, :, real_a]).abs().max() <= CACHE_TOL
            assert (vb[:, :, real_b] - va[:, :, real_a]).abs().max() <= CACHE_TOL
    fast_batched = policy.predict_chunks(robots, batched, [0, 0, 0])
    fast_alone = policy.predict_chunks(robots, alone, [0, 0, 0])
    encoded_now = policy.predict_chunks(robots, [None, alone[1], None], [0, 0, 0])
    whole = [policy.predict_whole([o])[0] for o in robots]
    for fb, fa, now, w in zip(fast_batched, fast_alone, encoded_now, whole):
        assert close(fb, fa) and close(fb, now) and close(fb, w)


@pytest.mark.parametrize("kind", SPLIT)
def test_a_latent_cache_encodes_due_robots_together_each_with_its_own_age_and_version(built, kind, monkeypatch):
    from robotrl.core.policy import BatchedSlowPolicy
    from robotrl.inference.latents import LatentCache

    policy, _ = built[kind]
    assert isinstance(policy, BatchedSlowPolicy)
    calls: list[int] = []
    encode = policy.encode_slow_batch
    monkeypatch.setattr(policy, "encode_slow_batch", lambda obs: calls.append(len(obs)) or encode(obs))
    cache, ids, robots = LatentCache(policy), ["a", "b", "c"], robots_of_three()  # ticks 5, 8, 11
    first = cache.latents_for(ids, robots, version=2)
    assert calls == [3] and [age for _, age in first] == [0, 0, 0]
    later = [dataclasses.replace(o, tick=o.tick + 4) for o in robots]
    assert [age for _, age in cache.latents_for(ids, later, version=2)] == [4, 4, 4] and calls == [3]
    # The slow loop re-encodes a and c from newer frames (ticks 7 and 13), b keeps its prefix.
    cache.refresh_many({"a": dataclasses.replace(robots[0], tick=7), "c": dataclasses.replace(robots[2], tick=13)}, 2)
    assert calls == [3, 2]
    assert [age for _, age in cache.latents_for(ids, later, version=2)] == [9 - 7, 12 - 8, 15 - 13]
    # New weights (version 3): every prefix is due again, in one call, stamped with version 3
    # (asked again under version 3, none is re-encoded).
    renewed = cache.latents_for(ids, later, version=3)
    assert calls == [3, 2, 3] and [age for _, age in renewed] == [0, 0, 0]
    assert cache.latents_for(ids, later, version=3) == renewed and calls == [3, 2, 3]
    chunks = policy.predict_chunks(later, [value for value, _ in renewed], [0, 0, 0])
    for chunk, o in zip(chunks, later):
        assert close(chunk, policy.predict_whole([o])[0])
    # A batch that fails (b's frame lacks its camera) is retried robot by robot: a gets its
    # new prefix (tick 10), b keeps its own (tick 12) and its error is reported.
    errors: list[str] = []
    newer = {"a": dataclasses.replace(later[0], tick=10), "b": dataclasses.replace(later[1], tick=13, images={})}
    fresh = cache.refresh_many(newer, 3, on_error=lambda robot_id, exc: errors.append(robot_id))
    assert list(fresh) == ["a"] and errors == ["b"] and calls == [3, 2, 3, 2, 1, 1]
    asked = [dataclasses.replace(o, tick=o.tick + 2) for o in later]  # ticks 11, 14, 17
    assert [age for _, age in cache.latents_for(ids, asked, version=3)] == [11 - 10, 14 - 12, 17 - 15]


@pytest.mark.parametrize("kind", SPLIT)
def test_the_forwarded_state_reaches_the_expert_not_the_cached_prefix(built, kind):
    """pi0 reads the state in the expert's state token, SmolVLA in a state token after the
    prefix: the cached prefix is the same whatever the state, the chunk is not."""
    policy, _ = built[kind]
    prefix = policy.encode_slow(observation(state=0.0))
    other = policy.encode_slow(observation(state=0.4))
    for (k1, v1, _), (k2, v2, _) in zip(prefix.cache, other.cache):
        assert torch.equal(k1, k2) and torch.equal(v1, v2)
    here, forwarded = (policy.predict_chunk(observation(state=s), prefix, 3) for s in (0.0, 0.4))
    assert np.abs(here.actions_rad - forwarded.actions_rad).max() > 1e-3


def test_pi05_reads_the_forwarded_state_in_its_prompt(built):
    policy, _ = built["pi05"]
    tokens = [
        policy.preprocessor(policy._batch([observation(state=s)]))["observation.language.tokens"] for s in (0.0, 0.4)
    ]
    assert not torch.equal(*tokens)  # "State: 127 ..." vs "State: 179 ..."
    here, forwarded = (policy.predict_chunk(observation(state=s)) for s in (0.0, 0.4))
    assert np.abs(here.actions_rad - forwarded.actions_rad).max() > 1e-3


@pytest.mark.parametrize("kind", KINDS)
def test_an_rtc_prefix_guides_the_chunk_toward_the_plan(built, kind):
    policy, _ = built[kind]
    plan = np.full((6, 6), 1.5)
    free = policy.predict_chunk(observation())
    guided = policy.predict_chunk(observation(prefix=plan))
    # weights decay over the P = 6 plan rows (1 -> 0), the tail is free
    assert np.abs(guided.actions_rad[0] - 1.5).max() < 0.5 * np.abs(free.actions_rad[0] - 1.5).max()
    assert not close(guided, free)
    if kind in SPLIT:  # the fast pathway takes the same guidance
        fast = policy.predict_chunk(observation(prefix=plan), policy.encode_slow(observation()), 0)
        assert close(fast, policy.predict_whole([observation(prefix=plan)])[0])
    mixed = policy.predict_chunks([observation(prefix=plan), observation()])  # one forward per prefix length
    assert close(mixed[0], guided) and close(mixed[1], free)


def test_act_refuses_an_rtc_prefix_instead_of_ignoring_it():
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import get_policy_class, make_policy_config, make_pre_post_processors

    from robotrl.policies.lerobot_adapter.presets import unit_stats

    inputs = {"observation.state": PolicyFeature(FeatureType.STATE, (6,))}
    inputs["observation.images.front"] = PolicyFeature(FeatureType.VISUAL, (3, 32, 32))
    small = dict(chunk_size=4, n_action_steps=4, dim_model=16, dim_feedforward=32, n_heads=2, latent_dim=4)
    config = make_policy_config(
        "act",
        input_features=inputs,
        output_features={"action": PolicyFeature(FeatureType.ACTION, (6,))},
        device="cpu",
        pretrained_backbone_weights=None,
        n_encoder_layers=1,
        n_decoder_layers=1,
        **small,
    )
    pre, post = make_pre_post_processors(config, dataset_stats=unit_stats(6, ("front",)))
    policy = LerobotChunkPolicy(get_policy_class("act")(config), pre, post)
    assert policy.predict_chunk(observation()).actions_rad.shape == (4, 6)
    with pytest.raises(ValueError, match="no RTC guidance.*vlash or sync mode"):
        policy.predict_chunk(observation(prefix=np.zeros((3, 6))))


@pytest.mark.parametrize("kind", SPLIT)
def test_served_through_a_real_server_on_loopback_with_per_robot_prefixes(built, kind):
    from robotrl.inference.server import PolicyServer, ServerConfig
    from robotrl.wire.client import ClientSocket
    from robotrl.wire.messages import ChunkReply, ObservationRequest

    policy, _ = built[kind]
    config = ServerConfig(endpoint="tcp://127.0.0.1:*", batch_wait_ms=50, warmup_calls=1, slow_rate_hz=0.1)
    with PolicyServer(policy, config) as server:
        clients = [ClientSocket(server.endpoint, robot_id=f"arm{i}", heartbeat_s=0.5) for i in range(2)]
        try:
            for client in clients:
                client.connect(timeout_s=10)
            for i, client in enumerate(clients):  # both in flight: one batch, one prefix each
                o = observation(tick=20 + i, state=0.2 * i, seed=i)
                client.send(
                    ObservationRequest(
                        robot_id=f"arm{i}",
                        request_id=i,
                        tick=o.tick,
                        state=o.state_rad,
                        in_flight=np.zeros((0, 6)),
                        images=o.images,
                        instruction=o.instruction,
                    )
                )
            replies = [client.recv(timeout_s=30) for client in clients]
        finally:
            for client in clients:
                client.close()
        assert sorted(server.latent_ages()) == [0, 0]  # a fresh prefix per robot
    for i, reply in enumerate(replies):
        assert isinstance(reply, ChunkReply) and reply.start_tick == 20 + i
        o = observation(tick=20 + i, state=0.2 * i, seed=i)
        o.delay_ticks = 0
        expected = policy.predict_whole([o])[0].actions_rad
        np.testing.assert_allclose(reply.actions, expected, atol=1e-4)  # float32 on the wire


def test_a_pi0_made_on_a_gpu_in_lerobots_degrees_is_served_on_the_cpu_in_radians(tmp_path):
    """The units of a lerobot checkpoint come from its training dataset (`units.py`) and its
    device from the serving machine (`device.py`), for VLAs as for ACT."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from robotrl.hardware.lerobot_arm.convention import LEROBOT, JointConvention
    from robotrl.policies.lerobot_adapter.presets import unit_stats

    degrees = JointConvention(LEROBOT, "so101")
    home = np.array([0.0, -1.2, 1.1, 1.3, 0.0, 0.0])
    home_deg, spread_deg = degrees.from_radians(home), np.rad2deg(0.01)
    stats = unit_stats(6, ("front",))
    for key in ("observation.state", "action"):
        t = lambda a: torch.tensor(np.asarray(a), dtype=torch.float32)  # noqa: E731
        low, high = t(home_deg - spread_deg), t(home_deg + spread_deg)
        stats[key] = {"mean": t(home_deg), "std": t(np.full(6, spread_deg)), "min": low, "max": high}
        stats[key] |= {"q01": low, "q99": high}
    policy = build_vla("pi0", "tiny", tmp_path / "assets", stats=stats)
    folder = tmp_path / "pretrained_model"
    for part in (policy.policy, policy.preprocessor, policy.postprocessor):
        part.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tmp_path / "assets" / name, folder / name)
    joint = {"dtype": "float32", "shape": (6,), "names": degrees.names}
    features = {"observation.state": joint, "action": joint}
    LeRobotDataset.create("me/so101_demos", 30, features, root=tmp_path / "data", robot_type="so101_follower")
    (folder / "train_config.json").write_text(json.dumps({"dataset": {"root": str(tmp_path / "data")}}))
    config, pre = (json.loads((folder / name).read_text()) for name in ("config.json", "policy_preprocessor.json"))
    config["device"] = "cuda"  # as lerobot-train writes it on a GPU box
    for step in pre["steps"]:
        if step["registry_name"] == "device_processor":
            step["config"]["device"] = "cuda"
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "policy_preprocessor.json").write_text(json.dumps(pre))
    assert '"device": "cuda"' in (folder / "policy_preprocessor.json").read_text()

    loaded = load(folder, "pi0")
    assert loaded.joints == degrees and loaded.device == torch.device("cpu")
    np.testing.assert_allclose(
        loaded._state(observation(state=0.0))[1], degrees.from_radians(np.zeros(6))[1], atol=1e-4
    )
    chunk = loaded.predict_chunk(PolicyObservation(home, 5, images=observation().images))
    assert np.abs(chunk.actions_rad - home).max() < 0.1  # radians around the data, not degrees
    # The RTC plan (radians) reaches lerobot's guidance in degrees, normalised like its actions.
    plan = np.tile(home + 0.03, (6, 1))
    guided = loaded.predict_chunk(PolicyObservation(home, 5, images=observation().images, prefix_rad=plan))
    assert np.abs(guided.actions_rad[0] - plan[0]).max() < 0.5 * np.abs(chunk.actions_rad[0] - plan[0]).max()


def test_the_full_smolvla_preset_is_lerobots_450m_parameter_smolvla(tmp_path):
    """SmolVLM2-500M's published architecture (`presets.SMOLVLM2_500M`) cut to its first 16
    text layers, plus the 0.75-wide expert: lerobot's SmolVLA, 0.45 B parameters. Built on
    the meta device: shapes only, nothing allocated."""
    from lerobot.policies.factory import get_policy_class

    from robotrl.policies.lerobot_adapter.presets import vla_config, write_smolvlm

    vlm = write_smolvlm(tmp_path / "vlm", "full")
    config = vla_config("smolvla", "full", vlm, cameras=("front",), state_dim=6, device="cpu")
    with torch.device("meta"):
        policy = get_policy_class("smolvla")(config)
    count = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
    model = policy.model.vlm_with_expert
    text, vision = model.vlm.model.text_model, model.vlm.model.vision_model
    assert len(text.layers) == 16 and text.config.rms_norm_eps == 1e-5 and not model.vlm.config.tie_word_embeddings
    assert len(vision.encoder.layers) == 12 and vision.config.image_size == 512 and vision.config.patch_size == 16
    assert abs(count(vision) - 86.4e6) < 0.1e6  # SigLIP-B/16 at 512 px
    assert abs(count(model.lm_expert) - 98.2e6) < 0.1e6  # 16 layers of 720, SwiGLU 2048
    assert abs(count(policy) - 450e6) < 0.005 * 450e6


@pytest.mark.parametrize("kind", ["pi0", "pi05"])
def test_bench_vla_smoke(kind, tmp_path, capsys):
    from robotrl.cli import main

    argv = ["bench", "vla", "--type", kind, "--size", "tiny", "--device", "cpu", "--repeats", "2", "--cameras", "1"]
    assert main([*argv, "--warmup", "1", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "vla" / "results.json").read_text())
    assert [r["robots"] for r in results["rows"]] == [1, 4, 8] and results["split"] == (kind == "pi0")
    assert all(r["whole_chunks_per_s"] > 0 for r in results["rows"]) and results["warmup"] == 1
    if kind == "pi0":
        assert results["fast_p99_ms"] > 0 and results["slow_p50_ms"] > 0 and "split_chunks_per_s" in results["rows"][2]
        assert all(r["slow_prefixes_per_s"] > 0 for r in results["rows"])  # the slow pathway batched too
    assert "target (8 robots split >= 4x 1 robot whole (chunks/s))" in capsys.readouterr().out
    assert main([*argv, "--robots", "1,4", "--out", str(tmp_path)]) == 0
    assert [r["robots"] for r in json.loads((tmp_path / "vla" / "results.json").read_text())["rows"]] == [1, 4]
    assert main([*argv, "--robots", "4,8", "--out", str(tmp_path)]) == 2  # the per-call latencies need 1
