"""Errors the CLI reports as one line and a non-zero exit, without a traceback."""

from robotrl.hardware.errors import ConfigError, DeviceNotConnected, SafetyTrip


class UserError(Exception):
    """Bad input from the user (arguments, files, devices); the message says what to fix."""


USER_ERRORS = (UserError, ConfigError, DeviceNotConnected, SafetyTrip, FileNotFoundError)
