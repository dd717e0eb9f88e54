"""Which evaluator judges: this host's bounded worker pool, or evaluation actors on a Ray cluster.

`make_evaluator(kind, config, ray)` is the one way in from outside the evaluator (the environment
server builds its judge with it), so callers never import `evaluator.py` or `cluster/ray_backend.py` by
name. Ray is imported only when `kind` is "ray" (the `ray` extra); "local" needs nothing beyond the
evaluator itself. This module does not judge anything; it only picks and builds the judge.
"""

from __future__ import annotations

from typing import Any

from kernelflow.eval.cluster.ray_config import RayConfig
from kernelflow.eval.config import EvalConfig

EVAL_BACKENDS = ("local", "ray")  # "local": Evaluator (this host's pool); "ray": RayEvaluator (actors on a cluster)


def make_evaluator(kind: str, config: EvalConfig, ray: RayConfig | None = None) -> Any:
    """An `Evaluator` (kind "local") or a `RayEvaluator` (kind "ray", set up by `ray`; default RayConfig()).

    Both answer `evaluate(task_id, answer, seed=, shape=)`, `info()` and `close()` with the same
    verdicts and configuration hash.
    """
    if kind == "ray":
        from kernelflow.eval.cluster.ray_backend import RayEvaluator  # imports Ray lazily itself; only on this path

        return RayEvaluator(config, ray if ray is not None else RayConfig())
    if kind == "local":
        from kernelflow.eval.evaluator import Evaluator

        return Evaluator(config)
    raise ValueError(f"unknown evaluator kind {kind!r}; choose one of {EVAL_BACKENDS} (env: eval_backend)")
