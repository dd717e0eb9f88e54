"""Access to the honest Triton solutions in `tests/fixtures/solutions/`, the suite's positive controls.

The solution files are data, not a package (there is no `__init__.py` beside them): they are
submissions in the format a model writes, so tests read their text or import them by path, each
import under a fresh module name so two imports never share module state (e.g. BLOCK_SIZE).
Importing one defines `@triton.jit` kernels, so on a CPU-only host TRITON_INTERPRET must already be
set (tests/conftest.py sets it); this module does not set it.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

SOLUTIONS_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "solutions"
_counter = itertools.count()


def solution_path(task_id: str) -> Path:
    """The honest solution file of `task_id`; FileNotFoundError names the folder when there is none."""
    path = SOLUTIONS_DIR / f"{task_id}.py"
    if not path.is_file():
        path = SOLUTIONS_DIR / "families" / f"{task_id}.py"  # the second-tier suite's controls
    if not path.is_file():
        raise FileNotFoundError(f"no honest solution for task {task_id!r}: expected {SOLUTIONS_DIR}/[families/]{task_id}.py")
    return path


def solution_source(task_id: str) -> str:
    """The solution's text, exactly as it would be submitted."""
    return solution_path(task_id).read_text()


def load_solution_module(task_id: str) -> ModuleType:
    """Import the solution by path as a new module object (unique name per call)."""
    path = solution_path(task_id)
    name = f"kernelflow_test_solution_{task_id}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import solution file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # registered so inspect/pickle can find it by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
