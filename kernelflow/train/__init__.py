"""The trainer: multi-turn GRPO (Dr. GRPO or TRLOO) with a LoRA adapter, against the kernel environment.

Public API (what the flows layer calls):
- settings: `TrainerConfig`, `PolicyConfig`, `LoraSettings`, `TinyModelConfig`, `SampledEvalSettings`, `plan`;
- the policy: `load_policy`, `Policy`, `build_tiny_model`;
- the loop: `GRPOLoop` (`train_epoch`, `greedy_evaluate`, `save_checkpoint`, `load_checkpoint`),
  its records `UpdateMetrics` and `TaskEvalResult`, and `CheckpointInfo`;
- pure pieces for tests and analysis: `dr_grpo`, `trloo`, `estimate`, `Advantages`.

This layer imports the environment client, the task prompts, torch, transformers and peft; it never
imports the evaluator, the flows, Prefect, Hydra or MLflow. Submodules that need transformers import
it lazily, so `import kernelflow.train` and `plan(...)` stay cheap.
"""

from kernelflow.train.advantages import Advantages, dr_grpo, estimate, trloo
from kernelflow.train.config import (
    LoraSettings,
    PolicyConfig,
    SampledEvalSettings,
    TinyModelConfig,
    TrainerConfig,
    plan,
)

__all__ = [
    "Advantages",
    "CheckpointInfo",
    "GRPOLoop",
    "LoraSettings",
    "Policy",
    "PolicyConfig",
    "SampledEvalSettings",
    "TaskEvalResult",
    "TinyModelConfig",
    "TrainerConfig",
    "UpdateMetrics",
    "build_tiny_model",
    "dr_grpo",
    "estimate",
    "load_policy",
    "plan",
    "trloo",
]

_LAZY = {
    "CheckpointInfo": "kernelflow.train.checkpoint",
    "GRPOLoop": "kernelflow.train.trainer",
    "Policy": "kernelflow.train.policy",
    "TaskEvalResult": "kernelflow.train.evaluation",
    "UpdateMetrics": "kernelflow.train.metrics",
    "build_tiny_model": "kernelflow.train.tiny",
    "load_policy": "kernelflow.train.policy",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kernelflow.train' has no attribute {name!r}")
