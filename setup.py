"""Maps the top-level subsystem folders to `robotrl.<folder>` import packages.

`hardware`, `policies`, `inference` and `sim` are names other PyPI projects own, so they
are only ever importable as `robotrl.hardware` etc. Everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

SUBSYSTEMS = ("hardware", "policies", "inference", "sim")

packages = find_packages(include=["robotrl", "robotrl.*"])
package_dir = {"robotrl": "robotrl"}
for folder in SUBSYSTEMS:
    name = f"robotrl.{folder}"
    package_dir[name] = folder
    packages += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir=package_dir)
