"""What this machine offers: serial motor buses, cameras, simulated robots, GPUs, CPUs.

Each `find_*` function only looks (it never moves a motor) and returns frozen
dataclasses. Heavy or slow things are bounded: OpenCV is imported only when a video
node exists, each camera gets a time budget, and `nvidia-smi` runs with a timeout.
"""

from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

# USB vendor ids of the adapters Feetech and Dynamixel buses sit behind:
# QinHeng CH340/CH343 (Feetech/Waveshare boards), FTDI (Robotis U2D2), Silicon Labs CP210x.
MOTOR_BUS_VIDS = {"1a86": "QinHeng CH34x", "0403": "FTDI", "10c4": "Silicon Labs CP210x"}
SERIAL_GLOBS = ("/dev/ttyACM*", "/dev/ttyUSB*")
BY_ID_GLOB = "/dev/serial/by-id/*"


@dataclass(frozen=True)
class SerialPort:
    """One serial device that could carry a motor bus."""

    device: str
    """Kernel device path, e.g. "/dev/ttyACM0" (what lerobot's `--robot.port` takes)."""
    description: str
    """USB product string, or "" when unknown."""
    vid_pid: str | None
    """USB "vid:pid" in lower-case hex, e.g. "1a86:55d3"; None when not a known USB device."""
    by_id: str | None
    """Stable /dev/serial/by-id/ link to the device, if udev made one."""
    likely_motor_bus: bool
    """True for adapters Feetech/Dynamixel buses use (CH34x, FTDI, CP210x, USB CDC-ACM)."""


@dataclass(frozen=True)
class CameraInfo:
    """One camera that opened and delivered a frame."""

    index: int
    """OpenCV capture index (N of /dev/videoN on Linux)."""
    path: str
    """Device path, e.g. "/dev/video0" ("" where the OS has no device nodes)."""
    width_px: int
    """Width of the first frame, pixels."""
    height_px: int
    """Height of the first frame, pixels."""
    fps: float
    """Frame rate the driver reports, frames per second (0.0 when it does not say)."""


@dataclass(frozen=True)
class SimRobot:
    """A simulated arm robotrl can run without hardware (driver "sim")."""

    name: str
    """Key of `robotrl.hardware.models.ARMS`, e.g. "so101"."""
    num_joints: int
    """Actuated joints including the gripper."""
    driver: str = "sim"


@dataclass(frozen=True)
class GpuInfo:
    """One NVIDIA GPU."""

    index: int
    """CUDA device index as nvidia-smi numbers it."""
    name: str
    """Marketing name, e.g. "NVIDIA H200"."""
    memory_mib: int | None
    """Total memory, MiB; None when only /proc/driver/nvidia was readable."""


@dataclass(frozen=True)
class CpuInfo:
    """The host CPU(s) and memory."""

    model: str
    """Model name from /proc/cpuinfo, else what `platform` says."""
    logical_cores: int
    """Logical cores in the machine (os.cpu_count())."""
    usable_cores: int
    """Logical cores this process may run on (its CPU affinity)."""
    memory_mib: int | None
    """Total physical memory, MiB; None when the OS does not say."""


@dataclass(frozen=True)
class Discovery:
    """Everything found on this machine; `to_dict()` is what `robotrl devices --json` prints."""

    serial_ports: tuple[SerialPort, ...]
    cameras: tuple[CameraInfo, ...]
    robots: tuple[SimRobot, ...]
    gpus: tuple[GpuInfo, ...]
    cpus: tuple[CpuInfo, ...]

    def to_dict(self) -> dict[str, list[dict]]:
        return {
            key: [asdict(item) for item in getattr(self, key)]
            for key in ("robots", "serial_ports", "cameras", "gpus", "cpus")
        }


def is_likely_motor_bus(device: str, vid_pid: str | None) -> bool:
    """Whether a serial device looks like a Feetech/Dynamixel adapter.

    Known adapter vendors count, and so does any CDC-ACM device (/dev/ttyACM*, as the
    CH343 boards of the SO-100/SO-101 appear).
    """
    return (vid_pid is not None and vid_pid.split(":")[0] in MOTOR_BUS_VIDS) or "ttyACM" in device


def _usb_attrs(device: str) -> tuple[str | None, str]:
    """("vid:pid" or None, product string) of a tty from sysfs (Linux only)."""
    node = Path("/sys/class/tty") / Path(device).name / "device"
    try:
        node = node.resolve(strict=True)
    except OSError:
        return None, ""
    for parent in (node, *node.parents):
        vid, pid = parent / "idVendor", parent / "idProduct"
        if vid.is_file() and pid.is_file():
            product = parent / "product"
            vendor = vid.read_text().strip()
            name = product.read_text().strip() if product.is_file() else MOTOR_BUS_VIDS.get(vendor, "")
            return f"{vendor}:{pid.read_text().strip()}", name
    return None, ""


