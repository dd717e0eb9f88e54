"""Discounted returns of a multi-turn episode: the only place they are computed.

    G_t = sum_{k >= t} gamma^(k - t) * r_k        (per turn, t = 1..T)
    episode return = G_1 = r_1 + gamma * r_2 + ...  (r_1 + 0.4 r_2 for the pilot's two turns)

The per-turn rewards come from the evaluator (through the environment's rubric); the returns travel to
the trainer in the final observation and the episode state, and the trainer turns them into
advantages without recomputing them. This module does not compute rewards or advantages.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def _check(rewards: Sequence[float], gamma: float) -> list[float]:
    if not 0.0 <= gamma <= 1.0 or not math.isfinite(gamma):
        raise ValueError(f"gamma={gamma} must be in [0, 1]")
    values = [float(r) for r in rewards]
    bad = [r for r in values if not math.isfinite(r)]
    if bad:
        raise ValueError(f"rewards must be finite numbers, got {bad} in {values}")
    return values


def per_turn_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """G_t for every turn t, computed backwards (G_T = r_T, G_t = r_t + gamma * G_{t+1})."""
    values = _check(rewards, gamma)
    returns = [0.0] * len(values)
    running = 0.0
    for t in range(len(values) - 1, -1, -1):
        running = values[t] + gamma * running
        returns[t] = running
    return returns


def episode_return(rewards: Sequence[float], gamma: float) -> float:
    """G_1, the discounted return of the whole episode (0.0 for an episode without turns)."""
    returns = per_turn_returns(rewards, gamma)
    return returns[0] if returns else 0.0
