"""End to end: `robotrl learn` with two simulated actors, the inference server
and the learner as real processes on loopback; killed with SIGKILL mid-run and resumed."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import torch

from robotrl.learn.checkpoint import load_checkpoint
from robotrl.learn.metrics import read_csv
from robotrl.policies.fastslow.config import FastSlowConfig
from robotrl.policies.fastslow.model import FastSlowModel
from robotrl.policies.fastslow.normalize import Normalizer
from robotrl.policies.fastslow.policy import FastSlowPolicy
from robotrl.policies.fastslow.vocab import Vocabulary


def tiny_reach_policy(path, **config) -> None:
    """An untrained fast/slow policy for the reach task (16 px cameras, env_state 3;
    `config`: more `FastSlowConfig` fields)."""
    cfg = FastSlowConfig(
        width=16,
        cnn_channels=(8, 8),
        expert_hidden=32,
        expert_blocks=1,
        horizon=8,
        execute_steps=4,
        image_size_px=16,
        flow_steps=2,
        cameras=("front", "wrist"),
        use_env_state=True,
        env_state_dim=3,
        **config,
    )
    torch.manual_seed(0)
    norm = Normalizer(
        "delta", np.zeros(6), np.full(6, 0.3), np.zeros((8, 6)), np.full((8, 6), 0.02), np.zeros(3), np.full(3, 0.1)
    )
    vocab = Vocabulary(["<pad>", "<unk>", "reach"])
    FastSlowPolicy(FastSlowModel(cfg, vocab_size=len(vocab)), norm, vocab).save(path)


def _segments(buffer) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((buffer / "segments").glob("*.seg"))}


def _deploy(out, policy, episodes: int, resume: bool, actors: int = 2, background: bool = False) -> subprocess.Popen:
    """`robotrl learn` on the reach task; `background`: with SIGINT ignored, as a shell's
    background job (`cmd &`, nohup, cron) runs it."""
    cmd = [
        sys.executable,
        "-m",
        "robotrl.cli",
        "learn",
        "--robot",
        "sim",
        "--task",
        "reach",
        "--policy",
        str(policy),
        "--out",
        str(out),
        "--actors",
        str(actors),
        "--episodes",
        str(episodes),
        "--stepped-delay",
        "2",
        "--max-seconds",
        "3",
        "--preset",
        "small",
        "--budget-ticks",
        "40",
        "--taper-episodes",
        "4",
        "--min-transitions",
        "60",
        "--publish-every",
        "2",
        "--checkpoint-every",
        "4",
        "--no-fsync",
        "--device",
        "cpu",
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.Popen(
        cmd + (["--resume"] if resume else []),
        start_new_session=True,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if background else None,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_two_actors_server_learner_killed_and_resumed(tmp_path):
    policy, out = tmp_path / "policy", tmp_path / "run"
    tiny_reach_policy(policy)

    proc = _deploy(out, policy, episodes=50, resume=False)
    deadline = time.monotonic() + 240
    logged = out / "learner" / "episodes.csv"  # the learner writes a row once the episode is committed
    while time.monotonic() < deadline and proc.poll() is None:  # 2 episodes of each actor committed, a checkpoint
        robots = [r["robot_id"] for r in read_csv(logged)] if logged.exists() else []
        checkpoint = (out / "learner" / "checkpoint" / "meta.json").exists()
        if checkpoint and min(robots.count(f"sim-actor{k}") for k in (0, 1)) >= 2:
            break
        time.sleep(0.5)
    assert proc.poll() is None, proc.stdout.read()
    os.killpg(proc.pid, signal.SIGKILL)  # learner, server and both actors at once
    proc.wait()
    proc.stdout.close()
    _, meta_before = load_checkpoint(out / "learner" / "checkpoint")
    committed = _segments(out / "buffer")
    assert len(committed) >= 4  # episodes of both actors reached the log

    resumed = _deploy(out, policy, episodes=2, resume=True)
    text, _ = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, text

    after = _segments(out / "buffer")
    assert {k: after[k] for k in committed} == committed  # nothing committed was lost or changed
    assert len(after) >= len(committed) + 4  # 2 actors x 2 more episodes
    _, meta = load_checkpoint(out / "learner" / "checkpoint")
    assert meta["updates"] > meta_before["updates"] and meta["version"] > meta_before["version"]
    episodes = read_csv(out / "learner" / "episodes.csv")
    assert {r["robot_id"] for r in episodes} == {"sim-actor0", "sim-actor1"}
    actors = read_csv(out / "actors.csv")
    assert len(actors) == 4 and all(int(r["version_max"]) >= 0 for r in actors)
    assert "success" in text and "intervention rate" in text
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the launcher hands its device to both children in their JSON configs; each says where it runs
    for child, role in (("learner", "learner"), ("server", "inference_server")):
        assert json.loads((out / f"{child}.json").read_text())["device"] == "cpu"
        assert f"device for the {role}: cpu (asked for)" in (out / f"{child}.log").read_text()


def test_online_learning_trains_a_pixel_policy_that_reads_past_frames_and_estimates_the_scene(tmp_path):
    """A policy reading each camera's frames 2 and 4 ticks back and estimating the scene
    from them (`estimate_env_state`): the arm sends the frames and no simulator state, as a
    real arm does, the learner takes every batch and trains on the same frames drawn from
    its buffer, and the server's new weights reach the arm."""
    policy, out = tmp_path / "policy", tmp_path / "run"
    tiny_reach_policy(policy, past_frame_ticks=2, past_frames=2, estimate_env_state=True)
    proc = _deploy(out, policy, episodes=4, resume=False, actors=1)
    text, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, text
    assert json.loads((out / "learner" / "spec.json").read_text())["env_state_dim"] == 0
    updates = read_csv(out / "learner" / "updates.csv")
    assert int(updates[-1]["updates"]) >= 20 and float(updates[-1]["accepted_frac"]) > 0
    assert int(updates[-1]["rejected"]) == 0 and int(updates[-1]["episodes"]) == 4
    assert max(int(r["version_max"]) for r in read_csv(out / "actors.csv")) > 0  # the arm ran trained weights


