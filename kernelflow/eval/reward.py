"""The reward: the only place the formula lives.

    reward = 0                                                  if the kernel is not correct
    reward = correct_bonus + speed_weight * min(t_min / t_kernel, 1)   otherwise

With no timing (the interpreter backend) the speed term is 0, so a correct kernel earns
`correct_bonus`. Training, baseline, held-out and seed validation all reach this function through
the evaluator's verdicts; nothing else may compute a reward.
"""

from __future__ import annotations

import math

from kernelflow.eval.config import RewardConfig


def roofline_fraction(t_min_ms: float | None, runtime_ms: float | None) -> float | None:
    """t_min / t_kernel capped at 1, or None when either time is missing."""
    if t_min_ms is None or runtime_ms is None or runtime_ms <= 0 or not math.isfinite(runtime_ms):
        return None
    return min(t_min_ms / runtime_ms, 1.0)


def compute_reward(
    correct: bool,
    t_min_ms: float | None,
    runtime_ms: float | None,
    config: RewardConfig | None = None,
) -> float:
    """The reward of one verdict (see the module docstring)."""
    config = config or RewardConfig()
    if not correct:
        return 0.0
    fraction = roofline_fraction(t_min_ms, runtime_ms)
    speed = 0.0 if fraction is None else fraction
    return config.correct_bonus + config.speed_weight * speed
