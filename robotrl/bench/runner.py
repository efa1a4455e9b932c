"""Run benchmark cells locally or as Ray tasks, resumably.

Every finished episode is appended to `episodes.jsonl` in the output folder at once; a
rerun with the same setup skips the cells already there. With `use_ray` each cell is a
Ray task (a local Ray instance, or the cluster at `ray_address`); `run_cell` is
deterministic, so both give the same records. The cache is keyed by the setup, not by
the code: after changing the code, write to a fresh folder.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable, Sequence
from pathlib import Path

from robotrl.core.errors import UserError

log = logging.getLogger(__name__)

CACHE_FILE = "episodes.jsonl"


class ResultCache:
    """Episode records as JSON lines in `out_dir/episodes.jsonl`, keyed by (setup
    fingerprint, cell key); lines of other setups are kept but not used."""

    def __init__(self, out_dir: Path, fingerprint: str) -> None:
        self.path = Path(out_dir) / CACHE_FILE
        self.fingerprint = fingerprint
        self.records: dict[str, dict] = {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:  # a line cut short by a crash: run that cell again
                    continue
                if record.get("config") == fingerprint:
                    self.records[record["key"]] = record

    def add(self, record: dict) -> None:
        """Store `record` (it needs a "key"), stamped with this setup's fingerprint."""
        record = {"config": self.fingerprint, **record}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        self.records[record["key"]] = record


def run_cells(
    run: Callable,
    setup,
    cells: Sequence,
    out_dir: Path,
    *,
    use_ray: bool = False,
    ray_address: str | None = None,
    desc: str = "episodes",
    progress: bool = True,
) -> list[dict]:
    """Records of `cells` in order: cached ones read back, the rest computed by
    `run(setup, cell) -> dict` (locally, or as Ray tasks) and cached as they finish."""
    from tqdm import tqdm

    cache = ResultCache(out_dir, setup.fingerprint())
    todo = [c for c in cells if c.key not in cache.records]
    if len(todo) < len(cells):
        log.info("%d of %d episodes already in %s", len(cells) - len(todo), len(cells), cache.path)
    bar = tqdm(total=len(todo), desc=desc, unit="ep", disable=not progress or not todo)
    try:
        results = _ray_map(run, setup, todo, ray_address) if use_ray else (run(setup, c) for c in todo)
        for record in results:
            cache.add(record)
            bar.update()
    finally:
        bar.close()
    return [cache.records[c.key] for c in cells]


def _ray_map(run: Callable, setup, cells: Sequence, address: str | None):
    """Yields `run(setup, cell)` of every cell, computed as Ray tasks, as they finish."""
    ray = import_ray()
    if not cells:
        return
    started_here = not ray.is_initialized()
    if started_here:
        if address:
            check_reachable(address)
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        except Exception as exc:
            where = f"the Ray cluster at {address}" if address else "a local Ray instance"
            raise UserError(f"could not start or reach {where}: {exc}") from exc
    try:
        task = ray.remote(run)
        setup_ref = ray.put(setup)
        pending = [task.remote(setup_ref, c) for c in cells]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
    finally:
        if started_here:
            ray.shutdown()


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Raise a `UserError` when nothing listens at a "[ray://]host:port" Ray address
    (Ray itself would wait for minutes); other forms ("auto") are left to Ray."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise UserError(
            f"no Ray cluster answers at {address} ({exc}); start one with `ray start --head` "
            "or leave out --ray-address for a local instance"
        ) from None


def import_ray():
    """The `ray` module, or a `UserError` saying how to install it."""
    try:
        import ray  # pyright: ignore[reportMissingImports]
    except ImportError as exc:
        raise UserError("--ray needs Ray: pip install 'robotrl[ray]' (or run without --ray)") from exc
    return ray
