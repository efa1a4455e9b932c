"""torch's side of `--device`: measure this machine's GPUs, pick the device
(`robotrl.core.devices.choose_device`), and the few helpers every model path shares.

Conventions of every robotrl model on a device:
- checkpoints are read onto the CPU (safetensors), then the model is moved, so a
  checkpoint made on a GPU loads on a CPU-only machine and the other way round;
- a policy takes numpy observations, computes its small per-request features on the CPU,
  moves the model inputs to its device and returns numpy on the CPU;
- random draws that decide results (flow noise, SAC exploration noise, training draws)
  come from CPU generators and are moved, so the same seed gives the same numbers on the
  CPU and (within float tolerance) on a GPU, and resumed runs stay bitwise on the CPU.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch

from robotrl.core.devices import DeviceChoice, FleetGpu, GpuMemory, choose_device, requested_index
from robotrl.core.health import GpuHealth, gpu_report

CPU = torch.device("cpu")
PIN_BYTES = 64 * 1024
"""Tensors from this size up are copied to a GPU through pinned memory (images, batches)."""


def visible_gpus(measure: int | None = None) -> list[GpuMemory]:
    """The CUDA GPUs torch sees; free memory is measured (which opens a CUDA context on
    that GPU) for GPU `measure` only, or for all when None."""
    if not torch.cuda.is_available():
        return []
    gpus = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i) if measure is None or measure == i else (0, props.total_memory)
        gpus.append(GpuMemory(i, int(free), int(total), props.name))
    return gpus


def gpu_health(device: str | torch.device) -> GpuHealth:
    """The health of `device` (`robotrl.core.health.GpuHealth`): on a CUDA device its memory
    in use and total (`torch.cuda.mem_get_info`: the whole GPU, every process) and its
    utilisation (`torch.cuda.utilization`, None without nvidia-ml-py); on the CPU the device
    alone. Call it from a process that already computes on that GPU (measuring opens a CUDA
    context). Never raises: what cannot be measured is None."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return gpu_report(str(dev))
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    free = total = utilization = None
    try:
        free, total = torch.cuda.mem_get_info(index)
    except Exception:  # health must never take a server or learner down
        pass
    try:
        utilization = float(torch.cuda.utilization(index))
    except Exception:  # no nvidia-ml-py, or no NVML on this driver
        pass
    return gpu_report(f"cuda:{index}", free, total, utilization)


def select_device(requested: str, fleet: FleetGpu | None = None) -> DeviceChoice:
    """The device for a `--device` value (auto, cpu, cuda, cuda:N); `fleet` is the fleet
    file's GPU for the role. A GPU this machine lacks or a bad value is a `UserError`."""
    if requested == "cpu":
        return choose_device("cpu", [])
    return choose_device(requested, visible_gpus(requested_index(requested)), fleet)


def torch_device(device: str | torch.device) -> torch.device:
    """A torch.device; "auto" is resolved here (no fleet file)."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        device = select_device("auto").device
    return torch.device(select_device(device).device if device.startswith("cuda") else device)


def module_device(module: torch.nn.Module) -> torch.device:
    """Where `module`'s parameters are (the CPU for a module without any)."""
    return next((p.device for p in module.parameters()), torch.device("cpu"))


def autocast(device: torch.device, enabled: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on a CUDA device when `enabled`; on the CPU nothing (fp32 numerics
    unchanged)."""
    if enabled and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def image_tensor(images: np.ndarray | torch.Tensor) -> torch.Tensor:
    """(B, h, w, 3) uint8 images as a tensor: a tensor as it is (on its device, pinned or
    not), a numpy array without a copy (made contiguous first if it is not)."""
    return images if isinstance(images, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(images))


def stage_tensors(tensors: dict[str, torch.Tensor], like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`tensors` (CPU) on the devices of the same-named tensors of `like` (a module's
    state_dict), finished when this returns. To a GPU they go through pinned memory on a
    side stream of the calling thread, so a thread serving on that GPU never waits for
    them (call it off the serving thread); for the CPU they are returned as they are."""
    out: dict[str, torch.Tensor] = {}
    streams: dict[torch.device, torch.cuda.Stream] = {}
    for name, tensor in tensors.items():
        device = like[name].device
        if device.type != "cuda":
            out[name] = tensor.to(device)
            continue
        stream = streams.setdefault(device, torch.cuda.Stream(device))
        with torch.cuda.stream(stream):
            out[name] = tensor.pin_memory().to(device, non_blocking=True)
    for stream in streams.values():
        stream.synchronize()
    return out


def load_staged(module: torch.nn.Module, staged: dict[str, torch.Tensor]) -> None:
    """Copy `stage_tensors` output into `module`'s parameters and buffers (on their device:
    on a GPU a copy queued on this thread's stream, which the staged memory outlives)."""
    module.load_state_dict(staged)
    for tensor in staged.values():
        if tensor.is_cuda:
            tensor.record_stream(torch.cuda.current_stream(tensor.device))


def to_device(value: Any, device: torch.device) -> Any:
    """Tensors in `value` (a tensor, dict, list or tuple of them; None and other leaves
    kept) on `device`; large ones go to a GPU from pinned memory without blocking the host."""
    if isinstance(value, torch.Tensor):
        if value.device == device:
            return value
        if device.type == "cuda" and value.device.type == "cpu" and value.nbytes >= PIN_BYTES:
            return value.pin_memory().to(device, non_blocking=True)
        return value.to(device)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value
