"""Static checks that a submission is a Triton kernel doing the task's work itself (see `static/checks.py`).

It defines `ModelNew` (an nn.Module with a forward), defines a @triton.jit kernel and launches it,
does not use the reference `Model`, and does no compute in PyTorch: no torch ops or tensor methods
that compute (`torch.relu`, `F.gelu`, `x.clamp()`, `torch.ops.aten.*`, the `@` operator), no nn
layers, no torch.compile / TorchScript / inline CUDA, no try/except or swallowing context manager
as a fallback. Under the Triton interpreter a kernel body is plain Python run during the launch, so
`pure_triton_kernels` also keeps kernel bodies from reading mutable module state or calling PyTorch
tensor methods.

What it does not cover: what a submission reaches beyond its own work (imports, builtins, dunders,
streams, timers, internals: `static/harness_checks.py`; frames and coding cookies: `static/escapes.py`)
and the source's size (`static_checks.check_bounded_source`). It cannot see types, so arithmetic on
tensors (`x * (x > 0)`) passes here; the worker's dispatch allow-list catches it at run time.
"""

from __future__ import annotations

import ast

from kernelflow.eval.static.analysis import Analysis, _analysis, _literal_getattr, _tail
from kernelflow.eval.static.reexports import canonical_forms
from kernelflow.eval.static.rules import _classified, _Findings, classify, torch_call_allowed
from kernelflow.eval.static.tables import _KERNEL_HINT, COMPUTE_OPS, TORCH_ONLY_METHODS, WITH_ALLOWED, _op
from kernelflow.eval.verdict import Check


def check_defines_model_new(tree: ast.Module, source: str) -> Check:
    # Rationale: the evaluator instantiates ModelNew; a missing or renamed class (ModelNew = Model) is no submission.
    for n in tree.body:
        if isinstance(n, ast.ClassDef) and n.name == "ModelNew":
            bases = [ast.unparse(b) for b in n.bases]
            if not any(b.split(".")[-1] == "Module" for b in bases):
                return Check(False, f"line {n.lineno}: class ModelNew must subclass nn.Module "
                                    f"(bases: {bases or 'none'})")
            if not any(isinstance(s, ast.FunctionDef) and s.name == "forward" for s in n.body):
                return Check(False, f"line {n.lineno}: class ModelNew defines no forward method")
            return Check(True)
    return Check(False, "no module-level `class ModelNew(nn.Module)` with a forward method")


def check_has_triton_kernel(tree: ast.Module, source: str) -> Check:
    # Rationale: a plain-PyTorch submission (no kernel at all) is not the task.
    a = _analysis(tree)
    if a.kernels:
        return Check(True, f"kernels: {', '.join(sorted(a.kernels))}")
    return Check(False, "no @triton.jit function; define the kernel with @triton.jit and launch it from forward")


def check_launches_kernel(tree: ast.Module, source: str) -> Check:
    # Rationale: a decoy kernel that is defined but never launched (`kernel[grid](...)`) does no work.
    a = _analysis(tree)
    for n in a.nodes:
        if isinstance(n, ast.Subscript) and id(n) not in a.in_jit and _tail(n.value) in a.kernel_names:
            return Check(True)
        if isinstance(n, ast.Attribute) and n.attr == "run" and _tail(n.value) in a.kernel_names:
            return Check(True)
    if not a.kernels:
        return Check(False, "no @triton.jit kernel to launch")
    return Check(False, f"no launch `{sorted(a.kernels)[0]}[grid](...)` of the @triton.jit kernel(s) "
                        f"{sorted(a.kernels)}; launch it from forward")


def check_no_reference_model(tree: ast.Module, source: str) -> Check:
    # Rationale: subclassing or calling a copied reference `Model` runs PyTorch's implementation.
    found = _Findings()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id == "Model" and isinstance(n.ctx, ast.Load):
            found.add(n, "uses the reference `Model`; ModelNew must subclass nn.Module and launch its own kernel")
        elif isinstance(n, ast.Attribute) and n.attr == "Model":
            found.add(n, f"uses `{ast.unparse(n)}`, the reference model; launch your own kernel instead")
    return found.check()


