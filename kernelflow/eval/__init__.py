"""The evaluator: one honest, repeatable verdict per submitted kernel, whatever the kernel does.

Public API:
    evaluate(task, answer, config) -> Verdict      one-off judgement
    Evaluator(config).evaluate(task, answer, seed=, shape=)   reusable, thread-safe, bounded pool
    EvalConfig, RewardConfig, Verdict, Check, Status, compute_reward, config_hash, EVALUATOR_VERSION

Layers: imports kernelflow.tasks, torch, triton, numpy and the standard library only.
"""

from kernelflow.eval.config import EvalConfig, RewardConfig, config_hash
from kernelflow.eval.evaluator import EVALUATOR_VERSION, Evaluator, evaluate, resolve_backend
from kernelflow.eval.reward import compute_reward, roofline_fraction
from kernelflow.eval.verdict import Check, Status, Verdict, WallTime, code_sha256

__all__ = [
    "EVALUATOR_VERSION",
    "Check",
    "EvalConfig",
    "Evaluator",
    "RewardConfig",
    "Status",
    "Verdict",
    "WallTime",
    "code_sha256",
    "compute_reward",
    "config_hash",
    "evaluate",
    "resolve_backend",
    "roofline_fraction",
]
