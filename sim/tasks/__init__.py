"""Task presets for the simulated arm."""

from __future__ import annotations

from robotrl.core.errors import ConfigError
from robotrl.sim.tasks.base import Task
from robotrl.sim.tasks.calibrate import CalibrateLensTask, CalibrateTask
from robotrl.sim.tasks.pick_place import PickPlaceTask
from robotrl.sim.tasks.reach import ReachTask
from robotrl.sim.tasks.track import TrackTask

TASKS: dict[str, type] = {
    "reach": ReachTask,
    "pick_place": PickPlaceTask,
    "track": TrackTask,
    "calibrate": CalibrateTask,
    "calibrate_lens": CalibrateLensTask,
}


def make_task(name: str) -> Task:
    try:
        return TASKS[name]()
    except KeyError:
        raise ConfigError(f"unknown task {name!r}; known: {', '.join(TASKS)}") from None
