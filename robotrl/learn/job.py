"""`LearnerJob`: everything one learner process needs, as one frozen config, and
`run_learner`, which runs it (`robotrl learner`; `robotrl learn` writes one to a file
for its learner child).

Executors stream transitions to `loop.transitions_endpoint` (`wire.transitions`); servers subscribe to
`weights` (PUB on that port, the latest-weights socket on port + 1). SIGINT/SIGTERM stop
it with a final checkpoint; `resume` continues a run (also after kill -9) from
`loop.out` and the buffer log.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field
from pathlib import Path

from robotrl.buffer.spec import TransitionSpec
from robotrl.core.devices import DEFAULT_DEVICE, check_device
from robotrl.core.errors import UserError
from robotrl.core.policy import past_frame_ticks_back
from robotrl.learn.learner import Learner, LearnerConfig
from robotrl.record import features as F

SERVED = "served"
"""Folder in the run folder with a checkpoint of the served policy: as of the (resumed)
start while the learner runs, its final weights once it stops."""


@dataclass(frozen=True)
class LearnerJob:
    """One learner process: algorithm, buffer, transition spec, loop."""

    algo: str
    """sac (RLPD / HIL-SERL), hil-flow (weighted flow fine-tuning), dsrl (SAC over the noise)."""
    buffer: Path
    """Online buffer folder (episode log), created if new."""
    loop: LearnerConfig
    """Run folder, endpoints, update / publish / checkpoint cadence."""
    preset: str = "default"
    overrides: dict = field(default_factory=dict)
    """Preset fields replaced (field -> JSON value)."""
    policy: Path | None = None
    """Flow policy checkpoint (hil-flow, dsrl); also gives the transition spec."""
    demo_datasets: tuple[Path, ...] = ()
    """LeRobotDatasets loaded as demo transitions."""
    weights: str = "tcp://*:5561"
    """Weights PUB endpoint; the latest-weights socket binds port + 1."""
    resume: bool = False
    spec: TransitionSpec | None = None
    """What executors send; None: from `policy`, or OUT/spec.json on resume."""
    capacity: int = 200_000
    """Online transitions kept in RAM."""
    online_ratio: float = 0.5
    """Share of each batch from online rows, the rest demo + interventions."""
    staleness_cap: int | None = None
    """Never sample online rows more than this many versions old."""
    fsync: bool = True
    """fsync the buffer log (crash-safe); False is faster."""
    threads: int = 1
    """torch CPU threads."""
    device: str = DEFAULT_DEVICE
    """Where the algorithm trains: auto (a free GPU, else the CPU), cpu, cuda or cuda:N;
    batches are moved there, checkpoints and published weights come back to the CPU."""
    curve_keys: Path | None = None
    """Folder with the learner's `server.key_secret` and `allowed_clients/` (the actors'
    and servers' public keys): the transitions and weights channels are encrypted and
    only allowed keys are heard (CURVE). None: open, for loopback or a trusted network."""

    def __post_init__(self) -> None:
        check_device(self.device)


def resolve_spec(job: LearnerJob) -> TransitionSpec:
    """The job's spec, else OUT/spec.json on resume, else the policy's config."""
    saved = Path(job.loop.out) / "spec.json"
    if job.spec is not None:
        return job.spec
    if job.resume and saved.is_file():
        try:
            return TransitionSpec.from_dict(json.loads(saved.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UserError(f"cannot read the transition spec {saved}: {exc}") from None
    if job.policy is None:
        raise UserError("give the transition spec (--spec, or the --state-dim ... flags) or a --policy")
    from robotrl.policies.checkpoint import read_config
    from robotrl.policies.fastslow.config import FastSlowConfig

    c = FastSlowConfig.from_checkpoint(read_config(job.policy))
    size = c.image_size_px
    # what the arm streams: privileged env_state only for a policy that reads it (not one that estimates it)
    return TransitionSpec(
        c.state_dim, c.action_dim, {cam: (size, size) for cam in c.cameras}, c.env_state_dim if c.reads_env_state else 0
    )


def trained_action_key(policy: Path | None) -> str:
    """The dataset column the checkpoint at `policy` learnt its actions from (`robotrl train
    --action-key`, kept when a learner serves it): demonstrations are labelled as it was,
    e.g. with a DART recording's clean "teleop.action" rather than the perturbed command
    the arm executed. "action" for no policy or a checkpoint that does not say."""
    if policy is None:
        return F.ACTION
    from robotrl.policies.checkpoint import read_config
    from robotrl.policies.fastslow.config import FastSlowConfig

    return FastSlowConfig.from_checkpoint(read_config(policy)).action_key


def run_learner(job: LearnerJob) -> None:
    """Run the learner of `job` until it is stopped or its limits end it."""
    import torch

    from robotrl.buffer.online import OnlineBuffer
    from robotrl.learn.learner import run_exists
    from robotrl.learn.registry import make_algorithm
    from robotrl.policies.device import torch_device
    from robotrl.wire.keys import server_keys
    from robotrl.wire.weights import WeightPublisher, weight_endpoints

    out = Path(job.loop.out)
    torch.set_num_threads(max(1, job.threads))
    if not job.resume and run_exists(out):
        raise UserError(f"{out} holds a learner run: pass --resume to continue it or choose another --out")
    spec = resolve_spec(job)
    pub_endpoint, latest_endpoint = weight_endpoints(job.weights)
    device = torch_device(job.device)
    algorithm = make_algorithm(
        job.algo,
        spec,
        policy_path=job.policy,
        preset=job.preset,
        overrides=job.overrides,
        seed=job.loop.seed,
        device=device,
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps(spec.to_dict(), indent=1))
    served = algorithm.served_policy().metadata  # a policy reading past frames trains on them too
    buffer = OnlineBuffer(
        job.buffer,
        spec,
        job.capacity,
        online_ratio=job.online_ratio,
        staleness_cap=job.staleness_cap,
        fsync=job.fsync,
        past_ticks=past_frame_ticks_back(served.past_frame_ticks, served.past_frames),
    )
    meta = {
        "spec": spec.to_dict(),
        "algo": job.algo,
        "preset": job.preset,
        "overrides": job.overrides,
        "policy": str(job.policy) if job.policy else None,
        "buffer": str(job.buffer),
    }
    publisher = learner = None
    try:
        action_key = trained_action_key(job.policy)
        for path in job.demo_datasets:
            added = buffer.add_demo_dataset(path, action_key=action_key, progress=True)
            print(f"demo transitions from {path}: {added} (actions: its {action_key!r} column)")
        print(
            f"buffer {job.buffer}: {buffer.committed_episodes} episodes, {buffer.committed_transitions} "
            f"online transitions recovered in {buffer.recovery_s:.2f} s"
        )
        keys = None if job.curve_keys is None else server_keys(job.curve_keys)
        publisher = WeightPublisher(pub_endpoint, latest_endpoint, curve=keys)
        learner = Learner(
            algorithm, buffer, publisher, job.loop, resume=job.resume, meta=meta, curve=keys, device=str(device)
        )
        algorithm.served_policy().save(out / SERVED)  # what a server starts from (`serve --policy`)
        print(
            f"transitions: {learner.transitions_endpoint}  weights: {publisher.pub_endpoint} "
            f"(latest: {publisher.latest_endpoint})",
            flush=True,
        )
        with _stop_on_signals(learner):
            learner.run()
        algorithm.served_policy().save(out / SERVED)  # the final weights, for `serve` / `deploy`
        print(
            f"{learner.updates} updates, weights version {learner.version}, {learner.episodes} episodes, "
            f"{learner.rejected} batches rejected; checkpoint {learner.checkpoint_path}, curves {out}"
        )
    finally:
        for part in (learner, publisher, buffer):
            if part is not None:
                part.close()


class _stop_on_signals:
    """SIGINT/SIGTERM -> `learner.stop()` (the loop then checkpoints and returns)."""

    def __init__(self, learner: Learner) -> None:
        self.learner = learner
        self.previous: dict[int, object] = {}

    def __enter__(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, lambda *_: self.learner.stop())

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
