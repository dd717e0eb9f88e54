"""The submission language: an allow-list grammar for host code (issue #32, item 1).

Host code is everything outside the bodies of `@triton.jit` functions: module statements, helper
functions, `ModelNew`'s methods, lambdas, default arguments, annotations, decorators and their arguments
(`triton.autotune` configs and hooks, `triton.heuristics` lambdas). It is accepted only if every node is
in a small grammar of what a kernel wrapper needs: imports of torch / triton / math; constants; helper
functions; kernels; one `class ModelNew(nn.Module)`; inside functions assignments, `if`, `for` over
`range` or a shape, `return`, `assert`, `raise ValueError(...)`; arithmetic on sizes; calls by name from
`static/language_table.py`; kernel launches `kernel[grid](...)`. Everything else is refused with its
rule (`RULES`), its line and a hint; the model reads that text. `docs/submission_language.md` is the
user-facing description.

Values are typed just enough to keep tensor values out of host arithmetic: forward's parameters, the
results of allocation and view calls, subscripts of tensors and names bound to them are tensors, and a
tensor may not be an operand of an operator, a truth test, a builtin's argument or an index (metadata
such as `x.shape` is a value). Taint crosses helper and method calls by parameter position, iterated
to a fixed point. `self.attr` is set only in `__init__`, so forward cannot keep caches or counters.

Not covered: kernel bodies (`pure_triton_kernels` and the other checks of `static/checks.py`, which run
as a second layer after this one); what the code does at run time (the worker's dispatch allow-list,
launch counter and the judge's fresh inputs). A task may name library ops that stay allowed
(`Task.allowed_ops`, e.g. `torch.nn.functional.conv2d` for a fused epilogue); they return tensors.

Why not RestrictedPython: it rewrites Python into guarded bytecode and relies on run-time guard
functions (`_getattr_`, `_getitem_`) inside the process that executes the code, which is the process
this judge does not trust; it also accepts general Python (classes, try, with, any call), so it is not
a domain allow-list. Parsing with the standard `ast` module and accepting a fixed grammar is smaller,
runs on the judge's side before anything executes, and names the rule that failed.
"""

from __future__ import annotations

import ast

from kernelflow.eval.static import language_table as T
from kernelflow.eval.static.language_exprs import Refusal
from kernelflow.eval.static.language_host import Host
from kernelflow.eval.verdict import Check

RULES = {  # rule name -> why it exists (one line each)
    "imports": "only torch, torch.nn, triton, triton.language and math: other modules reach files, processes, "
               "frames or compute",
    "module-statements": "module level holds imports, constants, helpers, kernels and ModelNew: nothing else runs",
    "module-constants": "module-level values are constants: a global tensor is state a kernel or call could read",
    "model-class": "exactly one class, ModelNew(nn.Module): other classes carry hooks, descriptors or subclasses",
    "decorators": "only triton.jit/autotune/heuristics on kernels: a decorator runs arbitrary code at import",
    "host-statements": "with/try/match/while/global/del/yield/nested defs are not needed to allocate and launch",
    "host-names": "a name is a local, a constant, an allowed module, a helper, a kernel or a table builtin",
    "host-attributes": "attributes only from the table: metadata, views, dtypes, the allowed module members",
    "host-calls": "calls only from the table: allocation, metadata, views, size arithmetic, launches",
    "kernel-use": "a kernel is only launched, `kernel[grid](...)`: called or unwrapped, its body runs as Python",
    "tensor-values": "host code never computes on tensor values: no operators, truth tests, builtins or indexes",
    "state": "self.attr is set only in __init__: forward depends on its inputs alone (no caches or counters)",
    "dunders": "dunder names reach the interpreter's internals",
    "string-subscripts": "string keys only on a grid or heuristics lambda's parameter (`meta['BLOCK']`)",
    "assign-targets": "assign to names, tuples of names, or self.attr in __init__: an item store is eager compute",
    "loops": "for loops run over range(...) or a shape, never over a tensor",
}


def check_language(tree: ast.Module, source: str, allowed_ops: tuple[str, ...] = ()) -> Check:
    """Refusals of `tree` against the submission language, in line order (see the module docstring)."""
    host = Host(tree, frozenset(allowed_ops))
    refusals = host.run()
    if not refusals:
        return Check(True, f"host code is in the submission language ({host.kernel_count} kernel(s))")
    seen: dict[tuple[int, str], Refusal] = {}
    for r in refusals:
        seen.setdefault((r.line, r.rule), r)
    items = sorted(seen.values(), key=lambda r: r.line)
    lines = [f"line {r.line}: {r.what} is outside the submission language (rule: {r.rule})" for r in items[:3]]
    lines[0] += f" [{RULES[items[0].rule]}]"  # the first refusal says why its rule exists
    more = f" (and {len(items) - 3} more)" if len(items) > 3 else ""
    return Check(False, "; ".join(lines) + more + f"; {T.HINT}")
