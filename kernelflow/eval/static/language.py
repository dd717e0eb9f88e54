"""The submission language: an allow-list grammar for host code (issue #32, item 1).

Host code is everything outside the bodies of `@triton.jit` functions: module statements, helper
functions, `ModelNew`'s methods, lambdas, default arguments, annotations, decorators and their arguments
(`triton.autotune` configs and hooks, `triton.heuristics` lambdas). It is accepted only if every node is
in a small grammar of what a kernel wrapper needs: imports of torch / triton / math; constants; helper
functions; kernels; one `class ModelNew(nn.Module)`; inside functions assignments, `if`, `for` over
`range` or a shape, `return`, `assert`, `raise ValueError(...)`; arithmetic on sizes; calls by name from
the tables below; kernel launches `kernel[grid](...)`. Everything else is refused with its
rule (`RULES`), its line and a hint; the model reads that text. `docs/submission_language.md` is the
user-facing description.

Values are typed just enough to keep tensor values out of host arithmetic: forward's parameters, the
results of allocation and view calls, subscripts of tensors and names bound to them are tensors, and a
tensor may not be an operand of an operator, a truth test, a builtin's argument or an index (metadata
such as `x.shape` is a value). Taint crosses helper and method calls by parameter position, iterated
to a fixed point. `self.attr` is set only in `__init__`, so forward cannot keep caches or counters.

Not covered: kernel bodies (`static/kernel_language.py`, the `kernel_language` check right after this one,
and the deny-list checks of `static/checks.py` as a second layer); what the code does at run time (the
worker's dispatch allow-list, launch counter and the judge's fresh inputs). A task may name library ops that stay allowed
(`Task.allowed_ops`, e.g. `torch.nn.functional.conv2d` for a fused epilogue); they return tensors.

Why not RestrictedPython (PyPI, zopefoundation; checked 2026-12-03): `compile_restricted` rewrites Python
into bytecode that calls guard functions (`_getattr_`, `_write_`, `_getitem_`) which the caller supplies
in the globals at exec time, inside the process that executes the code, which is the process
this judge does not trust; it also accepts general Python (classes, try, with, any call), so it is not
a domain allow-list. Parsing with the standard `ast` module and accepting a fixed grammar is smaller,
runs on the judge's side before anything executes, and names the rule that failed.
"""

from __future__ import annotations

import ast

from kernelflow.eval.verdict import Check

# ---- the tables -----------------------------------------------------------------------------------
# Each call entry maps a name to `(result, reason)`: `result` is what the expression yields, "tensor"
# (values the checker keeps out of host arithmetic) or "value" (a number, shape, dtype, device or config:
# metadata that carries no tensor values); `reason` says why a wrapper needs it and why it computes
# nothing. A name missing here is outside the language. Deliberately absent, and why:
# - value-computing torch ops and tensor methods (`torch.relu`, `x.clamp()`, `x.to(dtype)` (a cast is a
#   computation), `x.clone()`, `x.copy_()`, `x.zero_()`, `x.item()`, `x.tolist()`): values come from kernels;
# - `torch.full` / `torch.ones_like` / `torch.tensor`: an output filled on the host with a value of the
#   host's choosing; zeros (accumulators for atomics) and ones (parameter init, as the references do) suffice;
# - probes that differ between the interpreter and a GPU (`x.is_cuda`, `x.device.type`, `x.data_ptr()`,
#   `torch.cuda.*`): a verdict must not depend on where it is judged;
# - `print`, `open`, `getattr`, `isinstance` and every other builtin: not needed to allocate and launch.

_ALLOC = "allocates a tensor; its values come only from the kernels that write it"
_META = "tensor metadata: reads sizes or layout, never values"
_VIEW = "a view or layout change of the same values (a copy at most), no arithmetic"

# Modules host code may import, under any alias (`import triton.language as tl`).
MODULES = {
    "torch": "tensors, dtypes and allocation",
    "torch.nn": "nn.Module, the base class of ModelNew, and nn.Parameter",
    "triton": "the kernel decorator, launch helpers and autotune configs",
    "triton.language": "tl: dtypes and tl.constexpr (kernel bodies are checked elsewhere)",
    "math": "arithmetic on Python numbers (block sizes, grids)",
}

