"""The simulated arm: MuJoCo model built from the same URDF as the kinematics.
(`robotrl/__init__.py` selects the off-screen OpenGL backend before MuJoCo loads.)"""
