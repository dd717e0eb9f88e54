"""The task suite: KernelBench-format reference modules with evaluation metadata, and prompts.

Public API: `Task`, `get_task`, `task_ids`, `TASKS`, `GROUPS`, `suite_hash`, `generate_input`,
`generate_inputs`, the check distributions (`TRANSFORM_NAMES`, `Task.check_distributions`,
`distribution_for_call`), `build_messages`, `build_prompt_text`, `feedback_message`, `extract_code`, and the second-tier suite
(`families.py`): `FAMILY_TASKS`, `FAMILY_GROUPS`, `FAMILY_ROLES`, `family_task_ids`, `families_hash`.
This layer imports only the standard library and torch.
"""

from kernelflow.tasks.families import FAMILY_GROUPS, FAMILY_ROLES, FAMILY_TASKS, families_hash, family_task_ids
from kernelflow.tasks.inputs import generate_input, generate_inputs, input_seed, split_distribution
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
from kernelflow.tasks.suite import GROUPS, TASKS, get_task, suite_hash, task_ids

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
]
