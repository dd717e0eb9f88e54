"""Which static check a resolved name breaks, and the findings a check reports.

`classify` and `reach` map a dotted name (already resolved by `static_analysis.Analysis`) to the
checks it breaks: a banned namespace or op wherever it appears, or an escape it makes (a module off
the import allow-list reached through an allowed one, a private internal, an interpreter probe, a
per-process draw, a string evaluator). `_attribute_hits` does the same for an attribute name on an
object of unknown type (a module hidden in a container is still caught by what it is asked for).
`_classified` runs all of them once per tree, over every import, whole name chain and literal
getattr, and under each canonical form `static_reexports.canonical_forms` gives; the checks read its
hits by check name. `torch_call_allowed` is the torch call allow-list's rule. `_Findings` collects a
check's findings into its `Check` (the first three by line, and a count of the rest).

What it does not do: it holds no name table (`static/tables.py`), resolves no alias
(`static/analysis.py`) and runs no check (`static/checks.py`).
"""

from __future__ import annotations

import ast

from kernelflow.eval.static.analysis import Analysis, _literal_getattr
from kernelflow.eval.static.reexports import REEXPORT_ALIASES, canonical_forms
from kernelflow.eval.static.tables import (
    _INTERPRETER_WHY,
    _KERNEL_HINT,
    _MODULE_REASONS,
    _NONDETERMINISM_WHY,
    ALLOWED_IMPORT_ROOTS,
    COMPILE_NAMES,
    COMPUTE_NAMESPACES,
    COMPUTE_OPS,
    ESCAPE_MODULE_ATTRS,
    EVAL_ATTRS,
    EVAL_NAMES,
    FORBIDDEN_TORCH_MODULES,
    INTERNAL_ATTRS,
    INTERNAL_NAMES,
    INTERPRETER_ATTRS,
    INTERPRETER_NAMES,
    NN_ALLOWED,
    NONDETERMINISM_ATTRS,
    NONDETERMINISM_ROOTS,
    REEXPORTED_MODULES,
    STREAM_NAMES,
    SUBCLASS_NAMES,
    TORCH_CALLS_ALLOWED,
    _is_dunder,
    _op,
)
from kernelflow.eval.verdict import Check


def _prefixes(qual: str):
    parts = qual.split(".")
    for i in range(1, len(parts) + 1):
        yield ".".join(parts[:i]), parts[i - 1]


def classify(qual: str) -> tuple[str, str] | None:
    """(check name, reason) for a dotted name that is banned wherever it appears, else None."""
    for prefix, last in _prefixes(qual):
        parent = prefix.rpartition(".")[0]
        if prefix in STREAM_NAMES:
            return "no_cuda_streams", f"{prefix} runs work off the timed stream or replays it from a graph"
        if prefix in COMPILE_NAMES or last in ("load_inline", "cpp_extension"):
            return "no_torch_compile", f"{prefix} is not Triton; write the kernel with @triton.jit"
        if prefix in SUBCLASS_NAMES:
            return "no_tensor_subclass", f"{prefix} builds tensor subclasses or dispatch hooks"
        if prefix in FORBIDDEN_TORCH_MODULES:
            return "no_forbidden_imports", f"{prefix} reaches processes, files or the network"
        if prefix.split(".")[0] in ("time", "timeit"):
            return "no_timers", f"{prefix} reads or replaces a timer"
        if parent in COMPUTE_NAMESPACES or (parent in ("torch", "torch.Tensor") and _op(last) in COMPUTE_OPS):
            return "no_torch_compute", f"{prefix} does the task's work in PyTorch; {_KERNEL_HINT}"
        if parent == "torch.nn" and last[:1].isupper() and last not in NN_ALLOWED:
            return "no_torch_layers", f"{prefix} is a PyTorch layer doing the task's work; {_KERNEL_HINT}"
    return None


def torch_call_allowed(qual: str) -> bool:
    """Whether calling `qual` is allowed PyTorch: a whole allowed name, or one member of one (`torch.nn.Module.
    __init__`, `torch.Size.numel`) that is neither a compute op nor a re-exported module (`.torch`, `.F`)."""
    if qual in TORCH_CALLS_ALLOWED:
        return True
    parent, _, last = qual.rpartition(".")
    return parent in TORCH_CALLS_ALLOWED and _op(last) not in COMPUTE_OPS and last not in REEXPORT_ALIASES