def check_no_torch_compute(tree: ast.Module, source: str) -> Check:
    # Rationale: torch ops (torch.relu, F.gelu, x.clamp(), torch.ops.aten.*, getattr(torch, name)) doing the work.
    a = _analysis(tree)
    found = _classified(a, "no_torch_compute")
    for n in a.nodes:
        if isinstance(n, ast.Call):
            q = a.qual(n.func)
            for form in [q, *canonical_forms(q)] if q else []:  # a re-exported torch is judged as torch
                if form.startswith("torch.") and not torch_call_allowed(form) and not classify(form) \
                        and form not in a.allowed_ops:
                    found.add(n, f"{form}(...) is not allowed: PyTorch may only allocate outputs and query shapes; "
                                 f"{_KERNEL_HINT}")
            if isinstance(n.func, ast.Name) and n.func.id == "getattr" and len(n.args) >= 2 \
                    and not _literal_getattr(n) and (a.qual(n.args[0]) or "").startswith("torch"):
                found.add(n, f"getattr({ast.unparse(n.args[0])}, <computed name>) hides which torch op runs")
        if id(n) in a.in_jit:
            continue  # tl tensors have methods (x.to, x.sum) that are Triton, not PyTorch
        if isinstance(n, ast.Attribute) and a.qual(n.value) is None and _op(n.attr) in COMPUTE_OPS:
            called = id(n) in a.called
            if n.attr in ("max", "min") and not called:
                continue  # torch.finfo(dt).max and friends
            if isinstance(n.value, ast.Name) and n.value.id in ("self", "cls") and n.attr in a.local_defs:
                continue  # the submission's own method
            if _literal_getattr(n):
                continue
            form = f".{n.attr}(...)" if called else f".{n.attr}"
            found.add(n, f"tensor method {form} does the task's work in PyTorch; {_KERNEL_HINT}")
        elif _literal_getattr(n) and a.qual(n.args[0]) is None and _op(n.args[1].value) in COMPUTE_OPS:
            found.add(n, f"getattr(..., {n.args[1].value!r}) calls a PyTorch op; {_KERNEL_HINT}")
        elif isinstance(n, ast.BinOp | ast.AugAssign) and isinstance(n.op, ast.MatMult):
            found.add(n, f"the @ operator is a PyTorch matmul; {_KERNEL_HINT}")
    return found.check()


def _constant_expr(a: Analysis, node: ast.AST) -> bool:
    """A literal, arithmetic of literals, or tl.constexpr(...): what a kernel may read from module scope."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return _constant_expr(a, node.operand)
    if isinstance(node, ast.BinOp):
        return _constant_expr(a, node.left) and _constant_expr(a, node.right)
    if isinstance(node, ast.Tuple):
        return all(_constant_expr(a, e) for e in node.elts)
    return isinstance(node, ast.Call) and a.qual(node.func) == "triton.language.constexpr"


def check_pure_triton_kernels(tree: ast.Module, source: str) -> Check:
    # Rationale: under the interpreter a kernel body is Python: torch work on module state inside a launch is unseen.
    a = _analysis(tree)
    module_values: dict[str, list[ast.AST]] = {}
    for n in tree.body:
        if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None:
            for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                for name in ast.walk(t):
                    if isinstance(name, ast.Name):
                        module_values.setdefault(name.id, []).append(n.value)
    found = _Findings()
    for kernel in a.kernels.values():
        own = {arg.arg for arg in ast.walk(kernel.args) if isinstance(arg, ast.arg)}
        own |= {n.id for n in ast.walk(kernel) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for n in ast.walk(kernel):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in own \
                    and n.id in module_values and not all(_constant_expr(a, v) for v in module_values[n.id]):
                found.add(n, f"kernel {kernel.name} reads module state `{n.id}`; a @triton.jit kernel may read only "
                             f"its arguments and tl.constexpr globals")
            elif isinstance(n, ast.Attribute) and id(n) in a.called and a.qual(n) is None \
                    and (_op(n.attr) != n.attr or n.attr in TORCH_ONLY_METHODS):
                found.add(n, f"`.{n.attr}(...)` in kernel {kernel.name} is a PyTorch tensor method, not Triton")
    return found.check()


def check_no_torch_layers(tree: ast.Module, source: str) -> Check:
    # Rationale: nn.ReLU / nn.Softmax / nn.Linear modules are PyTorch doing the work behind a layer object.
    return _classified(_analysis(tree), "no_torch_layers").check()


def check_no_try_except(tree: ast.Module, source: str) -> Check:
    # Rationale: try/except (or contextlib.suppress, a swallowing __exit__) hides a failing kernel behind a fallback.
    a = _analysis(tree)
    found = _Findings()
    for n in a.nodes:
        if isinstance(n, ast.Try | ast.TryStar):
            found.add(n, "try/except is not allowed (no fallbacks); let errors surface")
        elif isinstance(n, ast.With | ast.AsyncWith):
            for item in n.items:  # an allow-list: `suppress` renamed or reached through a module is still suppress
                expr = item.context_expr
                quals = a.quals(expr.func if isinstance(expr, ast.Call) else expr)
                if len(quals) != 1 or quals[0] not in WITH_ALLOWED:  # a rebound name is judged by every binding
                    found.add(n, f"`with {ast.unparse(expr)}` may swallow exceptions; the only context managers "
                                 f"allowed are {', '.join(sorted(WITH_ALLOWED))}")
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name in ("__exit__", "__aexit__"):
            found.add(n, f"defining {n.name} lets a context manager swallow exceptions")
    return found.check()


def check_no_torch_compile(tree: ast.Module, source: str) -> Check:
    # Rationale: torch.compile / TorchScript / load_inline CUDA produce kernels that are not the submission's Triton.
    return _classified(_analysis(tree), "no_torch_compile").check()