def find_serial_ports() -> list[SerialPort]:
    """Serial devices sorted by path, through pyserial if installed, else /dev globs."""
    by_id = {os.path.realpath(link): link for link in glob.glob(BY_ID_GLOB)}
    found: dict[str, tuple[str | None, str]] = {}
    try:
        from serial.tools import list_ports
    except ImportError:
        for device in {p for pattern in SERIAL_GLOBS for p in glob.glob(pattern)} | set(by_id):
            found[device] = _usb_attrs(device)
    else:
        for port in list_ports.comports():
            vid_pid = f"{port.vid:04x}:{port.pid:04x}" if port.vid is not None else None
            description = port.description if port.description not in (None, "n/a") else ""
            found[port.device] = (vid_pid, description)
    return [
        SerialPort(
            device, description, vid_pid, by_id.get(os.path.realpath(device)), is_likely_motor_bus(device, vid_pid)
        )
        for device, (vid_pid, description) in sorted(found.items())
    ]


def _video_nodes(max_cameras: int) -> list[tuple[int, str]]:
    """(index, path) of the first `max_cameras` capture candidates, lowest index first."""
    if not sys.platform.startswith("linux"):
        return [(i, "") for i in range(max_cameras)]
    nodes = []
    for path in glob.glob("/dev/video*"):
        match = re.fullmatch(r"/dev/video(\d+)", path)
        if match:
            nodes.append((int(match.group(1)), path))
    return sorted(nodes)[:max_cameras]


def _probe_camera(cv2, index: int, path: str, budget_s: float) -> CameraInfo | None:
    """Open one camera and read one frame within `budget_s` seconds, else None.

    A capture that hangs is abandoned in its daemon thread; it is never waited for.
    """
    result: list[CameraInfo] = []

    def work() -> None:
        backend = cv2.CAP_V4L2 if path else cv2.CAP_ANY
        cap = cv2.VideoCapture(index, backend)
        try:
            ok, frame = cap.read() if cap.isOpened() else (False, None)
            if ok and frame is not None:
                fps = float(cap.get(cv2.CAP_PROP_FPS) or 0.0)
                result.append(CameraInfo(index, path, frame.shape[1], frame.shape[0], fps))
        finally:
            cap.release()

    thread = threading.Thread(target=work, name=f"probe-camera-{index}", daemon=True)
    thread.start()
    thread.join(budget_s)
    return None if thread.is_alive() or not result else result[0]


def find_cameras(max_cameras: int = 4, budget_s: float = 2.0) -> list[CameraInfo]:
    """Cameras that deliver a frame, probing at most `max_cameras` indices.

    Takes at most about `max_cameras * budget_s` seconds; returns [] at once on a Linux
    machine without /dev/video* nodes (OpenCV is not even imported then).
    """
    nodes = _video_nodes(max_cameras) if max_cameras > 0 else []
    if not nodes:
        return []
    import cv2

    level = cv2.utils.logging.getLogLevel()
    cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)  # failed opens are expected
    try:
        probed = [_probe_camera(cv2, index, path, budget_s) for index, path in nodes]
    finally:
        cv2.utils.logging.setLogLevel(level)
    return [camera for camera in probed if camera is not None]


def find_sim_robots() -> list[SimRobot]:
    """One simulated robot per arm model in `robotrl.hardware.models.ARMS`."""
    from robotrl.hardware.models import ARMS

    return [SimRobot(name, len(arm.joint_names)) for name, arm in sorted(ARMS.items())]


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """GPUs from `nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits`.

    Each line reads "0, NVIDIA H200, 143771" (memory in MiB); malformed lines are skipped.
    """
    gpus = []
    for line in text.splitlines():
        index, _, rest = line.partition(",")
        name, _, memory = rest.rpartition(",")
        if index.strip().isdigit() and name.strip():
            memory = memory.strip()
            gpus.append(GpuInfo(int(index), name.strip(), int(memory) if memory.isdigit() else None))
    return gpus


def find_gpus(timeout_s: float = 5.0) -> list[GpuInfo]:
    """NVIDIA GPUs via nvidia-smi (bounded by `timeout_s` seconds), else /proc/driver/nvidia.

    Never imports torch, so it stays fast on any machine.
    """
    smi = shutil.which("nvidia-smi")
    if smi:
        query = [smi, "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"]
        try:
            done = subprocess.run(query, capture_output=True, text=True, timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired):
            done = None
        if done is not None and done.returncode == 0:
            return parse_nvidia_smi(done.stdout)
    gpus = []
    for index, info in enumerate(sorted(glob.glob("/proc/driver/nvidia/gpus/*/information"))):
        model = re.search(r"^Model:\s*(.+)$", Path(info).read_text(), re.MULTILINE)
        gpus.append(GpuInfo(index, model.group(1).strip() if model else "NVIDIA GPU", None))
    return gpus


def find_cpus() -> list[CpuInfo]:
    """The host CPU as one entry: model, core counts and total memory."""
    model = ""
    try:
        match = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
        model = match.group(1).strip() if match else ""
    except OSError:
        pass
    model = model or platform.processor() or platform.machine() or "unknown"
    logical = os.cpu_count() or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else logical
    try:
        memory_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (ValueError, OSError, AttributeError):
        memory_mib = None
    return [CpuInfo(model, logical, usable, memory_mib)]


def discover(max_cameras: int = 4, camera_budget_s: float = 2.0) -> Discovery:
    """Run every `find_*`; cameras are bounded as in `find_cameras`."""
    return Discovery(
        tuple(find_serial_ports()),
        tuple(find_cameras(max_cameras, camera_budget_s)),
        tuple(find_sim_robots()),
        tuple(find_gpus()),
        tuple(find_cpus()),
    )
