"""`SimServoBus`: Feetech STS3215 servos behind a pseudo-terminal, answering the protocol
lerobot's `FeetechMotorsBus` (and the Feetech SDK under it) speaks, and `write_calibration`,
lerobot's calibration file for such a bus.

Registers are raw: positions in encoder ticks, 0..4095 per turn (4096 ticks = 360 deg).
Only what lerobot's SO-100/101 drivers use is modelled: ping, read, write, sync read, sync
write on a 256-byte register file per servo (any other instruction gets an empty reply);
Present_Voltage and Present_Temperature hold constants (12.0 V, 35 C; `set_health` changes them).
"""

from __future__ import annotations

import json
import os
import pty
import select
import threading
import tty
from collections.abc import Mapping
from pathlib import Path

from robotrl.hardware.models import ARMS

READ, WRITE, SYNC_READ, SYNC_WRITE = 0x02, 0x03, 0x82, 0x83
"""Feetech protocol 0 instructions the bus answers with data (ping gets an empty reply)."""
MIN_LIMIT, MAX_LIMIT, TORQUE, GOAL, PRESENT = 9, 11, 40, 42, 56
"""STS3215 register addresses: Min/Max_Position_Limit, Torque_Enable, Goal/Present_Position."""
VOLTAGE, TEMPERATURE = 62, 63
"""STS3215 one-byte registers Present_Voltage (tenths of a volt) and Present_Temperature (deg C)."""
STS3215_MODEL = 777
"""Model_Number of an STS3215 (register 3)."""
VOLTAGE_DV = 120
"""Present_Voltage of every simulated servo: 12.0 V, a charged SO-101 supply."""
TEMPERATURE_C = 35
"""Present_Temperature of every simulated servo, degrees Celsius: warm, far from the 70 C limit."""

Ranges = Mapping[int, tuple[int, int]]
"""Servo id -> raw (range_min, range_max), encoder ticks."""