def reach(qual: str) -> list[tuple[str, str]]:
    """(check name, reason) for each escape a dotted name makes: a module off the allow-list reached through
    an allowed one, a torch/triton internal, an interpreter probe, a per-process draw, a string evaluator."""
    hits: list[tuple[str, str]] = []
    parts = qual.split(".")
    prefixes = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for prefix, seg in zip(prefixes[1:], parts[1:], strict=True):
        if seg not in ALLOWED_IMPORT_ROOTS and (seg in REEXPORTED_MODULES or seg in _MODULE_REASONS):
            why = _MODULE_REASONS.get(seg, "is off the import allow-list")
            hits.append(("no_forbidden_modules", f"{prefix} reaches the module `{seg}` through an allowed module "
                                                 f"({seg} {why}); use only torch, triton and math members"))
            break
    if parts[0] in ALLOWED_IMPORT_ROOTS:  # torch._C, torch._ops, triton._C, typing._eval_type, ...
        for prefix, seg in zip(prefixes[1:], parts[1:], strict=True):
            if prefix in INTERNAL_NAMES or seg.startswith("_") and not _is_dunder(seg):
                hits.append(("no_torch_internals", f"{prefix} is a private internal (dispatch keys, raw "
                                                   f"operators, hooks, evaluators); a kernel needs none of it"))
                break
    for prefix, seg in zip(prefixes, parts, strict=True):
        if prefix in INTERPRETER_NAMES or seg in INTERPRETER_ATTRS:
            hint = " (for the SM count use torch.cuda.get_device_properties(x.device).multi_processor_count)" \
                if prefix.startswith("triton.runtime.driver") else ""
            hits.append(("no_interpreter_detection", f"{prefix}: {_INTERPRETER_WHY}{hint}"))
            break
    if not qual.startswith("triton.language") and (
            parts[0] in NONDETERMINISM_ROOTS or any(seg in NONDETERMINISM_ATTRS for seg in parts[1:])):
        hits.append(("no_nondeterminism", f"{qual} is a per-process draw (randomness, clocks, ids, threads); "
                                          f"{_NONDETERMINISM_WHY}"))
    for prefix in prefixes:
        if prefix in EVAL_NAMES:
            hits.append(("no_dangerous_builtins", f"{prefix} evaluates strings as code"))
    return hits


def _attribute_hits(a: Analysis, n: ast.AST, name: str) -> list[tuple[str, str]]:
    """Escapes named by one attribute (or literal getattr name) on any object, resolved or not."""
    hits = []
    if name in ESCAPE_MODULE_ATTRS:
        hits.append(("no_forbidden_modules", f"`{ast.unparse(n)}` reaches a module named `{name}` that the import "
                                             f"allow-list refuses; use only torch, triton and math members"))
    if name in INTERNAL_ATTRS:
        hits.append(("no_torch_internals", f"`.{name}` reaches PyTorch/Triton internals (dispatch keys, raw "
                                           f"operators, hooks); a kernel needs none of it"))
    if name in INTERPRETER_ATTRS:
        hits.append(("no_interpreter_detection", f"`.{name}`: {_INTERPRETER_WHY}"))
    if name in EVAL_ATTRS:
        hits.append(("no_dangerous_builtins", f"`.{name}` evaluates strings as code"))
    if name in NONDETERMINISM_ATTRS and not (a.qual(n) or "").startswith("triton.language"):
        hits.append(("no_nondeterminism", f"`.{name}` is a per-process draw; {_NONDETERMINISM_WHY}"))
    return hits


class _Findings:
    def __init__(self):
        self.items: list[tuple[int, str]] = []

    def add(self, node: ast.AST, text: str) -> None:
        self.items.append((getattr(node, "lineno", 0), text))

    def check(self, ok_why: str = "") -> Check:
        if not self.items:
            return Check(True, ok_why)
        seen = sorted(set(self.items))
        lines = [f"line {ln}: {text}" for ln, text in seen[:3]]
        more = f" (and {len(seen) - 3} more)" if len(seen) > 3 else ""
        return Check(False, "; ".join(lines) + more)


def _classified(a: Analysis, check_name: str) -> _Findings:
    """Every import, whole name chain, literal getattr or attribute name that `classify` or `reach`
    assigns to `check_name` (a name bound to several things is judged through each of them)."""
    if a.hits is None:  # computed once per tree, shared by the checks
        a.hits = []
        for n in a.nodes:
            quals: list[str] = []
            if isinstance(n, ast.Import):
                quals = [al.name for al in n.names]
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                quals = [f"{n.module}.{al.name}" for al in n.names if al.name != "*"]
            elif isinstance(n, ast.Name | ast.Attribute) and id(n) not in a.inner or _literal_getattr(n):
                quals = a.quals(n)
            quals = [*quals, *(f for q in quals for f in canonical_forms(q))]  # torch.nn.init.torch.relu: torch.relu
            for q in quals:
                hit = None if q in a.allowed_ops else classify(q)
                a.hits += [(n, hit)] if hit else []
                a.hits += [(n, h) for h in reach(q)]
            if isinstance(n, ast.Attribute):
                a.hits += [(n, h) for h in _attribute_hits(a, n, n.attr)]
            elif _literal_getattr(n):
                a.hits += [(n, h) for h in _attribute_hits(a, n, n.args[1].value)]
    found = _Findings()
    for n, (name, why) in a.hits:
        if name == check_name:
            found.add(n, why)
    return found
