"""Configs travel as data: frozen dataclasses to JSON files and back, and command-line
flags take their defaults from the configs."""

from __future__ import annotations

import pytest

from robotrl.core.config import field_default, load_config, save_config
from robotrl.core.errors import ConfigError
from robotrl.learn.learner import LearnerConfig


def test_learn_hands_its_actors_a_config_file_that_round_trips(tmp_path):
    from dataclasses import replace

    from robotrl.core.config import load_config, save_config
    from robotrl.core.errors import ConfigError
    from robotrl.inference.arm import ArmConfig
    from robotrl.inference.executor import ExecutorConfig
    from robotrl.learn.actor import ActorJob, InterventionConfig

    job = ActorJob(
        ArmConfig(task="pick_place", robot_id="actor1"),
        "tcp://127.0.0.1:5555",
        "tcp://127.0.0.1:5560",
        ExecutorConfig("vlash", lag_deadband_rad=0.03),
        InterventionConfig("scripted", budget_ticks=40),
        episodes=10,
        seed=100_000,
        stepped_delay=2,
        log=tmp_path / "actor1.csv",
    )
    back = load_config(ActorJob, save_config(job, tmp_path / "actor1.json"))
    assert back == job and back.executor.lag_deadband_rad == 0.03 and back.log == tmp_path / "actor1.csv"
    assert (
        load_config(ActorJob, save_config(replace(job, stepped_delay=None), tmp_path / "b.json")).stepped_delay is None
    )
    (tmp_path / "bad.json").write_text('{"arm": {"robot": "sim"}, "server": "tcp://a:1", "warp": 9}')
    with pytest.raises(ConfigError, match="unknown field"):
        load_config(ActorJob, tmp_path / "bad.json")


def test_a_learner_job_round_trips_with_its_spec_and_paths(tmp_path):
    from robotrl.buffer.spec import TransitionSpec
    from robotrl.learn.job import LearnerJob

    job = LearnerJob(
        "hil-flow",
        tmp_path / "buffer",
        LearnerConfig(out=tmp_path / "learner", min_transitions=1000),
        overrides={"batch_size": 128},
        demo_datasets=(tmp_path / "demos",),
        spec=TransitionSpec(6, 6, {"front": (64, 64)}, 9),
    )
    back = load_config(LearnerJob, save_config(job, tmp_path / "learner.json"))
    assert back == job and back.spec.cameras == {"front": (64, 64)} and back.demo_datasets == (tmp_path / "demos",)


def test_a_missing_or_malformed_config_file_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(LearnerConfig, tmp_path / "missing.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        load_config(LearnerConfig, tmp_path / "list.json")
    (tmp_path / "bad.json").write_text('{"out": "x", "publish_every": 0}')
    with pytest.raises(ConfigError, match="publish_every must be >= 1"):
        load_config(LearnerConfig, tmp_path / "bad.json")


def test_flags_take_their_defaults_from_the_configs():
    import argparse

    from robotrl.commands import learner

    parser = argparse.ArgumentParser()
    learner.add_arguments(parser)
    args = parser.parse_args([])
    assert args.min_transitions == field_default(LearnerConfig, "min_transitions") == 500
    assert args.publish_every == LearnerConfig(out="x").publish_every  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="no default"):
        field_default(LearnerConfig, "out")
