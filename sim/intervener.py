"""`ScriptedIntervener`: the simulated human of human-in-the-loop runs (docs/algorithms.md
section 4).

The task's scripted expert runs alongside the policy, as a shadow that always plans from
where the arm is. When the policy's requested target drifts from where the expert wants
the end effector by more than `takeover_m`, or its gripper target disagrees with the
expert's by more than `takeover_gripper_rad` (closing in the air, opening while carrying:
what a person watching would stop), the expert takes over: its targets replace the
policy's rows (the executor flags those ticks as interventions) for at least `min_ticks`,
until the policy's request is back within `handback_m` and half the gripper threshold.
A per-episode budget of intervention ticks tapers linearly with the episode count (and
optionally with the recent success rate), so the help fades as the policy learns.

Simulation only: it reads the true joint state of the `TaskEnv`. Positions are metres
(robot base frame), angles radians, times control ticks.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from robotrl.core.robot import RobotState
from robotrl.hardware.kinematics import Kinematics
from robotrl.sim.env import TaskEnv


def budget_ticks(episode: int, initial_ticks: int, taper_episodes: int, recent_success_rate: float = 0.0) -> int:
    """Intervention ticks allowed in episode `episode` (0-based): `initial_ticks` falling
    linearly to 0 at `taper_episodes`, times (1 - `recent_success_rate`), rounded down.
    E.g. (25, 100, 50) -> 100 * (1 - 25/50) = 50; (10, 100, 50, 0.5) -> 100 * 0.8 * 0.5 = 40."""
    if initial_ticks < 0 or taper_episodes <= 0 or not 0.0 <= recent_success_rate <= 1.0:
        raise ValueError(
            f"need initial_ticks >= 0, taper_episodes > 0 and a success rate in [0, 1], got "
            f"{initial_ticks}, {taper_episodes}, {recent_success_rate}"
        )
    share = max(0.0, 1.0 - episode / taper_episodes) * (1.0 - recent_success_rate)
    return int(np.floor(initial_ticks * share + 1e-9))


class ScriptedIntervener:
    """An `Intervener` driven by the task's scripted expert (it reads the simulator's
    true joint state: sim only).

    Args:
        env: the `TaskEnv` (its expert, true joint state and arm model).
        takeover_m: end-effector distance between the policy's target and the expert's
            reference point above which the expert takes over.
        handback_m: distance below which it hands back (after `min_ticks`).
        takeover_gripper_rad: gripper target disagreement (radians) that also triggers a
            takeover; None: position only.
        min_ticks: shortest takeover.
        initial_budget_ticks: intervention ticks allowed in the first episode.
        taper_episodes: episodes over which the budget falls linearly to 0.
        taper_with_success: also scale the budget by (1 - success rate of the last
            `success_window` episodes).

    Attributes:
        episode: index of the current episode (0-based).
        budget: intervention ticks allowed in this episode.
        episode_takeovers, episode_ticks: takeovers and intervention ticks this episode.
        takeovers, intervention_ticks: totals over all episodes.
        drift_m, gripper_gap_rad: the last measured drift and gripper disagreement.
    """

    def __init__(
        self,
        env: TaskEnv,
        *,
        takeover_m: float = 0.06,
        handback_m: float = 0.02,
        takeover_gripper_rad: float | None = 0.5,
        min_ticks: int = 8,
        initial_budget_ticks: int = 150,
        taper_episodes: int = 100,
        taper_with_success: bool = False,
        success_window: int = 10,
    ) -> None:
        if not 0 < handback_m <= takeover_m:
            raise ValueError(f"need 0 < handback_m <= takeover_m, got {handback_m}, {takeover_m}")
        if takeover_gripper_rad is not None and takeover_gripper_rad <= 0:
            raise ValueError(f"takeover_gripper_rad must be > 0 (or None), got {takeover_gripper_rad}")
        if min_ticks < 1 or success_window < 1:
            raise ValueError(f"min_ticks={min_ticks} and success_window={success_window} must be >= 1")
        budget_ticks(0, initial_budget_ticks, taper_episodes)  # validates
        self.env = env
        self.kin = Kinematics(env.sim.arm)
        self.takeover_m, self.handback_m, self.min_ticks = takeover_m, handback_m, min_ticks
        self.takeover_gripper_rad = takeover_gripper_rad
        self.initial_budget_ticks, self.taper_episodes = initial_budget_ticks, taper_episodes
        self.taper_with_success = taper_with_success
        self.successes: deque[bool] = deque(maxlen=success_window)
        self.episode = 0
        self.budget = 0
        self.takeovers = self.intervention_ticks = 0
        self.episode_takeovers = self.episode_ticks = 0
        self.drift_m = self.gripper_gap_rad = 0.0
        self.active = False
        self.outcome: bool | None = None  # the simulated human never labels an episode
        self._held = 0
        self._expert = None

    def begin_episode(self, seed: int) -> None:
        """Start the shadow expert for the episode the env was just reset to."""
        self._expert = self.env.make_expert(seed)
        rate = float(np.mean(self.successes)) if self.taper_with_success and self.successes else 0.0
        self.budget = budget_ticks(self.episode, self.initial_budget_ticks, self.taper_episodes, rate)
        self.episode_takeovers = self.episode_ticks = 0
        self.active, self._held = False, 0

    def end_episode(self, success: bool) -> None:
        self.successes.append(bool(success))
        self.episode += 1
        self.active = False

    def __call__(self, tick: int, requested_rad: np.ndarray, state: RobotState) -> np.ndarray | None:
        """The expert's (J,) target when it drives this tick, else None (the policy's
        `requested_rad` (J,) goes to the arm). It plans from the true joint state, not
        the (noisy) reading `state`."""
        if self._expert is None:
            raise RuntimeError("call begin_episode(seed) after env.reset(seed) first")
        q = self.env.sim.q_true_rad
        if not self.active:  # the shadow plans from where the arm is
            self._expert.mover.reanchor_joints(q)
        target = np.asarray(self._expert.act(q), dtype=np.float64)
        self.drift_m = float(np.linalg.norm(self.kin.ee_position(requested_rad) - self._expert.mover.reference_m))
        self.gripper_gap_rad = float(abs(requested_rad[-1] - target[-1]))
        gripper_limit = np.inf if self.takeover_gripper_rad is None else self.takeover_gripper_rad
        if self.active:
            agrees = self.drift_m <= self.handback_m and self.gripper_gap_rad <= gripper_limit / 2
            if (self._held >= self.min_ticks and agrees) or self.episode_ticks >= self.budget:
                self.active = False
                return None
        elif (
            self.drift_m > self.takeover_m or self.gripper_gap_rad > gripper_limit
        ) and self.episode_ticks < self.budget:
            self.active, self._held = True, 0
            self.takeovers += 1
            self.episode_takeovers += 1
        else:
            return None
        self._held += 1
        self.episode_ticks += 1
        self.intervention_ticks += 1
        return target
