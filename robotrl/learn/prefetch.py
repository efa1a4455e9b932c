"""`Prefetcher`: the learner's sampler, drawing the next batch while the current update
computes, and on a GPU moving its images there on a side stream.

After each draw the algorithm asked for, one background thread draws the same kind of
batch again (same sizes and learner version) with a copy of the caller's numpy RNG. The
next request takes that batch only when nothing it depends on changed: the same kind and
sizes, the same learner version, the caller's RNG still in the state the copy was made
from, and the buffer unchanged (`generation`). Then the caller's RNG is moved on exactly
as the draw moved the copy, so the batches, their order and every later RNG state are
those of the wrapped sampler alone (a resumed run stays bitwise). Anything else is a
miss: the batch is discarded and drawn again in the caller's thread. Misses are rare in
a learner: a new weight version (every `publish_every` updates) and each committed
episode.

The buffer is sampled under `lock`; whoever adds to it (the learner) holds `lock` too.

On a CUDA device the images are gathered into pinned memory (`pinned_images`, set on the
buffer by the learner), copied to the device with `non_blocking` on a side stream in the
background thread, and the update's stream waits for that copy (an event) before using
them: images travel as uint8 and stay so until the update makes them float on the device
(augmentation included). Small arrays (states, actions, rewards, flags) stay numpy; the
algorithm moves them. On the CPU the batch is numpy, as the sampler made it.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from robotrl.buffer.online import OnlineBuffer
from robotrl.buffer.sampler import ChunkSample, TransitionSample
from robotrl.core.learning import Buffer, Sampler
from robotrl.policies.device import image_tensor, to_device

Sample = TransitionSample | ChunkSample
Key = tuple[Any, ...]
"""("transitions", batch_size, learner_version) or ("chunks", batch_size, horizon, learner_version)."""


def pinned_images(shape: tuple[int, ...]) -> tuple[np.ndarray, torch.Tensor]:
    """An `ImageAlloc` for a GPU learner: a (B, h, w, 3) uint8 tensor in pinned host memory
    (torch's caching host allocator reuses the blocks), and the numpy view gathered into."""
    tensor = torch.empty(shape, dtype=torch.uint8, pin_memory=True)
    return tensor.numpy(), tensor


def learner_prefetcher(buffer: Buffer, device: torch.device, prefetch: bool | None) -> Prefetcher | None:
    """The learner's prefetching sampler over `buffer` (`prefetch` None: on CUDA only), or
    None; on CUDA an `OnlineBuffer`'s images are then gathered into pinned memory."""
    if not (prefetch if prefetch is not None else device.type == "cuda"):
        return None
    if device.type == "cuda" and isinstance(buffer, OnlineBuffer):
        buffer.image_alloc = pinned_images
    return Prefetcher(buffer, device, generation=lambda: (buffer.committed_episodes, len(buffer)))


@dataclass
class _Job:
    key: Key
    rng_before: Mapping[str, Any]
    """The caller's RNG state the copy started from."""
    future: Future[tuple[Hashable, Mapping[str, Any], Any]]
    """-> (buffer generation sampled, the copy's RNG state after the draw, staged batch)."""


class Prefetcher:
    """A `Sampler` over `sampler` that draws each next batch in a background thread.

    Args:
        sampler: the buffer (or any `Sampler`).
        device: where the batches go; on CUDA images are staged there (above).
        generation: a value that changes whenever the buffer's samplable rows change (the
            learner: committed episodes and samplable rows); None: the buffer never changes.

    Attributes: `lock` (held while sampling; hold it to change the buffer), `hits` (batches
    drawn ahead and taken), `misses` (batches drawn in the caller's thread).
    """

    def __init__(
        self, sampler: Sampler, device: torch.device, *, generation: Callable[[], Hashable] | None = None
    ) -> None:
        self._sampler = sampler
        self.device = device
        self.lock = threading.Lock()
        self._generation = generation or (lambda: None)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="robotrl-prefetch")
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._job: _Job | None = None
        self.hits = self.misses = 0

    def sample_transitions(self, batch_size: int, learner_version: int, rng: np.random.Generator) -> TransitionSample:
        sample = self._take(("transitions", batch_size, learner_version), rng)
        assert isinstance(sample, TransitionSample)
        return sample

    def sample_chunks(
        self, batch_size: int, horizon: int, learner_version: int, rng: np.random.Generator
    ) -> ChunkSample:
        sample = self._take(("chunks", batch_size, horizon, learner_version), rng)
        assert isinstance(sample, ChunkSample)
        return sample

    def close(self) -> None:
        """Drop the batch drawn ahead and end the thread."""
        self._job = None
        self._pool.shutdown(wait=True, cancel_futures=True)

    # -- internals -----------------------------------------------------------------------
    def _take(self, key: Key, rng: np.random.Generator) -> Sample:
        """The batch for `key` drawn with `rng`: the one drawn ahead when it is exactly that
        batch, else drawn now; then the next one is started."""
        job, self._job = self._job, None
        staged = self._claim(job, key, rng) if job is not None else None
        if staged is None:
            self.misses += 1
            with self.lock:
                sample = self._draw(key, rng)
            staged = self._stage(sample)
        else:
            self.hits += 1
        self._start(key, rng)
        return self._ready(staged)

    def _claim(self, job: _Job, key: Key, rng: np.random.Generator) -> Any:
        """`job`'s staged batch if it is the batch the caller would draw now (moving `rng`
        on as the draw did), else None."""
        if job.key != key or rng.bit_generator.state != job.rng_before:
            job.future.cancel()
            return None
        try:
            generation, rng_after, staged = job.future.result()
        except ValueError:  # nothing samplable then; the caller's own draw says so or succeeds
            return None
        if generation != self._generation():
            return None
        rng.bit_generator.state = rng_after
        return staged

    def _start(self, key: Key, rng: np.random.Generator) -> None:
        ahead = copy.deepcopy(rng)
        self._job = _Job(key, rng.bit_generator.state, self._pool.submit(self._ahead, key, ahead))

    def _ahead(self, key: Key, rng: np.random.Generator) -> tuple[Hashable, Mapping[str, Any], Any]:
        """The background thread: draw under the lock, then stage (copy to the device)."""
        with self.lock:
            generation = self._generation()
            sample = self._draw(key, rng)
        return generation, rng.bit_generator.state, self._stage(sample)

    def _draw(self, key: Key, rng: np.random.Generator) -> Sample:
        if key[0] == "transitions":
            return self._sampler.sample_transitions(key[1], key[2], rng)
        return self._sampler.sample_chunks(key[1], key[2], key[3], rng)

    def _stage(self, sample: Sample) -> Any:
        """On CUDA: (sample with its images on the device, the copy's event), the copies
        queued on the side stream; elsewhere the sample as it is."""
        if self._stream is None:
            return sample
        with torch.cuda.stream(self._stream):
            moved = {
                name: {cam: to_device(image_tensor(img), self.device) for cam, img in getattr(sample, name).items()}
                for name in ("images", "next_images")
            }
            event = torch.cuda.Event()
            event.record(self._stream)
        return dataclasses.replace(sample, **moved), event

    def _ready(self, staged: Any) -> Sample:
        """The staged batch, usable on the caller's current stream."""
        if self._stream is None:
            return staged
        sample, event = staged
        stream = torch.cuda.current_stream(self.device)
        stream.wait_event(event)
        for images in (sample.images, sample.next_images):
            for img in images.values():
                img.record_stream(stream)  # made on the side stream, used (and freed) on this one
        return sample
