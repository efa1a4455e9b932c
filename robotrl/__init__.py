"""robotrl: asynchronous learning stack for robot arms.

Subsystems: `robotrl.hardware`, `robotrl.policies`, `robotrl.inference`, `robotrl.sim`.

MuJoCo picks its OpenGL backend when it is first imported, so the only import-time
action of robotrl is to choose an off-screen one (EGL, else OSMesa) for any of its
modules that render, unless the user already set `MUJOCO_GL`.
"""

import ctypes.util as _ctypes_util
import os as _os

if "MUJOCO_GL" not in _os.environ:
    _os.environ["MUJOCO_GL"] = "egl" if _ctypes_util.find_library("EGL") else "osmesa"

__version__ = "0.1.0"