class SimServoBus:
    """Servos `ranges` (id -> raw (min, max) position limit) behind a pseudo-terminal `port`.

    Homing offsets are 0 and every servo starts at the middle of its range, torque off.
    Writing Torque_Enable = 1 to a servo that was off sets its goal to where it is (it holds
    there); from then on `commanded()` tells whether a Goal_Position write has come.

    Args:
        ranges: servo id -> raw (Min_Position_Limit, Max_Position_Limit).
        instant: a Goal_Position write moves Present_Position there at once, clamped to the
            limits (a test double for lerobot's driver). False: the goal only sits in its
            register; whoever simulates the arm reads `goal()` and writes `set_present()`.
    """

    def __init__(self, ranges: Ranges, *, instant: bool = True) -> None:
        self.instant = instant
        self._master, self._slave = pty.openpty()
        tty.setraw(self._slave)
        self.port = os.ttyname(self._slave)
        self.regs = {id_: bytearray(256) for id_ in ranges}
        self._commanded = dict.fromkeys(ranges, False)
        self._lock = threading.Lock()
        for id_, (low, high) in ranges.items():
            self._put(id_, 3, STS3215_MODEL)
            self.regs[id_][0:2] = bytes([3, 10])  # firmware 3.10
            self._put(id_, MIN_LIMIT, low)
            self._put(id_, MAX_LIMIT, high)
            self._put(id_, PRESENT, (low + high) // 2)
            self._put(id_, GOAL, (low + high) // 2)
            self.regs[id_][VOLTAGE], self.regs[id_][TEMPERATURE] = VOLTAGE_DV, TEMPERATURE_C
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"servo-bus {self.port}", daemon=True)
        self._thread.start()

    # -- what the simulated arm reads and writes -------------------------------------------
    def present(self, id_: int) -> int:
        """Present_Position of servo `id_`, raw ticks."""
        with self._lock:
            return self._get(id_, PRESENT)

    def goal(self, id_: int) -> int:
        """Goal_Position of servo `id_` clamped to its position limits (the firmware's
        clamp), raw ticks."""
        with self._lock:
            return min(max(self._get(id_, GOAL), self._get(id_, MIN_LIMIT)), self._get(id_, MAX_LIMIT))

    def torque_enabled(self, id_: int) -> bool:
        with self._lock:
            return self.regs[id_][TORQUE] != 0

    def commanded(self, id_: int) -> bool:
        """Has servo `id_` had a Goal_Position write since its torque last went on (and is
        the torque still on)?"""
        with self._lock:
            return self._commanded[id_]

    def set_present(self, positions: Mapping[int, int]) -> None:
        """Write Present_Position of several servos at once (no sync read sees half of it);
        values are clipped to 0..4095."""
        with self._lock:
            for id_, raw in positions.items():
                self._put(id_, PRESENT, min(max(int(raw), 0), 4095))

    def set_health(self, id_: int, *, temperature_c: int | None = None, voltage_dv: int | None = None) -> None:
        """Set servo `id_`'s Present_Temperature (deg C) and Present_Voltage (tenths of a volt)."""
        with self._lock:
            if temperature_c is not None:
                self.regs[id_][TEMPERATURE] = temperature_c
            if voltage_dv is not None:
                self.regs[id_][VOLTAGE] = voltage_dv

    # -- the protocol ----------------------------------------------------------------------
    def _get(self, id_: int, address: int) -> int:
        return int.from_bytes(self.regs[id_][address : address + 2], "little")

    def _put(self, id_: int, address: int, value: int) -> None:
        self.regs[id_][address : address + 2] = value.to_bytes(2, "little")

    def _write(self, id_: int, address: int, data: bytes) -> None:
        was_on = self.regs[id_][TORQUE] != 0
        self.regs[id_][address : address + len(data)] = data
        is_on, writes_goal = self.regs[id_][TORQUE] != 0, address <= GOAL < address + len(data)
        if is_on != was_on:
            self._commanded[id_] = False
            if is_on and not writes_goal:
                self._put(id_, GOAL, self._get(id_, PRESENT))
        elif is_on and writes_goal:
            self._commanded[id_] = True
        if self.instant and writes_goal:
            low, high = self._get(id_, MIN_LIMIT), self._get(id_, MAX_LIMIT)
            self._put(id_, PRESENT, min(max(self._get(id_, GOAL), low), high))

    def _reply(self, id_: int, params: bytes = b"") -> None:
        body = bytes([id_, len(params) + 2, 0]) + params
        os.write(self._master, b"\xff\xff" + body + bytes([~sum(body) & 0xFF]))

    def _serve(self) -> None:
        buffer = b""
        while not self._stop.is_set():
            if not select.select([self._master], [], [], 0.05)[0]:
                continue
            try:
                buffer += os.read(self._master, 1024)
            except OSError:  # closed under us
                return
            while (start := buffer.find(b"\xff\xff")) >= 0 and len(buffer) >= start + 4:
                end = start + 4 + buffer[start + 3]
                if len(buffer) < end:
                    break
                id_, instruction, params = buffer[start + 2], buffer[start + 4], buffer[start + 5 : end - 1]
                buffer = buffer[end:]
                with self._lock:
                    self._handle(id_, instruction, params)

    def _handle(self, id_: int, instruction: int, params: bytes) -> None:
        if instruction == SYNC_WRITE:
            size = params[1]
            for i in range(2, len(params), size + 1):
                if params[i] in self.regs:
                    self._write(params[i], params[0], params[i + 1 : i + 1 + size])
        elif instruction == SYNC_READ:
            for target in params[2:]:
                if target in self.regs:
                    self._reply(target, bytes(self.regs[target][params[0] : params[0] + params[1]]))
        elif id_ in self.regs:
            if instruction == WRITE:
                self._write(id_, params[0], params[1:])
            data = self.regs[id_][params[0] : params[0] + params[1]] if instruction == READ else b""
            self._reply(id_, bytes(data))

    def close(self) -> None:
        """Stop answering and close the terminal: the bus is gone."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(timeout=5)
            os.close(self._master)
            os.close(self._slave)


def write_calibration(folder: Path, robot_id: str, ranges: Ranges, model: str = "so101") -> Path:
    """Write lerobot's calibration file `folder/<robot_id>.json` for servos `ranges` (ids
    1..6 in `model`'s joint order, homing offset 0, drive mode 0); its path."""
    calibration = {
        name: {"id": id_, "drive_mode": 0, "homing_offset": 0, "range_min": ranges[id_][0], "range_max": ranges[id_][1]}
        for id_, name in enumerate(ARMS[model].joint_names, start=1)
    }
    path = Path(folder) / f"{robot_id}.json"
    path.write_text(json.dumps(calibration, indent=4))
    return path
