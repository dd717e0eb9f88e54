"""The task suite: KernelBench-format reference modules with evaluation metadata, and prompts.

Public API: `Task`, `get_task`, `unknown_task_message` ("did you mean"), `task_ids`, `TASKS`, `GROUPS`,
`suite_hash`, `generate_input`, `generate_inputs`, the check distributions (`TRANSFORM_NAMES`,
`Task.check_distributions`, `distribution_for_call`), `build_messages`, `build_prompt_text`, `feedback_message`,
`extract_code`, and the second-tier suite (`families.py`): `FAMILY_TASKS`, `FAMILY_GROUPS`, `FAMILY_ROLES`,
`family_task_ids`, `families_hash`.
This layer imports only the standard library and torch. The input generators (`inputs.py`, the
only module here that needs torch at import) are imported on first use, so the task metadata is
importable without torch (composing an experiment config needs only that).
"""

from kernelflow.tasks.families import FAMILY_GROUPS, FAMILY_ROLES, FAMILY_TASKS, families_hash, family_task_ids
from kernelflow.tasks.prompts import (
    build_messages,
    build_prompt_text,
    extract_code,
    feedback_message,
)
from kernelflow.tasks.spec import (
    DISTRIBUTIONS,
    KERNELBENCH_REVISION,
    KERNELBENCH_TOLERANCE,
    SHAPE_PROFILES,
    TRANSFORM_NAMES,
    ShapeProfile,
    Task,
    Tolerance,
    distribution_for_call,
)
from kernelflow.tasks.suite import (
    GROUPS,
    TASK_LIST_HINT,
    TASKS,
    get_task,
    suite_hash,
    task_ids,
    unknown_task_message,
)

__all__ = [
    "DISTRIBUTIONS",
    "FAMILY_GROUPS",
    "FAMILY_ROLES",
    "FAMILY_TASKS",
    "GROUPS",
    "KERNELBENCH_REVISION",
    "KERNELBENCH_TOLERANCE",
    "SHAPE_PROFILES",
    "TASKS",
    "TASK_LIST_HINT",
    "TRANSFORM_NAMES",
    "ShapeProfile",
    "Task",
    "Tolerance",
    "build_messages",
    "build_prompt_text",
    "distribution_for_call",
    "extract_code",
    "families_hash",
    "family_task_ids",
    "feedback_message",
    "generate_input",
    "generate_inputs",
    "input_seed",
    "split_distribution",
    "get_task",
    "suite_hash",
    "task_ids",
    "unknown_task_message",
]

_LAZY = {name: "kernelflow.tasks.inputs" for name in ("generate_input", "generate_inputs", "input_seed", "split_distribution")}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kernelflow.tasks' has no attribute {name!r}")
