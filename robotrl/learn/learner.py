"""The learner process: pull transitions, update an algorithm, publish weights, checkpoint.

Loop (one thread): take the batches of the transitions inbox (`wire.transitions`: its own
thread answers the robots' hellos and heartbeats and refuses undecodable batches and
batches from a connection that does not own their robot id); every batch goes through
`OnlineBuffer.add`, which checks it against the `TransitionSpec`; a refused or
mismatching batch is logged with the robot id and counted in `rejected`, never fatal;
once the buffer holds `min_transitions` committed transitions, run `algorithm.update`;
every `publish_every` updates bump the weight version and publish the served policy's
weights; every `checkpoint_every` updates write a crash-safe checkpoint (algorithm state
with networks and optimizers, numpy/torch RNG, counters, buffer cursor). `stop()` (from a
signal handler) or `max_updates` ends the loop with a final checkpoint. On a GPU (or with
`prefetch`) the algorithm samples through `robotrl.learn.prefetch.Prefetcher`: the next
batch is drawn, and its images copied to the GPU, while an update runs; the batches and
RNG states are exactly those without it. `loop_clock` times the loop (`bench learner`).

Output folder `out`: `checkpoint/` (see `robotrl.learn.checkpoint`), `updates.csv`,
`episodes.csv`, `curves.png`, `losses.png` (see `robotrl.learn.metrics`), and
`health.json` (`robotrl.core.health.LearnerHealth`: updates/s, buffer, staleness, GPU),
rewritten about every `HEALTH_EVERY_S` for a supervisor (`robotrl up`).

Resume: the buffer is rebuilt from its own log (every committed episode, also those after
the checkpoint); the learner reloads the checkpoint and continues. Weight versions
published after the last checkpoint are unknown after a kill -9, so the resumed learner
starts `publish_every`-periods past them (`resume_version`): versions stay increasing for
the servers and no buffered row is newer than the learner.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robotrl.buffer.sampler import ChunkSample, TransitionSample
from robotrl.buffer.spec import SpecMismatch
from robotrl.core.errors import ConfigError
from robotrl.core.health import LEARNER_HEALTH_FILE, LearnerHealth, rate_per_s
from robotrl.core.learning import Buffer, Sampler, WeightPublisher
from robotrl.fsutil import replace_json
from robotrl.learn.algorithm import Algorithm
from robotrl.learn.checkpoint import checkpoint_exists, load_checkpoint, save_checkpoint
from robotrl.learn.metrics import CsvLog, LoopClock, plot_learning_curves, plot_update_curves, staleness_histogram
from robotrl.learn.prefetch import learner_prefetcher
from robotrl.wire.keys import ServerKeys
from robotrl.wire.messages import TransitionBatch
from robotrl.wire.transitions import TransitionInbox

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoint"
LOG_FILES = ("updates.csv", "episodes.csv")
HEALTH_EVERY_S = 1.0
"""Shortest time between two writes of `health.json`, seconds."""


@dataclass(frozen=True)
class LearnerConfig:
    """How the learner loop runs (the algorithm's own settings live in its preset)."""

    out: Path
    """Run folder: checkpoint/, updates.csv, episodes.csv, curves.png."""
    transitions_endpoint: str = "tcp://*:5560"
    """PULL socket the executors' transition streamers connect to."""
    min_transitions: int = 500
    """Samplable transitions in the buffer (committed online + demo) before the first update."""
    publish_every: int = 20
    """Updates between weight publications (each bumps the version by one)."""
    checkpoint_every: int = 200
    """Updates between checkpoints."""
    log_every: int = 20
    """Updates between rows of updates.csv."""
    max_updates: int | None = None
    """Stop (with a checkpoint) after this many updates in total; None: until stopped."""
    max_wall_s: float | None = None
    """Stop (with a checkpoint) after this many seconds of this session; None: until stopped."""
    seed: int = 0
    """Seed of the sampling RNG (numpy) and torch."""
    poll_ms: int = 50
    """Longest wait for transitions while there is nothing to update."""
    max_batches_per_update: int = 64
    """Transition batches taken between two updates (the rest wait in the socket)."""
    plot_every_episodes: int = 20
    """Committed episodes between redraws of curves.png (0: only at the end)."""
    prefetch: bool | None = None
    """Draw the next batch in a background thread while an update runs (on a GPU, its images
    pinned and copied there on a side stream); the same batches in the same order either
    way. None: on a GPU only (on the CPU it gained nothing measurable, docs/benchmarks.md)."""

    def __post_init__(self) -> None:
        for name in ("publish_every", "checkpoint_every", "log_every", "poll_ms", "max_batches_per_update"):
            if getattr(self, name) < 1:
                raise ValueError(f"LearnerConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.min_transitions < 1:
            raise ValueError(f"LearnerConfig.min_transitions must be >= 1, got {self.min_transitions}")
        for name in ("max_updates", "max_wall_s"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ValueError(f"LearnerConfig.{name} must be >= 0 or None, got {getattr(self, name)}")

    def to_dict(self) -> dict:
        return {**asdict(self), "out": str(self.out)}


def run_exists(out: Path | str) -> bool:
    """True if `out` holds a learner run (a checkpoint or its logs) that `--resume` continues."""
    out = Path(out)
    return checkpoint_exists(out / CHECKPOINT_DIR) or any((out / f).is_file() for f in LOG_FILES)


def resume_version(saved_version: int, checkpoint_every: int, publish_every: int) -> int:
    """First weight version after a resume: above every version the crashed learner can
    have published after its checkpoint at `saved_version` (at most
    ceil(checkpoint_every / publish_every) more). Example: saved 4, every 200 / 20 -> 15."""
    return saved_version + math.ceil(checkpoint_every / publish_every) + 1


class Learner:
    """Runs `algorithm` on `buffer` (an OnlineBuffer), publishing through `publisher` (a
    WeightPublisher or anything with `publish(version, bytes)`).

    Args:
        resume: reload `out/checkpoint` (algorithm, RNG, counters); without one (killed before
            the first checkpoint) the algorithm starts fresh on the recovered buffer.
        meta: extra JSON-able facts saved in every checkpoint (spec, algorithm preset, ...).
        device: where the algorithm computes ("cpu", "cuda:N"), for the GPU's health.

    Attributes (counters, restored on resume): updates, version, received_batches,
    rejected (batches refused: spec mismatch or not decodable), episodes (committed online
    episodes logged), wall_s (run time over all sessions).
    """

    def __init__(
        self,
        algorithm: Algorithm,
        buffer: Buffer,
        publisher: WeightPublisher,
        cfg: LearnerConfig,
        *,
        resume: bool = False,
        meta: dict | None = None,
        curve: ServerKeys | None = None,
        device: str = "cpu",
    ) -> None:
        self.algorithm, self.buffer, self.publisher, self.cfg = algorithm, buffer, publisher, cfg
        self.device = device
        self.meta = dict(meta or {})
        self.out = Path(cfg.out)
        self.checkpoint_path = self.out / CHECKPOINT_DIR
        if not resume and run_exists(self.out):
            raise FileExistsError(
                f"{self.out} holds a learner run: pass --resume to continue it or choose another --out"
            )
        self.out.mkdir(parents=True, exist_ok=True)
        self.rng = np.random.default_rng(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.updates = self.version = self.received_batches = self.rejected = 0
        self.updates_log, self.episodes_log = (CsvLog(self.out / name) for name in LOG_FILES)
        self.episodes = self.episodes_log.rows_written
        self._wall_offset_s = 0.0
        if resume:
            self._restore()
        self._prefetcher = learner_prefetcher(buffer, torch.device(device), cfg.prefetch)
        self._recorder = SampleRecorder(self._prefetcher or buffer)
        self.loop_clock = LoopClock()
        """This session's loop rate (`bench learner`)."""
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._health_from = (self._started, self.updates)  # (monotonic s, updates) of the last health write
        self._last_terms: dict[str, float] = {}
        self._rejected_by_robot: dict[str, int] = {}
        self._idle_reason = ""
        self._inbox = TransitionInbox(cfg.transitions_endpoint, curve=curve)
        self._wire_refused_seen = 0
        self.transitions_endpoint = self._inbox.endpoint

    @property
    def wall_s(self) -> float:
        return self._wall_offset_s + time.monotonic() - self._started

    def stop(self) -> None:
        """Ask the loop to end (safe from a signal handler or another thread)."""
        self._stop.set()

    def run(self) -> None:
        """Loop until `stop()`, `max_updates` or `max_wall_s`, then write a checkpoint and
        the plot. An exception from the algorithm propagates without a checkpoint (the
        last periodic one stays): its state may be half updated."""
        cfg = self.cfg
        self.publisher.publish(self.version, self.algorithm.policy_weights())
        log.info(
            "learner %s: transitions on %s, weights version %d published, %d updates so far",
            self.algorithm.name,
            self.transitions_endpoint,
            self.version,
            self.updates,
        )
        last_log, last_log_updates, waited_logged = time.monotonic(), self.updates, 0.0
        try:
            while not self._stop.is_set() and not self._budget_spent():
                self.write_health()
                ready = len(self.buffer) >= cfg.min_transitions
                self.receive(0 if ready else cfg.poll_ms)
                terms = self._update() if ready else None
                if terms is None:
                    waited_logged = self._log_waiting(ready, waited_logged)
                    continue
                if self.updates % cfg.publish_every == 0:
                    self.version += 1
                    self.publisher.publish(self.version, self.algorithm.policy_weights())
                if self.updates % cfg.log_every == 0:
                    now = time.monotonic()
                    self._log_updates(terms, (self.updates - last_log_updates) / max(now - last_log, 1e-9))
                    last_log, last_log_updates = now, self.updates
                if self.updates % cfg.checkpoint_every == 0:
                    self.save()
        except KeyboardInterrupt:  # no signal handler installed: still stop cleanly
            log.info("interrupted")
        # not after other exceptions: the algorithm's state may be half updated
        self.save()
        self.write_health(force=True)
        self._plot()

    def _log_waiting(self, ready: bool, logged_s: float) -> float:
        """Say why no update ran, at most every 10 s; the time of the last such line."""
        if time.monotonic() - logged_s <= 10:
            return logged_s
        log.info(
            "waiting for transitions: %d samplable of %d needed, %d batches rejected%s",
            len(self.buffer),
            self.cfg.min_transitions,
            self.rejected,
            f" ({self._idle_reason})" if ready else "",
        )
        return time.monotonic()

    def _budget_spent(self) -> bool:
        cfg = self.cfg
        return (cfg.max_updates is not None and self.updates >= cfg.max_updates) or (
            cfg.max_wall_s is not None and time.monotonic() - self._started >= cfg.max_wall_s
        )

    def _update(self) -> dict[str, float] | None:
        """One algorithm update; None (after waiting `poll_ms` for data) when the buffer has
        nothing samplable, e.g. every online row is past the staleness cap, or when the
        algorithm rejected every row it drew (metric "skipped": the weights did not change,
        so nothing is counted or published)."""
        start = time.monotonic()
        try:
            terms = self.algorithm.update(self._recorder, self.version, self.rng)
        except ValueError as exc:
            terms, self._idle_reason = None, f"no update possible: {exc}"
        if terms is not None and terms.get("skipped"):
            terms, self._idle_reason = None, f"{self.algorithm.name} rejected every row it drew: nothing to learn from"
        if terms is None:
            self.receive(self.cfg.poll_ms)
            return None
        self.updates += 1
        self._last_terms = terms
        self.loop_clock.add(start, time.monotonic())
        return terms

    @property
    def prefetch_counts(self) -> dict[str, int] | None:
        """{"hits": batches drawn ahead and taken, "misses": drawn in the loop's thread};
        None without prefetching."""
        p = self._prefetcher
        return None if p is None else {"hits": p.hits, "misses": p.misses}

    def write_health(self, *, force: bool = False) -> None:
        """Rewrite `health.json` (`LearnerHealth`) when `HEALTH_EVERY_S` passed since the
        last write, or now with `force`. A failed write is logged, never fatal."""
        from robotrl.policies.device import gpu_health

        now = time.monotonic()
        then, updates_then = self._health_from
        if not force and now - then < HEALTH_EVERY_S:
            return
        staleness = self._last_terms.get("staleness_mean")
        health: LearnerHealth = {
            "monotonic_s": now,
            "updates": self.updates,
            "updates_per_s": round(rate_per_s(updates_then, self.updates, now - then), 3),
            "version": self.version,
            "buffer_transitions": int(self.buffer.committed_transitions),
            "buffer_samplable": len(self.buffer),
            "staleness_mean": None if staleness is None else round(float(staleness), 3),
            "gpu": gpu_health(self.device),
        }
        self._health_from = (now, self.updates)
        try:
            replace_json(self.out / LEARNER_HEALTH_FILE, health)
        except OSError:
            log.exception("could not write %s", self.out / LEARNER_HEALTH_FILE)

    def receive(self, timeout_ms: int) -> int:
        """Take up to `max_batches_per_update` waiting transition batches (waiting at most
        `timeout_ms` for the first); returns how many were added to the buffer."""
        batches = self._inbox.take(timeout_ms / 1000, self.cfg.max_batches_per_update)
        refused = sum(self._inbox.refused.values())  # undecodable, wrong robot id, ...
        self.received_batches += len(batches) + refused - self._wire_refused_seen
        self.rejected += refused - self._wire_refused_seen
        self._wire_refused_seen = refused
        return sum(self._add(batch) for batch in batches)

    @property
    def refused_on_the_wire(self) -> dict[str, int]:
        """Kind -> messages the transitions socket refused before the buffer saw them
        (undecodable, wrong robot id, other protocol version, learner too far behind)."""
        return dict(self._inbox.refused)

    def save(self) -> Path:
        """Write the checkpoint now (algorithm, RNG, counters, buffer cursor)."""
        state = {
            "algorithm": self.algorithm.state_dict(),
            "rng": {"numpy": self.rng.bit_generator.state, "torch": torch.get_rng_state()},
        }
        meta = {
            **self.meta,
            "algorithm": self.algorithm.name,
            "updates": self.updates,
            "version": self.version,
            "received_batches": self.received_batches,
            "rejected": self.rejected,
            "episodes": self.episodes,
            "wall_s": self.wall_s,
            "buffer_cursor": {
                "committed_transitions": int(self.buffer.committed_transitions),
                "committed_episodes": int(self.buffer.committed_episodes),
            },
            "learner": self.cfg.to_dict(),
            "saved_unix_s": time.time(),
        }
        return save_checkpoint(self.checkpoint_path, state, meta)

    def close(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.close()
        self.updates_log.close()
        self.episodes_log.close()
        self._close_sockets()

    def __enter__(self) -> Learner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------
    def _add(self, batch: TransitionBatch) -> int:
        lock = self._prefetcher.lock if self._prefetcher is not None else contextlib.nullcontext()
        try:
            with lock:  # never while the prefetch thread samples
                episode = self.buffer.add(batch)
        except (SpecMismatch, ValueError) as exc:  # ValueError: rows the buffer cannot store
            self._reject(batch.robot_id, f"rejected: {exc}")
            return 0
        if episode is not None and getattr(episode, "source", "online") == "online":
            self._log_episode(episode)
        return 1

    def _reject(self, robot_id: str, message: str) -> None:
        self.rejected += 1
        count = self._rejected_by_robot[robot_id] = self._rejected_by_robot.get(robot_id, 0) + 1
        if count == 1 or count % 100 == 0:
            log.error("%s (%d batches rejected from robot %s so far)", message, count, robot_id)

    def _log_episode(self, episode: Any) -> None:
        n = len(episode.ticks)
        interventions = int(np.count_nonzero(episode.intervention))
        versions = np.asarray(episode.version)
        self.episodes_log.write(
            {
                "episode": self.episodes,
                "wall_s": round(self.wall_s, 3),
                "updates": self.updates,
                "version": self.version,
                "robot_id": episode.robot_id,
                "episode_id": episode.episode_id,
                "ticks": n,
                "success": bool(episode.success),
                "intervention_ticks": interventions,
                "intervention_rate": interventions / max(n, 1),
                "episode_return": float(np.sum(episode.reward)),
                "data_version_min": int(versions.min()) if n else -1,
                "data_version_max": int(versions.max()) if n else -1,
            }
        )
        self.episodes += 1
        every = self.cfg.plot_every_episodes
        if every and self.episodes % every == 0:
            self._plot()

    def _log_updates(self, terms: dict[str, float], updates_per_s: float) -> None:
        row: dict[str, Any] = {
            "wall_s": round(self.wall_s, 3),
            "updates": self.updates,
            "updates_per_s": updates_per_s,
            "version": self.version,
            "transitions": int(self.buffer.committed_transitions),
            "episodes": self.episodes,
            "received_batches": self.received_batches,
            "rejected": self.rejected,
        }
        row.update({k: float(v) for k, v in terms.items()})
        row.update(staleness_histogram(self._recorder.take()))
        self.updates_log.write(row)
        log.info(
            "update %d v%d %.1f updates/s %s",
            self.updates,
            self.version,
            updates_per_s,
            " ".join(f"{k}={float(v):.4g}" for k, v in list(terms.items())[:6]),
        )

    def _plot(self) -> None:
        title = f"robotrl learn {self.algorithm.name}"
        try:
            if self.episodes_log.rows_written:
                plot_learning_curves(self.episodes_log.path, self.out / "curves.png", title=title)
            if self.updates_log.rows_written:
                plot_update_curves(self.updates_log.path, self.out / "losses.png", title=title)
        except Exception:  # a plot must never take the learner down
            log.exception("could not draw the curves in %s", self.out)

    def _restore(self) -> None:
        if not checkpoint_exists(self.checkpoint_path):
            log.warning(
                "no checkpoint in %s yet: the algorithm starts fresh on the recovered buffer "
                "(%d committed transitions)",
                self.out,
                self.buffer.committed_transitions,
            )
            self._wall_offset_s = self._last_wall_s({})
            return
        state, meta = load_checkpoint(self.checkpoint_path)
        if meta["algorithm"] != self.algorithm.name:
            raise ConfigError(
                f"{self.checkpoint_path} was written by algorithm {meta['algorithm']!r}, "
                f"not {self.algorithm.name!r}: resume with the same --algo"
            )
        self.algorithm.load_state_dict(state["algorithm"])
        self.rng.bit_generator.state = state["rng"]["numpy"]
        torch.set_rng_state(state["rng"]["torch"])
        self.updates = int(meta["updates"])
        self.received_batches, self.rejected = int(meta["received_batches"]), int(meta["rejected"])
        self.version = resume_version(int(meta["version"]), self.cfg.checkpoint_every, self.cfg.publish_every)
        self._wall_offset_s = self._last_wall_s(meta)
        log.info(
            "resumed %s at update %d (weights version %d -> %d), buffer %d transitions (%d at the checkpoint)",
            meta["algorithm"],
            self.updates,
            meta["version"],
            self.version,
            self.buffer.committed_transitions,
            meta["buffer_cursor"]["committed_transitions"],
        )

    def _last_wall_s(self, meta: dict) -> float:
        """Run time so far: the latest of the checkpoint and the last CSV rows."""
        times = [float(meta.get("wall_s", 0.0))]
        for csv_log in (self.updates_log, self.episodes_log):
            if csv_log.last and csv_log.last.get("wall_s"):
                times.append(float(csv_log.last["wall_s"]))
        return max(times)

    def _close_sockets(self) -> None:
        self._inbox.close()


class SampleRecorder:
    """The buffer as the algorithm sees it: forwards everything, and keeps the staleness
    of the online rows each `sample_transitions` / `sample_chunks` returned (for the
    staleness histogram in updates.csv)."""

    def __init__(self, buffer: Sampler) -> None:
        self._buffer = buffer
        self._staleness: list[np.ndarray] = []

    def sample_transitions(self, batch_size: int, learner_version: int, rng: np.random.Generator) -> TransitionSample:
        return self._record(self._buffer.sample_transitions(batch_size, learner_version, rng))

    def sample_chunks(
        self, batch_size: int, horizon: int, learner_version: int, rng: np.random.Generator
    ) -> ChunkSample:
        return self._record(self._buffer.sample_chunks(batch_size, horizon, learner_version, rng))

    def take(self) -> np.ndarray:
        """Staleness (k,) of the online rows sampled since the last call."""
        out = np.concatenate(self._staleness) if self._staleness else np.zeros(0, np.int64)
        self._staleness = []
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._buffer, name)

    def _record[S: (TransitionSample, ChunkSample)](self, sample: S) -> S:
        self._staleness.append(np.asarray(sample.staleness)[~np.asarray(sample.is_demo, dtype=bool)])
        return sample
