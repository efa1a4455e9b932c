"""How `robotrl up` starts each role (`supervisor.Launch`): the argv of start number K,
its config file written first. A server or learner gets its frozen job as a JSON file;
an arm's role runs the episodes its earlier starts left; a twin and a recorder, which have
no config file, get their few options as flags."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from robotrl.bringup.probes import csv_rows
from robotrl.core.config import save_config
from robotrl.fsutil import read_json
from robotrl.learn.actor import ActorJob
from robotrl.learn.launch import actor_command, learner_command, record_command, serve_command, twin_command
from robotrl.record.commit import saved_episodes

if TYPE_CHECKING:
    from robotrl.inference.server import ServeJob
    from robotrl.learn.job import LearnerJob


@dataclass(frozen=True)
class ServerLaunch:
    """`robotrl serve --config` of the same `ServeJob` on every start."""

    job: ServeJob
    file: Path

    def command(self, start: int) -> list[str]:
        return serve_command(save_config(self.job, self.file))


@dataclass(frozen=True)
class LearnerLaunch:
    """`robotrl learner --config`; every restart resumes the run (checkpoint + buffer log).
    The served checkpoint is removed first, so the role is up only once this start wrote it."""

    job: LearnerJob
    file: Path

    def command(self, start: int) -> list[str]:
        from robotrl.learn.job import SERVED

        job = self.job if start == 0 else replace(self.job, resume=True)
        (Path(job.loop.out) / SERVED / "config.json").unlink(missing_ok=True)
        return learner_command(save_config(job, self.file))


@dataclass(frozen=True)
class ArmLaunch:
    """`robotrl actor --config` of one arm: start K runs the episodes not yet ended in
    the earlier starts' logs, from the seed after them, logging to `episodes.K.csv`."""

    job: ActorJob
    folder: Path

    def logs(self) -> list[Path]:
        """The episode logs of every start so far, in start order."""
        found = self.folder.glob("episodes.*.csv")
        return sorted(found, key=lambda p: int(p.suffixes[0][1:]) if p.suffixes[0][1:].isdigit() else -1)

    def command(self, start: int) -> list[str] | None:
        ended = sum(len(csv_rows(path)) for path in self.logs())
        if ended >= self.job.episodes:
            return None
        job = replace(
            self.job,
            episodes=self.job.episodes - ended,
            seed=self.job.seed + ended,
            log=self.folder / f"episodes.{start}.csv",
        )
        if job.beacon is not None:
            job.beacon.unlink(missing_ok=True)  # the role is up once this start writes it
        return actor_command(save_config(job, self.folder / "actor.json"))


@dataclass(frozen=True)
class TwinLaunch:
    """`robotrl twin` of scene `task` from `seed`, follower id `robot_id` (its arm asks for a
    new scene at each episode's reset period: `inference.arm`), calibration in FOLDER/calibration,
    its buses and heartbeat in FOLDER/twin.json (`--info`, removed before each start so the
    role is up only once this start wrote it). A restarted twin has new buses: the arm,
    whose bus went with the old one, is restarted too and reads them from the file."""

    INFO = "twin.json"
    task: str
    seed: int
    robot_id: str
    folder: Path

    @property
    def info(self) -> Path:
        return self.folder / self.INFO

    def command(self, start: int) -> list[str]:
        self.info.unlink(missing_ok=True)
        options = {
            "--task": self.task,
            "--seed": str(self.seed),
            "--robot-id": self.robot_id,
            "--calibration-dir": str(self.folder / "calibration"),
            "--info": str(self.info),
        }
        return twin_command(*(part for pair in options.items() for part in pair))


@dataclass(frozen=True)
class RecordLaunch:
    """`robotrl record --fleet FILE --fleet-robot NAME` of one robot's recorder with its
    `options` (the recorder has no JSON-config entry point: its options are its flags, so
    this builds its argv). Start K records the episodes `dataset` lacks of `episodes`
    (`saved_episodes`; `--resume` once the folder exists) from the seed after the last one
    its beacon says it tried (none: `seed` + the episodes saved), the beacon removed first
    so the role is up only once this start wrote it; None once the dataset holds them all."""

    BEACON = "record.beacon.json"
    options: tuple[str, ...]
    dataset: Path
    episodes: int
    seed: int
    beacon: Path

    def command(self, start: int) -> list[str] | None:
        saved = saved_episodes(self.dataset)
        if saved >= self.episodes:
            return None
        tried = (read_json(self.beacon) or {}).get("seed")
        seed = tried + 1 if isinstance(tried, int) else self.seed + saved
        self.beacon.unlink(missing_ok=True)
        resume = ("--resume",) if self.dataset.exists() else ()
        return record_command(*self.options, "--episodes", str(self.episodes - saved), "--seed", str(seed), *resume)
