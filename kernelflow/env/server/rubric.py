"""The step reward as an OpenEnv Rubric: the evaluator's reward, passed through unchanged.

The reward formula lives only in `kernelflow.eval.reward.compute_reward`; the evaluator applies it
when it builds a verdict, and this rubric reads that number off the verdict carried in the
observation. It never recomputes or reshapes the reward, so training, baselines and held-out
evaluation all see the same value. Wrapping it in a Rubric keeps OpenEnv's introspection
(`env.rubric.last_score`, hooks) available to anyone composing rewards on top.
"""

from __future__ import annotations

import math
from typing import Any

from openenv.core.rubrics import Rubric


class VerdictRewardRubric(Rubric):
    """reward(action, observation) = the verdict's reward (computed by kernelflow.eval.compute_reward)."""

    def forward(self, action: Any, observation: Any) -> float:
        verdict = getattr(observation, "verdict", None)
        if not isinstance(verdict, dict) or "reward" not in verdict:
            raise ValueError("the observation carries no verdict with a reward; the rubric only scores judged steps")
        reward = float(verdict["reward"])
        if not math.isfinite(reward):
            raise ValueError(f"the verdict's reward {verdict['reward']!r} is not a finite number")
        return reward
