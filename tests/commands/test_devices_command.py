"""`robotrl devices`: each GPU's memory in use and utilisation (from `gpu_health`), one
line on a machine without a CUDA GPU. The GPU's own numbers are checked in tests/gpu."""

from __future__ import annotations

import json

import torch

from robotrl.cli import main
from robotrl.commands.devices import format_gpus, gpu_usage
from robotrl.core.health import gpu_report
from robotrl.hardware.discovery import Discovery, GpuInfo

GIB = 2**30


def test_the_gpu_table_shows_memory_in_use_and_utilisation():
    usage = [
        {"index": 0, "name": "NVIDIA H200", **gpu_report("cuda:0", 120 * GIB, 140 * GIB, 37.0)},
        {"index": 1, "name": "NVIDIA H200", **gpu_report("cuda:1", 140 * GIB, 140 * GIB, None)},
    ]
    lines = format_gpus((GpuInfo(0, "NVIDIA H200", 143771),), usage).splitlines()
    assert lines[0] == "GPUs" and lines[1].split() == ["index", "name", "memory", "in", "use", "utilisation"]
    assert "20.0 GiB of 140.0 GiB" in lines[2] and lines[2].rstrip().endswith("37%")  # 140 - 120 GiB used
    assert "0.0 GiB of 140.0 GiB" in lines[3] and lines[3].rstrip().endswith("?")  # no nvidia-ml-py


def test_no_cuda_gpu_is_one_line_and_gpus_torch_cannot_see_say_so():
    assert format_gpus((), []) == "GPUs: no CUDA GPU"
    text = format_gpus((GpuInfo(0, "NVIDIA H200", 143771),), [])
    assert "NVIDIA H200" in text and "140.4 GiB" in text
    assert text.splitlines()[-1].strip() == "(torch sees no CUDA GPU: memory in use and utilisation unknown)"
    assert gpu_usage(Discovery((), (), (), (), ())) == []  # nothing found: torch is not even asked


def test_cli_devices_on_this_machine(capsys):
    assert main(["devices", "--max-cameras", "0"]) == 0
    out = capsys.readouterr().out
    if not torch.cuda.is_available():
        assert out.count("GPUs: no CUDA GPU") == 1
    assert main(["devices", "--json", "--max-cameras", "0"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["gpu_usage"]) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
