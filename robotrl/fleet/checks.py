"""The vocabulary of a fleet file (roles, drivers, algorithms) and the field checks its
entries share; each check names the bad field by its path in the file."""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import NoReturn

from robotrl.core.devices import check_device
from robotrl.core.errors import ConfigError

ROLES = ("recorder", "deploy_client", "actor", "inference_server", "learner")
ROBOT_ROLES = ("recorder", "deploy_client", "actor")
"""deploy_client: runs a policy on the arm through the server; actor: the same, streaming
every tick to the fleet's learner (`robotrl actor`); recorder: teleop data collection."""
ARM_ROLES = ("deploy_client", "actor")
"""The robot roles `robotrl up` starts (one process per robot)."""
GPU_ROLES = ("inference_server", "learner")
DRIVERS = ("lerobot", "sim", "twin")
"""lerobot: a real arm; sim: the MuJoCo arm in-process; twin: the MuJoCo arm behind simulated
motor buses and cameras (`robotrl twin`), driven through lerobot like a real arm."""
ALGORITHMS = ("sac", "hil-flow", "dsrl")
"""The learners of `robotrl.learn.registry.ALGORITHMS` (named here so that reading a fleet
file does not import torch; a test keeps the two equal)."""
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
"""Host names that always mean this machine (besides its own name)."""


def _fail(path: str, message: str) -> NoReturn:
    raise ConfigError(f"{path}: {message}")


def _entry(cls: type, at: str, table: object, **extra: object):
    """The table at path `at` as a `cls`; unknown and missing keys are errors."""
    if not isinstance(table, dict):
        _fail(at, f"expected a table [{at}], got {table!r}")
    keys = cls.TOML_KEYS
    for key in table:
        if key not in keys:
            _fail(f"{at}.{key}", f"unknown key (known: {', '.join(keys)})")
    for key, attr in keys.items():
        spec = next(f for f in fields(cls) if f.name == attr)
        if spec.default is MISSING and spec.default_factory is MISSING and key not in table:
            _fail(f"{at}.{key}", "missing")
    return cls(**extra, **{keys[key]: value for key, value in table.items()})


def _expect(path: str, value: object, kind: type, what: str) -> None:
    """Fail unless `value` is a `kind` (TOML booleans never pass as integers)."""
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        _fail(path, f"expected {what}, got {value!r}")


def _count(path: str, value: object, minimum: int) -> None:
    _expect(path, value, int, "an integer")
    if isinstance(value, int) and value < minimum:  # _expect raised for anything but an int
        _fail(path, f"must be at least {minimum}, got {value}")


def _number(path: str, value: object) -> None:
    """Fail unless `value` is a number above 0 (an integer or a float, not a boolean)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(path, f"expected a number, got {value!r}")
    if not value > 0:  # also refuses NaN
        _fail(path, f"must be above 0, got {value}")


def _port(path: str, value: object) -> None:
    _count(path, value, 1)
    if isinstance(value, int) and value > 65535:
        _fail(path, f"a TCP port is at most 65535, got {value}")


def _device(path: str, value: object) -> None:
    _expect(path, value, str, "a device (auto, cpu, cuda or cuda:N)")
    try:
        check_device(str(value))
    except ConfigError as exc:
        _fail(path, str(exc))


def _optional(path: str, value: object, kind: type, what: str) -> None:
    if value is not None:
        _expect(path, value, kind, what)
        if kind is str and not value:
            _fail(path, "must not be empty")


def _roles(path: str, value: object, allowed: tuple[str, ...], kind: str) -> tuple[str, ...]:
    """Checked roles as a tuple; `allowed` are the roles an entry of this `kind` can serve."""
    if not isinstance(value, (list, tuple)) or not value:
        _fail(path, f"expected a non-empty array of roles, e.g. {list(allowed)}")
    for i, role in enumerate(value):
        _expect(f"{path}[{i}]", role, str, "a role name")
        if role not in ROLES:
            _fail(f"{path}[{i}]", f"{role!r} is not a role ({', '.join(ROLES)})")
        if role not in allowed:
            _fail(f"{path}[{i}]", f"{role!r} is not a {kind} role ({', '.join(allowed)})")
        if role in value[:i]:
            _fail(f"{path}[{i}]", f"{role!r} is listed twice")
        if role in ARM_ROLES and any(other in ARM_ROLES for other in value[:i]):
            _fail(f"{path}[{i}]", "'deploy_client' and 'actor' both run the arm: give one of them")
    return tuple(value)
