"""`robotrl devices`: what this machine offers, and a fleet file checked against it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from robotrl.core.errors import DeviceNotConnected, UserError
from robotrl.fleet import Fleet, check_devices, load_fleet
from robotrl.hardware.discovery import Discovery, GpuInfo, discover

CAMERA_BUDGET_S = 2.0
"""Longest a single camera may take to open and deliver a frame, seconds."""


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="print JSON instead of tables (keys robots, serial_ports, cameras, gpus, gpu_usage, cpus; fleet with "
        "--fleet)",
    )
    parser.add_argument(
        "--fleet",
        type=Path,
        metavar="FILE",
        help="fleet file (TOML, see examples/fleet.toml) to validate and show with its roles",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="with --fleet: exit 2 if a declared serial port or camera device is missing on this machine",
    )
    parser.add_argument(
        "--max-cameras",
        type=_non_negative,
        default=4,
        metavar="N",
        help=f"probe at most N video devices, {CAMERA_BUDGET_S:g} s each at most "
        "(0 skips cameras; default: %(default)s)",
    )


def _table(title: str, headers: tuple[str, ...], rows: list[tuple]) -> str:
    """`title` and left-aligned columns, or "title: none" without rows."""
    if not rows:
        return f"{title}: none"
    cells = [tuple(map(str, row)) for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join([title, *lines])


def _mib(value: float | None) -> str:
    return "?" if value is None else f"{value / 1024:.1f} GiB"


def gpu_usage(found: Discovery) -> list[dict[str, Any]]:
    """Each CUDA GPU torch sees: `index`, `name` and its `GpuHealth` (memory in use and total,
    MiB, of the whole GPU, this command's own CUDA context included; utilisation, %, None
    without nvidia-ml-py), from `robotrl.policies.device.gpu_health`. [] when discovery found
    no NVIDIA GPU (torch is then not imported) or torch sees no CUDA device."""
    if not found.gpus:
        return []
    try:
        import torch

        from robotrl.policies.device import gpu_health
    except ImportError:  # a robot computer without torch
        return []
    if not torch.cuda.is_available():
        return []
    return [
        {"index": i, "name": torch.cuda.get_device_name(i), **gpu_health(f"cuda:{i}")}
        for i in range(torch.cuda.device_count())
    ]


def format_gpus(gpus: tuple[GpuInfo, ...], usage: list[dict[str, Any]]) -> str:
    """The GPU table: from torch's measurements (`gpu_usage`) when there are any, else what
    nvidia-smi said; one line when this machine has no CUDA GPU."""
    if usage:
        rows = [
            (
                u["index"],
                u["name"],
                f"{_mib(u['memory_used_mb'])} of {_mib(u['memory_total_mb'])}",
                "?" if u["utilization_pct"] is None else f"{u['utilization_pct']:.0f}%",
            )
            for u in usage
        ]
        return _table("GPUs", ("index", "name", "memory in use", "utilisation"), rows)
    if not gpus:
        return "GPUs: no CUDA GPU"
    table = _table("GPUs", ("index", "name", "memory"), [(g.index, g.name, _mib(g.memory_mib)) for g in gpus])
    return table + "\n  (torch sees no CUDA GPU: memory in use and utilisation unknown)"


def format_discovery(found: Discovery, usage: list[dict[str, Any]] | None = None) -> str:
    """Readable tables of everything `discover` found, the GPUs with `usage` (`gpu_usage`)."""
    return "\n\n".join(
        [
            _table(
                "serial ports",
                ("device", "motor bus", "vid:pid", "description", "by-id"),
                [
                    (
                        p.device,
                        "likely" if p.likely_motor_bus else "no",
                        p.vid_pid or "-",
                        p.description or "-",
                        p.by_id or "-",
                    )
                    for p in found.serial_ports
                ],
            ),
            _table(
                "cameras",
                ("index", "path", "size", "fps"),
                [(c.index, c.path or "-", f"{c.width_px}x{c.height_px}", f"{c.fps:g}") for c in found.cameras],
            ),
            _table(
                "sim robots", ("name", "joints", "driver"), [(r.name, r.num_joints, r.driver) for r in found.robots]
            ),
            format_gpus(found.gpus, usage or []),
            _table(
                "CPUs",
                ("model", "cores", "usable", "memory"),
                [(c.model, c.logical_cores, c.usable_cores, _mib(c.memory_mib)) for c in found.cpus],
            ),
        ]
    )


def format_fleet(fleet: Fleet) -> str:
    """Readable tables of a fleet's entries and which entries serve each role."""
    return "\n\n".join(
        [
            f"fleet {fleet.source}",
            _table(
                "robots",
                ("name", "model", "driver", "port", "id", "roles"),
                [
                    (r.name, r.model, r.driver, r.port or "-", r.calibration_id or "-", ", ".join(r.roles))
                    for r in fleet.robots
                ],
            ),
            _table(
                "cameras",
                ("name", "device", "size", "fps", "robot"),
                [(c.name, c.device, f"{c.width_px}x{c.height_px}", c.fps, c.robot or "-") for c in fleet.cameras],
            ),
            _table(
                "gpus",
                ("name", "host", "index", "roles"),
                [(g.name, g.host, g.index, ", ".join(g.roles)) for g in fleet.gpus],
            ),
            _table(
                "roles",
                ("role", "served by"),
                [(role, ", ".join(names) or "nobody") for role, names in fleet.assignments().items()],
            ),
        ]
    )


def run(args: argparse.Namespace) -> int:
    if args.check and args.fleet is None:
        raise UserError("--check needs --fleet FILE (the devices to check for)")
    fleet = load_fleet(args.fleet) if args.fleet is not None else None
    if args.check:
        assert fleet is not None  # --check without --fleet was refused above
        problems = check_devices(fleet)
        if problems:
            raise DeviceNotConnected(f"{fleet.source}: " + "; ".join(problems))
    found = discover(max_cameras=args.max_cameras, camera_budget_s=CAMERA_BUDGET_S)
    usage = gpu_usage(found)
    if args.json:
        data: dict[str, Any] = {**found.to_dict(), "gpu_usage": usage}
        if fleet is not None:
            data["fleet"] = fleet.to_dict()
        print(json.dumps(data, indent=2))
        return 0
    print(format_discovery(found, usage))
    if fleet is not None:
        print()
        print(format_fleet(fleet))
    if args.check:
        print("\ncheck: every declared serial port and camera device is present")
    return 0