# Calls on a module member, by the member's full name.
MODULE_CALLS = {
    "torch.empty": ("tensor", _ALLOC),
    "torch.empty_like": ("tensor", _ALLOC),
    "torch.empty_strided": ("tensor", _ALLOC),
    "torch.zeros": ("tensor", _ALLOC + " (zeroed: accumulators for atomic adds)"),
    "torch.zeros_like": ("tensor", _ALLOC + " (zeroed: accumulators for atomic adds)"),
    "torch.ones": ("tensor", "initial value of an nn.Parameter (a norm's weight), as the reference sets it"),
    "torch.nn.Parameter": ("tensor", "registers a weight the judge may copy from the reference"),
    "triton.cdiv": ("value", "ceil division of sizes, for grids"),
    "triton.next_power_of_2": ("value", "block sizes from a size"),
    "triton.Config": ("value", "one autotune configuration (block sizes, warps, stages)"),
    "triton.language.constexpr": ("value", "a compile-time constant for kernels"),
    **{f"math.{f}": ("value", "arithmetic on Python numbers") for f in
       "ceil floor log2 log sqrt exp isqrt gcd prod".split()},
}

# Module members read without a call: dtypes, constants, annotation types.
_DTYPES = "float32 float16 bfloat16 float64 int8 int16 int32 int64 uint8 bool float half long int double".split()
MODULE_VALUES = {
    **{f"torch.{d}": "a dtype, to allocate with" for d in _DTYPES},
    **{f"triton.language.{d}": "a dtype, to pass to a kernel" for d in _DTYPES if d not in ("half", "long", "double")},
    "torch.Tensor": "an annotation (`x: torch.Tensor`)",
    "torch.contiguous_format": "a memory format, to allocate with", "torch.preserve_format": "a memory format",
    "math.pi": "a number", "math.e": "a number", "math.inf": "a number",
}

# Decorators: of a kernel (outermost first: heuristics / autotune, then jit) and none on host functions.
KERNEL_DECORATORS = {
    "triton.jit": "marks the kernel; its body is checked by pure_triton_kernels, not by this grammar",
    "triton.autotune": "picks a config per key; its arguments are host code and checked here",
    "triton.heuristics": "derives meta-parameters; its lambdas are host code and checked here",
}

# Tensor methods, by name, called on a value.
TENSOR_METHODS = {
    **{m: ("value", _META) for m in
       "size stride numel dim element_size is_contiguous nelement ndimension".split()},
    **{m: ("tensor", _VIEW) for m in
       "contiguous view view_as reshape flatten unsqueeze squeeze permute transpose t expand expand_as".split()},
    "new_empty": ("tensor", _ALLOC),
}

# Tensor attributes, read without a call.
TENSOR_ATTRS = {"shape": _META, "dtype": _META, "device": _META, "ndim": _META}

# Builtins, by name. `len` and `tuple` may take a tensor's metadata; none may take a tensor.
BUILTIN_CALLS = {
    "min": "sizes and block sizes", "max": "sizes and block sizes", "abs": "sizes and strides",
    "int": "a Python int from a size", "float": "a Python float from a scalar argument",
    "len": "the number of dimensions", "range": "the only loop host code has", "tuple": "a shape as a tuple",
    "round": "sizes", "bool": "flags",
}
# Exceptions host code may raise (an unsupported shape or argument, with a message).
RAISABLE = {"ValueError", "NotImplementedError", "RuntimeError", "TypeError", "AssertionError"}
# Names usable in annotations only.
ANNOTATION_NAMES = {"int", "float", "bool", "str", "tuple", "list", "None"}

DOC = "docs/submission_language.md"
HINT = ("host code may only import torch/triton/math, allocate tensors, read their metadata, reshape them, do "
        f"arithmetic on sizes and launch @triton.jit kernels; see {DOC}")

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
    "defaults": "default arguments are literals: a default lambda or tensor reaches a kernel as a constexpr",
    "lambdas": "a lambda is a launch grid or a heuristics value computing on args[...]: elsewhere it is host code "
               "a kernel can call",
}


def check_language(tree: ast.Module, source: str, allowed_ops: tuple[str, ...] = ()) -> Check:
    """Refusals of `tree` against the submission language, in line order (see the module docstring)."""
    from kernelflow.eval.static.language_host import Host  # here: the walker reads this module's tables

    host = Host(tree, frozenset(allowed_ops))
    refusals = host.run()
    if not refusals:
        return Check(True, f"host code is in the submission language ({host.kernel_count} kernel(s))")
    seen: dict = {}  # (line, rule) -> the first Refusal there
    for r in refusals:
        seen.setdefault((r.line, r.rule), r)
    items = sorted(seen.values(), key=lambda r: r.line)
    lines = [f"line {r.line}: {r.what} is outside the submission language (rule: {r.rule})" for r in items[:3]]
    lines[0] += f" [{RULES[items[0].rule]}]"  # the first refusal says why its rule exists
    more = f" (and {len(items) - 3} more)" if len(items) > 3 else ""
    return Check(False, "; ".join(lines) + more + f"; {HINT}")
