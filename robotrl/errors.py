"""Errors the CLI reports as one line and a non-zero exit, without a traceback."""

from robotrl.hardware.errors import ConfigError, DeviceNotConnected, SafetyTrip
from robotrl.wire.errors import WireError


class UserError(Exception):
    """Bad input from the user (arguments, files, devices); the message says what to fix."""


USER_ERRORS = (UserError, ConfigError, DeviceNotConnected, SafetyTrip, WireError, FileNotFoundError)
"""Errors the CLI prints as one line (exit 2): bad input, unreachable devices or peers."""
