"""Static checks on a submission's syntax tree, run before any of its code executes.

`run_static_checks(source)` parses the module once and runs every check in `STATIC_CHECKS` (all of
them, in order, so the model sees every rule it broke); `first_failure(checks)` picks the one the
verdict reports. A source that does not parse yields only the failed `parses` check (the evaluator
maps it to compile_error). Each check is a named function with a one-line rationale naming the hack
it blocks, and its `why` names the construct and line number, because the model reads it.

Names are resolved through every import alias and simple assignment (`import torch as T`,
`from torch.nn import functional`, `act = getattr(T, "relu")`, `self.f = F`), and attribute chains
are judged by every prefix, so `torch.nn.functional.relu.__call__` and `torch.ops.aten.relu` are
caught like `torch.relu`. Imports follow an allow-list; torch calls follow an allow-list
(allocation, shape and device queries); tensor methods follow a deny-list of compute names.

Every name chain is also judged for what it *reaches*, whatever it is called: a module off the
import allow-list held as an attribute of an allowed one (`typing.sys`, `torch.nn.functional.np`,
`tl.core.builtins`: a table of the re-exports in torch/triton/stdlib, plus the rule that an attribute
named like a forbidden module is refused on any object), a private member of an allowed module or a
raw registry (`torch._ops`, `torch.ops`, `torch.library`), an interpreter probe (`triton.knobs`,
`os.environ`, kernel-object introspection), a per-process draw (`hash`, `id`, `random`, clocks,
`object()` addresses), or a string evaluator (`typing.get_type_hints`). A module used as a value (in
a container, as an argument) is refused, since no chain through it can be resolved; a name bound to
several things is judged through each binding. `bounded_source` runs first: over 200 kB, 50,000
nodes or depth 100 nothing else runs (static_rejected), and the parser's RecursionError/MemoryError
never leave `pysource.parse` as anything but a SyntaxError. The analysis is linear in the node count.

Under the Triton interpreter a @triton.jit body is plain Python executed during the launch, so
`pure_triton_kernels` also keeps kernel bodies from reading mutable module state or calling PyTorch
tensor methods (on a GPU, Triton's compiler refuses both anyway).

What it does not do: it cannot see types, so arithmetic operators on tensors (`x * (x > 0)`),
builtins applied to tensors (`abs(x)`, `sum(x)`) and caching keyed on `data_ptr()` pass here; the
worker's dispatch allow-list, launch counter and the judge's fresh-input checks catch those at run
time. Per-process draws it cannot name (set iteration order of strings, `data_ptr()`, function reprs)
and branches on `x.device.type` pass here too: judging again in a fresh process is the defence.
Frames, generators, class-pattern attribute reads and coding cookies are checked in `static/escapes.py`
(red team F1/F2); a chain through a re-exported module (`torch.nn.init.torch.relu`) is also judged as
the module it stands for (`static/reexports.py`, red team a05).
Code under `if __name__ == "__main__":` is checked like the rest (test harnesses that call
torch ops are rejected; the prompt asks for no testing code). Static checks narrow the attack
surface; they are not the sandbox.

This module holds the order the checks run in, the runner and the size bound (`bounded_source`);
the checks themselves live by kind: `static/kernel_checks.py` (ModelNew, its kernel and launch, no
PyTorch compute), `static/harness_checks.py` (what a submission may import, call or reach),
`static/escapes.py` (frames, generators, class patterns, coding cookies). Beneath them,
`static/analysis.py` resolves names, `static/tables.py` holds the allow- and deny-lists,
`static/rules.py` maps a resolved name to the checks it breaks, and `static/reexports.py` the
canonical forms of re-exported modules.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from kernelflow.eval.static.escapes import (  # frames, generators, class patterns, coding cookies (F1, F2)
    check_no_frame_introspection,
    check_no_generators,
    check_no_pattern_attribute_reads,
    check_source_encoding,
)
from kernelflow.eval.static.harness_checks import (  # imports, builtins, dunders, streams, timers, internals, ...
    check_no_cuda_streams,
    check_no_dangerous_builtins,
    check_no_escape_dunders,
    check_no_forbidden_imports,
    check_no_forbidden_modules,
    check_no_interpreter_detection,
    check_no_module_patching,
    check_no_nondeterminism,
    check_no_tensor_subclass,
    check_no_timers,
    check_no_torch_internals,
)
from kernelflow.eval.static.kernel_checks import (  # ModelNew, its kernel and launch, no PyTorch compute
    check_defines_model_new,
    check_has_triton_kernel,
    check_launches_kernel,
    check_no_reference_model,
    check_no_torch_compile,
    check_no_torch_compute,
    check_no_torch_layers,
    check_no_try_except,
    check_pure_triton_kernels,
)
from kernelflow.eval.static.kernel_language import check_kernel_language  # @triton.jit bodies
from kernelflow.eval.static.language import check_language
from kernelflow.eval.verdict import Check
from kernelflow.tasks import pysource

MAX_AST_NODES = 50_000  # the suite's largest honest solution has ~3,000
MAX_AST_DEPTH = 100  # its deepest nests 16; every recursive helper of the checks stays far from Python's limit
_BOUNDS_HINT = "no Triton kernel needs that; write plain, shallow code"


def check_submission_language(tree: ast.Module, source: str) -> Check:
    # Rationale: host code is an allow-listed grammar (static/language.py), so unnamed tricks are refused too.
    return check_language(tree, source, allowed_ops_of(tree))


def allowed_ops_of(tree: ast.Module) -> tuple[str, ...]:
    """The task's allowed library ops (`Task.allowed_ops`) that `run_static_checks` set on this tree."""
    return tuple(getattr(tree, "_kernelflow_allowed_ops", ()))


