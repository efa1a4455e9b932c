"""Typed errors of the hardware layer; each message says what to do next."""


class HardwareError(RuntimeError):
    """Base class for hardware-layer errors."""


class DeviceNotConnected(HardwareError):
    """A device was used before `connect()` or could not be reached."""


class SafetyTrip(HardwareError):
    """The e-stop latch is set; the arm was told to hold before this was raised."""


class ConfigError(HardwareError, ValueError):
    """A configuration (fleet file, robot name, limits) is invalid; names the field."""
