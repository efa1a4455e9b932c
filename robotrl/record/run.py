"""Record many episodes: retries, re-records, progress and the closing summary."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from robotrl.core.errors import UserError
from robotrl.hardware.teleop.base import TeleopDevice
from robotrl.record.disturbance import Disturbance
from robotrl.record.loop import RecordObserver, Session, record_episode
from robotrl.record.writer import DatasetWriter


@dataclass
class RecordSummary:
    episodes_saved: int = 0
    frames: int = 0
    dropped_frames: int = 0
    """Ticks without a stored frame; the loop stores every tick, so this stays 0."""
    overruns: int = 0
    discarded_failures: int = 0
    rerecorded: int = 0
    recorded_s: float = 0.0
    """Measured duration of the saved episodes."""
    loop_wall_s: float = 0.0
    """Wall-clock time of all episodes, resets included."""
    ticks_wall_s: float = 0.0
    """Wall-clock time spent in the ticks of the saved episodes."""
    encode_s: float = 0.0
    """Time spent saving (video flush, parquet, finalize) after the episodes."""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RecordConfig:
    """How many episodes to record, and which to keep."""

    episodes: int = 10
    """Episodes to save."""
    seed: int = 0
    """Seed of the first episode (sim)."""
    max_ticks: int = 600
    """Longest episode, ticks (20 s at 30 Hz)."""
    keep_failed: bool = False
    """Store episodes that did not succeed (a real arm's always are: it has no success)."""
    max_attempts: int | None = None
    """Give up after this many episodes; None: 3 x episodes + 5."""
    reset_ticks: int = 0
    """Ticks between saved episodes for resetting the scene: the teleop keeps driving the
    arm, nothing is stored (lerobot's reset time)."""

    def __post_init__(self) -> None:
        if self.episodes < 1 or self.max_ticks < 1 or self.reset_ticks < 0:
            raise UserError(
                f"need episodes >= 1, max_ticks >= 1 and reset_ticks >= 0, got {self.episodes}, "
                f"{self.max_ticks}, {self.reset_ticks}"
            )


def record_dataset(
    session: Session,
    teleop: TeleopDevice,
    writer: DatasetWriter,
    config: RecordConfig,
    *,
    progress=None,
    disturbance: Disturbance | None = None,
    observer: RecordObserver | None = None,
) -> RecordSummary:
    """Record until `config.episodes` are saved (or a stop event). Failed episodes are
    discarded unless `config.keep_failed`; a re-record event repeats the same seed.
    `observer` is told every episode's start, ticks (resets included) and end (a
    re-recorded one starts again instead)."""
    summary = RecordSummary()
    episodes, seed, max_ticks, keep_failed = config.episodes, config.seed, config.max_ticks, config.keep_failed
    max_attempts = config.max_attempts or 3 * episodes + 5
    attempts = 0
    while summary.episodes_saved < episodes:
        attempts += 1
        if attempts > max_attempts:
            raise UserError(
                f"gave up after {max_attempts} attempts: only {summary.episodes_saved} "
                f"of {episodes} episodes succeeded (use --keep-failed to store failures)"
            )
        outcome = record_episode(session, teleop, writer, seed, max_ticks, disturbance, observer)
        summary.overruns += outcome.overruns
        summary.loop_wall_s += outcome.wall_s
        if outcome.rerecord:
            summary.rerecorded += 1
            continue
        seed += 1
        saved = outcome.frames > 0 and (outcome.success or keep_failed)
        if not saved:
            writer.discard_episode()
            summary.discarded_failures += outcome.frames > 0
        else:
            summary.encode_s += writer.save_episode()
            summary.episodes_saved += 1
            summary.frames += outcome.frames
            summary.recorded_s += outcome.duration_s
            summary.ticks_wall_s += outcome.ticks_wall_s
            if progress is not None:
                progress.update(1)
        if observer is not None:
            observer.on_episode_end(saved)
        more = saved and not outcome.stop and summary.episodes_saved < episodes
        if more and reset_period(session, teleop, config, observer):
            break
        if outcome.stop:
            break
    return summary


def reset_period(
    session: Session, teleop: TeleopDevice, config: RecordConfig, observer: RecordObserver | None = None
) -> bool:
    """`config.reset_ticks` ticks of teleop without recording, for a person to reset the
    scene (each told to `observer`); an episode-ending event ends it early. True on a stop
    event."""
    if config.reset_ticks == 0:
        return False
    obs = session.reset(config.seed)
    teleop.reset(obs.state)
    for _ in range(config.reset_ticks):
        cmd = teleop.read(obs.state)
        if cmd.events.ends_episode:
            return cmd.events.stop
        obs = session.step(cmd.target_rad).obs
        if observer is not None:
            observer.on_tick()
    return False
