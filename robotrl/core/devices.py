"""Where the heavy work runs: the `--device` values and the rule that picks one.

A device option takes `auto`, `cpu`, `cuda` (torch's meaning: `cuda:0`) or `cuda:N`.
`auto` picks, in order:

1. the GPU the fleet file assigns to the command's role (`[gpus.NAME]` with the role in
   `roles`, on this host), when this machine has it;
2. else the GPU with the most free memory (the first of equals);
3. else the CPU.

An explicit GPU this machine lacks, or a value of none of these forms, is a `UserError`
(the CLI prints one line and exits 2). This module is pure: the caller measures the GPUs
(`robotrl.policies.device.visible_gpus`, which needs torch) and passes them in.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from robotrl.core.errors import ConfigError, UserError

DEFAULT_DEVICE = "auto"
"""The default of every device option and config field."""
DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"
_PATTERN = re.compile(r"^(auto|cpu|cuda)(?::(\d+))?$")
GIB = 1024**3


@dataclass(frozen=True)
class GpuMemory:
    """One CUDA GPU as torch numbers it on this machine."""

    index: int
    """torch's CUDA index (after CUDA_VISIBLE_DEVICES)."""
    free_bytes: int
    total_bytes: int
    name: str = ""


@dataclass(frozen=True)
class FleetGpu:
    """What a fleet file says about the GPU for a role: its entry and CUDA index."""

    entry: str
    """"gpus.NAME"."""
    index: int
    role: str


@dataclass(frozen=True)
class DeviceChoice:
    device: str
    """"cpu" or "cuda:N": what torch is given."""
    reason: str
    """Why this device, for the start line."""
    gpu: GpuMemory | None = None
    """The GPU's memory when it was measured (a GPU device)."""

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def line(self, role: str | None = None) -> str:
        """The line a command prints at its start, e.g. "device for the learner: cuda:0
        (NVIDIA H200, 137.9 of 139.8 GiB free; fleet gpus.box serves learner)"."""
        head = f"device for the {role}: " if role else "device: "
        if self.gpu is None:
            return f"{head}{self.device} ({self.reason})"
        g = self.gpu
        name = f"{g.name}, " if g.name else ""
        return (
            f"{head}{self.device} ({name}{g.free_bytes / GIB:.1f} of {g.total_bytes / GIB:.1f} GiB free; {self.reason})"
        )


def check_device(text: str) -> str:
    """`text` if it is a device value (auto, cpu, cuda, cuda:N), else a `ConfigError`
    (configs validate their `device` field with it)."""
    match = _PATTERN.match(str(text))
    if match is None or (match.group(2) is not None and match.group(1) != "cuda"):
        raise ConfigError(f"device {text!r} is not one of {DEVICE_CHOICES}")
    return text


def requested_index(text: str) -> int | None:
    """The CUDA index a `--device` value names (cuda -> 0, cuda:N -> N), else None; a
    value of no known form is a `UserError`."""
    _check_request(text)
    if not text.startswith("cuda"):
        return None
    return int(text.partition(":")[2] or 0)


def choose_device(requested: str, gpus: Sequence[GpuMemory], fleet: FleetGpu | None = None) -> DeviceChoice:
    """The device for `requested` on a machine with `gpus`; `fleet` is the fleet file's
    GPU for the command's role (used by `auto` only)."""
    _check_request(requested)
    by_index = {g.index: g for g in gpus}
    if requested == "cpu":
        return DeviceChoice("cpu", "asked for")
    index = requested_index(requested)
    if index is not None:
        if index not in by_index:
            have = ", ".join(f"cuda:{i}" for i in sorted(by_index)) or "no CUDA GPU"
            raise UserError(f"--device {requested}: this machine has {have}; use --device auto or cpu")
        return DeviceChoice(f"cuda:{index}", "asked for", by_index[index])
    note = ""
    if fleet is not None:
        if fleet.index in by_index:
            return DeviceChoice(
                f"cuda:{fleet.index}", f"fleet {fleet.entry} serves {fleet.role}", by_index[fleet.index]
            )
        note = f"fleet {fleet.entry} (cuda:{fleet.index}) is not on this machine; "
    if gpus:
        best = max(gpus, key=lambda g: (g.free_bytes, -g.index))
        return DeviceChoice(f"cuda:{best.index}", f"{note}auto: most free memory", best)
    return DeviceChoice("cpu", f"{note}auto: no CUDA GPU")


def _check_request(text: str) -> None:
    try:
        check_device(text)
    except ConfigError:
        raise UserError(f"--device {text!r} is not one of {DEVICE_CHOICES}") from None
