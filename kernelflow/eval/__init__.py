"""The evaluator: one honest, repeatable verdict per submitted kernel, whatever the kernel does.

Public API:
    evaluate(task, answer, config) -> Verdict      one-off judgement
    Evaluator(config).evaluate(task, answer, seed=, shape=)   reusable, thread-safe, bounded pool
    make_evaluator(kind, config, ray) -> Evaluator | RayEvaluator   "local" or "ray" (Ray imported only then)
    EvalConfig, RayConfig, RewardConfig, Verdict, Check, Status, compute_reward, config_hash, EVALUATOR_VERSION
    EVAL_BACKENDS, IsolationError, check_minimum (the server refuses to serve below eval.min_isolation)

Other layers import only these names from `kernelflow.eval` (an import-linter contract in pyproject.toml
checks that `kernelflow.env` reaches no submodule); the submodules are this package's internals.

Layers: imports kernelflow.tasks, torch, triton, numpy and the standard library only.

The evaluator itself (`Evaluator`, `evaluate`, `resolve_backend`, `EVALUATOR_VERSION`) is imported
on first use, so the settings and verdict types stay importable without torch: composing an
experiment config (flows/config.py) then takes a fraction of a second, not the ~3 s of torch.
"""

from kernelflow.eval.cluster.ray_config import RayConfig
from kernelflow.eval.config import EvalConfig, RewardConfig, config_hash
from kernelflow.eval.evaluators import EVAL_BACKENDS, make_evaluator
from kernelflow.eval.reward import compute_reward, roofline_fraction
from kernelflow.eval.sandbox.policy import IsolationError, check_minimum
from kernelflow.eval.verdict import Check, Status, Verdict, WallTime, code_sha256

__all__ = [
    "EVAL_BACKENDS",
    "EVALUATOR_VERSION",
    "Check",
    "EvalConfig",
    "Evaluator",
    "IsolationError",
    "RayConfig",
    "RewardConfig",
    "Status",
    "Verdict",
    "WallTime",
    "check_minimum",
    "code_sha256",
    "compute_reward",
    "config_hash",
    "evaluate",
    "make_evaluator",
    "resolve_backend",
    "roofline_fraction",
]

_LAZY = {name: "kernelflow.eval.evaluator" for name in ("EVALUATOR_VERSION", "Evaluator", "evaluate", "resolve_backend")}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kernelflow.eval' has no attribute {name!r}")