def check_bounded_source(tree: ast.Module, source: str) -> Check:
    # Rationale: a million-term expression or deep nesting blows the analysis' recursion or makes it slow.
    stack, nodes, deepest = [(tree, 1, 1)], 0, 0
    while stack:  # iterative: the tree may be as deep as the parser allowed
        node, depth, line = stack.pop()
        line = getattr(node, "lineno", line)
        nodes += 1
        deepest = max(deepest, depth)
        if nodes > MAX_AST_NODES or deepest > MAX_AST_DEPTH:
            what = f"more than {MAX_AST_NODES:,} syntax nodes" if nodes > MAX_AST_NODES else \
                f"expressions nested more than {MAX_AST_DEPTH} deep"
            return Check(False, f"line {line}: the source has {what}; {_BOUNDS_HINT}")
        stack.extend((child, depth + 1, line) for child in ast.iter_child_nodes(node))
    return Check(True, f"{nodes} nodes, depth {deepest}")


STATIC_CHECKS: list[tuple[str, Callable[[ast.Module, str], Check]]] = [
    ("bounded_source", check_bounded_source),  # first: the others assume a tree of bounded depth and size
    ("source_encoding", check_source_encoding),  # next: under another codec the rest judged a different program
    # The allow-list runs before the deny-list, so its refusal (the principle) is what the verdict reports;
    # the deny-list checks after it stay as a second layer.
    ("submission_language", check_submission_language),
    ("kernel_language", check_kernel_language),  # the allow-list for @triton.jit bodies (red team round 2a)
    ("defines_model_new", check_defines_model_new),
    ("has_triton_kernel", check_has_triton_kernel),
    ("launches_kernel", check_launches_kernel),
    ("no_reference_model", check_no_reference_model),
    ("no_torch_compute", check_no_torch_compute),
    ("no_torch_layers", check_no_torch_layers),
    ("pure_triton_kernels", check_pure_triton_kernels),
    ("no_try_except", check_no_try_except),
    ("no_cuda_streams", check_no_cuda_streams),
    ("no_timers", check_no_timers),
    ("no_module_patching", check_no_module_patching),
    ("no_tensor_subclass", check_no_tensor_subclass),
    ("no_torch_compile", check_no_torch_compile),
    ("no_forbidden_imports", check_no_forbidden_imports),
    ("no_dangerous_builtins", check_no_dangerous_builtins),
    ("no_escape_dunders", check_no_escape_dunders),
    ("no_frame_introspection", check_no_frame_introspection),
    ("no_generators", check_no_generators),
    ("no_pattern_attribute_reads", check_no_pattern_attribute_reads),
    ("no_forbidden_modules", check_no_forbidden_modules),
    ("no_torch_internals", check_no_torch_internals),
    ("no_interpreter_detection", check_no_interpreter_detection),
    ("no_nondeterminism", check_no_nondeterminism),
]


def run_static_checks(source: str, allowed_ops: tuple[str, ...] = ()) -> dict[str, Check]:
    """Every static check on `source`, in `STATIC_CHECKS` order, after `parses` (see the module docstring).

    `allowed_ops` are the task's library ops that stay allowed (`Task.allowed_ops`, qualified names such
    as `torch.nn.functional.conv2d`): the language accepts calls to them and the deny-list skips them.

    A source too large or too deep to judge fails `bounded_source` (static_rejected) and nothing else
    runs; a genuine SyntaxError fails `parses` (compile_error). A check that raises fails closed: the
    submission is rejected with the analysis error, never run. Nothing a submission holds escapes here.
    """
    try:
        tree = pysource.parse(source)
    except pysource.SourceTooComplex as exc:
        return {"bounded_source": Check(False, f"{exc.msg}; {_BOUNDS_HINT}")}
    except SyntaxError as exc:
        where = f"line {exc.lineno}, column {exc.offset}: " if exc.lineno else ""
        return {"parses": Check(False, f"{where}SyntaxError: {exc.msg}")}
    checks = {"parses": Check(True)}
    tree._kernelflow_allowed_ops = tuple(allowed_ops)  # read by the language check and the deny-list's analysis
    for name, fn in STATIC_CHECKS:
        try:
            checks[name] = fn(tree, source)
        except RecursionError:
            checks[name] = Check(False, "the code is nested too deeply to analyse; simplify it")
        except Exception as exc:  # noqa: BLE001 - a bug in a check must not let code through unchecked
            checks[name] = Check(False, f"static check could not analyse the code: {type(exc).__name__}: {exc}")
        if name == "bounded_source" and not checks[name].passed:
            break  # the other checks are linear, but only on a tree of bounded depth and size
    return checks


def first_failure(checks: dict[str, Check]) -> tuple[str, Check] | None:
    """The first failed check in order, or None when all passed."""
    return next(((name, c) for name, c in checks.items() if not c.passed), None)
