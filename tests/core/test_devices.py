"""Device selection (`robotrl.core.devices`, pure) and the fleet's GPU for a role, on
made-up machines: no GPU, one, several; explicit, auto and fleet-assigned requests."""

from __future__ import annotations

import socket

import pytest

from robotrl.core.devices import GIB, FleetGpu, GpuMemory, check_device, choose_device, requested_index
from robotrl.core.errors import ConfigError, UserError
from robotrl.fleet import parse_fleet

H200 = GpuMemory(0, 130 * GIB, 140 * GIB, "NVIDIA H200")
BUSY = GpuMemory(0, 10 * GIB, 80 * GIB, "A100")
FREE = GpuMemory(1, 70 * GIB, 80 * GIB, "A100")
TIE = GpuMemory(2, 70 * GIB, 80 * GIB, "A100")


@pytest.mark.parametrize("text", ["auto", "cpu", "cuda", "cuda:0", "cuda:12"])
def test_device_values(text):
    assert check_device(text) == text


@pytest.mark.parametrize("text", ["tpu", "gpu", "cuda:", "cuda:x", "cpu:0", "auto:1", "CUDA", " cpu", ""])
def test_bad_device_values_name_the_choices(text):
    with pytest.raises(ConfigError, match="auto, cpu, cuda or cuda:N"):
        check_device(text)
    with pytest.raises(UserError, match="not one of auto, cpu, cuda or cuda:N"):
        choose_device(text, [H200])


def test_requested_index():
    assert [requested_index(t) for t in ("auto", "cpu", "cuda", "cuda:3")] == [None, None, 0, 3]


def test_cpu_and_auto_without_a_gpu():
    assert choose_device("cpu", [H200]).device == "cpu"  # asked for: the GPU stays unused
    choice = choose_device("auto", [])
    assert (choice.device, choice.gpu) == ("cpu", None)
    assert choice.line() == "device: cpu (auto: no CUDA GPU)"


def test_explicit_gpus_must_exist():
    assert choose_device("cuda", [H200]).device == "cuda:0"  # torch's meaning of "cuda"
    assert choose_device("cuda:1", [BUSY, FREE]).gpu == FREE
    with pytest.raises(UserError, match=r"--device cuda:7: this machine has cuda:0, cuda:1; use --device auto or cpu"):
        choose_device("cuda:7", [BUSY, FREE])
    with pytest.raises(UserError, match="--device cuda: this machine has no CUDA GPU"):
        choose_device("cuda", [])


def test_auto_takes_the_gpu_with_the_most_free_memory_first_of_equals():
    assert choose_device("auto", [BUSY, FREE, TIE]).device == "cuda:1"
    assert choose_device("auto", [TIE, FREE, BUSY]).device == "cuda:1"  # order of the list does not matter


def test_auto_takes_the_fleets_gpu_for_the_role_when_this_machine_has_it():
    fleet = FleetGpu("gpus.box", 0, "learner")
    choice = choose_device("auto", [BUSY, FREE], fleet)
    assert choice.device == "cuda:0"  # the fleet's, though cuda:1 has more free memory
    # 10 of 80 GiB free on cuda:0: the line gives the memory and the reason
    assert (
        choice.line("learner")
        == "device for the learner: cuda:0 (A100, 10.0 of 80.0 GiB free; fleet gpus.box serves learner)"
    )
    assert choose_device("cuda:1", [BUSY, FREE], fleet).device == "cuda:1"  # an explicit device wins
    missing = choose_device("auto", [FREE], FleetGpu("gpus.box", 0, "learner"))
    assert missing.device == "cuda:1" and "fleet gpus.box (cuda:0) is not on this machine" in missing.reason
    assert choose_device("auto", [], fleet).device == "cpu"


FLEET = {
    "gpus": {
        "trainer": {"index": 1, "host": "localhost", "roles": ["learner"]},
        "elsewhere": {"index": 0, "host": "gpu-box-far-away.invalid", "roles": ["inference_server"]},
        "here": {"index": 2, "host": socket.gethostname(), "roles": ["inference_server", "learner"]},
    }
}


def test_the_fleet_gives_each_role_its_first_gpu_on_this_host():
    fleet = parse_fleet(FLEET)
    assert fleet.local_gpu("learner") == FleetGpu("gpus.trainer", 1, "learner")
    assert fleet.local_gpu("inference_server") == FleetGpu("gpus.here", 2, "inference_server")  # not the far one
    assert parse_fleet({"gpus": {"far": FLEET["gpus"]["elsewhere"]}}).local_gpu("inference_server") is None
    with pytest.raises(ConfigError, match="'recorder' is not a GPU role"):
        fleet.local_gpu("recorder")