def test_a_learner_that_dies_stops_the_run_with_one_line(tmp_path):
    """SIGKILL to the learner mid-run: the arms stop, the server is stopped, and the
    launcher exits 2 with one line naming the learner and its log; also when it runs as a
    background job, where SIGINT is ignored (the arms used to run all 50 episodes there)."""
    policy, out = tmp_path / "policy", tmp_path / "run"
    tiny_reach_policy(policy)
    proc = _deploy(out, policy, episodes=50, resume=False, actors=1, background=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / "actor0.csv").exists():
        time.sleep(0.3)
    found = subprocess.run(["pgrep", "-g", str(proc.pid), "-f", "robotrl.cli learner"], capture_output=True, text=True)
    os.kill(int(found.stdout.split()[0]), signal.SIGKILL)
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, text
    errors = [line for line in text.splitlines() if "error" in line]
    assert len(errors) == 1 and "the learner was killed by signal 9 during the run" in errors[0], text
    assert str(out / "learner.log") in errors[0]
    assert len(read_csv(out / "actor0.csv")) < 50  # the arm did not run its episodes without a learner
    time.sleep(0.5)
    assert subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split() == []


def test_sigterm_to_the_launcher_stops_learner_server_and_actors(tmp_path):
    policy, out = tmp_path / "policy", tmp_path / "run"
    tiny_reach_policy(policy)
    proc = _deploy(out, policy, episodes=50, resume=False)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / "actor1.csv").exists():
        time.sleep(0.3)
    children = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert len(children) >= 4  # launcher + learner + server + actor 1
    proc.send_signal(signal.SIGTERM)  # to the launcher only
    proc.communicate(timeout=90)
    time.sleep(1.0)
    left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert left == []  # nothing orphaned
    assert (out / "learner" / "checkpoint" / "meta.json").is_file()  # the learner stopped with a checkpoint


def test_demonstrations_are_labelled_with_the_column_the_policy_was_trained_on(tmp_path):
    """A policy trained on a DART recording's clean labels (`train --action-key
    teleop.action`) fine-tunes on the same labels, not on the perturbed command the arm
    executed, also from the checkpoint a learner served of it, and from a checkpoint saved
    before the config carried the column (its train_config says); none: "action"."""
    from robotrl.buffer.spec import TransitionSpec
    from robotrl.learn.job import trained_action_key
    from robotrl.learn.registry import make_algorithm

    tiny_reach_policy(tmp_path / "reach")
    assert trained_action_key(tmp_path / "reach") == "action" and trained_action_key(None) == "action"
    tiny_reach_policy(tmp_path / "dart", action_key="teleop.action")
    assert trained_action_key(tmp_path / "dart") == "teleop.action"
    for algo in ("hil-flow", "dsrl"):
        spec = TransitionSpec(6, 6, {"front": (16, 16), "wrist": (16, 16)}, 3)
        make_algorithm(algo, spec, policy_path=tmp_path / "dart", preset="small").served_policy().save(tmp_path / algo)
        flow = tmp_path / algo / "flow" if algo == "dsrl" else tmp_path / algo
        assert trained_action_key(flow) == "teleop.action"
    old = json.loads((tmp_path / "reach" / "config.json").read_text())  # a trainer's, saved before the field
    del old["config"]["action_key"]
    old["training"] = {"step": 5, "train_config": {"action_key": "teleop.action", "k_max": 8}}
    (tmp_path / "reach" / "config.json").write_text(json.dumps(old))
    assert trained_action_key(tmp_path / "reach") == "teleop.action"
    FastSlowPolicy.load(tmp_path / "reach").save(tmp_path / "reserved")  # as a learner serves it
    assert trained_action_key(tmp_path / "reserved") == "teleop.action"
