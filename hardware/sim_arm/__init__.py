"""The simulated arm: MuJoCo model built from the same URDF as the kinematics.

Importing this package picks an off-screen OpenGL backend for MuJoCo (EGL, falling back
to OSMesa) unless the user already set `MUJOCO_GL`; it must happen before `mujoco` loads.
"""

import ctypes.util
import os

if "MUJOCO_GL" not in os.environ:
    os.environ["MUJOCO_GL"] = "egl" if ctypes.util.find_library("EGL") else "osmesa"
