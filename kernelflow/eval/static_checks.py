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
Frames, generators, class-pattern attribute reads and coding cookies are checked in `static_escapes.py`
(red team F1/F2); a chain through a re-exported module (`torch.nn.init.torch.relu`) is also judged as
the module it stands for (`static_reexports.py`, red team a05).
Code under `if __name__ == "__main__":` is checked like the rest (test harnesses that call
torch ops are rejected; the prompt asks for no testing code). Static checks narrow the attack
surface; they are not the sandbox.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from kernelflow.eval.static_analysis import (  # the tables and the name resolution the checks read
    _BUILTIN_NAMES,
    _INTERPRETER_WHY,
    _KERNEL_HINT,
    _MODULE_REASONS,
    _NONDETERMINISM_WHY,
    ALLOWED_IMPORT_ROOTS,
    COMPUTE_OPS,
    DANGEROUS_BUILTINS,
    DUNDER_ATTRS_ALLOWED,
    DUNDER_DEFS_ALLOWED,
    ESCAPE_DUNDERS,
    INTERPRETER_STRINGS,
    KERNEL_BUILTINS,
    KNOWN_MODULES,
    NONDETERMINISM_BUILTINS,
    STREAM_ATTRS,
    SUBCLASS_ATTRS,
    TIMER_ATTRS,
    TORCH_ONLY_METHODS,
    WITH_ALLOWED,
    Analysis,
    _classified,
    _Findings,
    _is_dunder,
    _key,
    _literal_getattr,
    _op,
    _tail,
    classify,
    torch_call_allowed,
)
from kernelflow.eval.static_escapes import (  # frames, generators, class patterns, coding cookies (F1, F2)
    check_no_frame_introspection,
    check_no_generators,
    check_no_pattern_attribute_reads,
    check_source_encoding,
)
from kernelflow.eval.static_reexports import canonical_forms
from kernelflow.eval.verdict import Check
from kernelflow.tasks import pysource

# ---- the checks ------------------------------------------------------------------------------


MAX_AST_NODES = 50_000  # the suite's largest honest solution has ~3,000
MAX_AST_DEPTH = 100  # its deepest nests 16; every recursive helper below stays far from Python's limit
_BOUNDS_HINT = "no Triton kernel needs that; write plain, shallow code"


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
                if form.startswith("torch.") and not torch_call_allowed(form) and not classify(form):
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


def check_no_forbidden_imports(tree: ast.Module, source: str) -> Check:
    # Rationale: threads, processes, ctypes, os/files, network, gc/inspect scans and dynamic imports escape the judge.
    a = _analysis(tree)
    found = _classified(a, "no_forbidden_imports")
    for n in a.nodes:
        if isinstance(n, ast.ImportFrom) and (n.level or any(al.name == "*" for al in n.names)):
            found.add(n, "relative and star imports are not allowed; import names explicitly")
        mods = [al.name for al in n.names] if isinstance(n, ast.Import) else \
            [n.module] if isinstance(n, ast.ImportFrom) and n.module and not n.level else []
        for m in mods:
            root = m.split(".")[0]
            if root not in ALLOWED_IMPORT_ROOTS:
                why = _MODULE_REASONS.get(root, "is not needed by a Triton kernel")
                allowed = ", ".join(sorted(ALLOWED_IMPORT_ROOTS - {"__future__"}))
                found.add(n, f"import of {m}: {why} (allowed: {allowed})")
        if isinstance(n, ast.Call) and (a.qual(n.func) or "").endswith("import_module"):
            found.add(n, "importlib.import_module is a dynamic import")
    return found.check()


def check_no_dangerous_builtins(tree: ast.Module, source: str) -> Check:
    # Rationale: open/exec/eval/__import__/globals/setattr, computed getattr/hasattr, get_type_hints hide what runs.
    a = _analysis(tree)
    found = _classified(a, "no_dangerous_builtins")  # string evaluators: typing.get_type_hints, ForwardRef
    for n in a.nodes:
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "hasattr" \
                and n.func.id not in a.aliases and not (len(n.args) >= 2 and isinstance(n.args[1], ast.Constant)):
            found.add(n, "hasattr with a computed attribute name probes what it cannot name; use the attribute directly")
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in a.aliases:
            if n.id in DANGEROUS_BUILTINS:
                found.add(n, f"{n.id} is not allowed in a submission")
            elif n.id == "getattr" and id(n) not in a.called:
                found.add(n, "getattr may only be called directly, with a literal attribute name")
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr" \
                and not _literal_getattr(n):
            found.add(n, "getattr with a computed attribute name hides what runs; use the attribute directly")
    return found.check()


def check_no_escape_dunders(tree: ast.Module, source: str) -> Check:
    # Rationale: __class__/__subclasses__/__globals__/__dict__ walks reach the harness, builtins or hidden ops.
    found = _Findings()
    for n in ast.walk(tree):
        attr = n.attr if isinstance(n, ast.Attribute) else n.args[1].value if _literal_getattr(n) else None
        if attr and _is_dunder(attr) and attr not in DUNDER_ATTRS_ALLOWED:
            kind = "an interpreter escape" if attr in ESCAPE_DUNDERS else "a dunder call that hides the operation"
            found.add(n, f"attribute {attr} is {kind}")
        elif isinstance(n, ast.Name) and n.id in ESCAPE_DUNDERS | {"__builtins__", "__loader__", "__spec__"}:
            found.add(n, f"name {n.id} is an interpreter escape")
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and "__" in n.value \
                and any(d in n.value for d in ESCAPE_DUNDERS | {"__builtins__", "__import__"}):
            found.add(n, "a string naming an interpreter escape (format fields like '{0.__class__}' walk "
                         "attributes, getattr reaches them); leave dunders alone")
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and _is_dunder(n.name) \
                and n.name not in DUNDER_DEFS_ALLOWED and n.name not in ("__exit__", "__aexit__"):
            found.add(n, f"defining {n.name} changes how Python or PyTorch treats your objects")
    return found.check()


def check_no_cuda_streams(tree: ast.Module, source: str) -> Check:
    # Rationale: side streams, events and CUDA graphs move work outside the timed region.
    a = _analysis(tree)
    found = _classified(a, "no_cuda_streams")
    for n in a.nodes:
        if isinstance(n, ast.Attribute) and (n.attr in STREAM_ATTRS or "stream" in n.attr.lower()) \
                and not (a.qual(n) or "").startswith("triton.language") \
                and (classify(a.qual(n) or "") or ("",))[0] != "no_cuda_streams":
            found.add(n, f"`.{n.attr}` touches CUDA streams or graphs")
    return found.check()


def check_no_module_patching(tree: ast.Module, source: str) -> Check:
    # Rationale: assigning to torch/triton/time attributes replaces timers, launchers or ops (monkey-patching).
    a = _analysis(tree)
    found = _Findings()
    for n in a.nodes:
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store | ast.Del):
            q = a.qual(n.value)
            if q:
                verb = "deleting" if isinstance(n.ctx, ast.Del) else "assigning to"
                found.add(n, f"{verb} {q}.{n.attr} patches a module; leave library objects alone")
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("setattr", "delattr") \
                and n.args and a.qual(n.args[0]):
            found.add(n, f"{n.func.id}({a.qual(n.args[0])}, ...) patches a module")
    return found.check()


def check_no_tensor_subclass(tree: ast.Module, source: str) -> Check:
    # Rationale: tensor subclasses / proxies compute lazily when the checker reads them (lazy output).
    a = _analysis(tree)
    found = _classified(a, "no_tensor_subclass")
    for n in a.nodes:
        if isinstance(n, ast.ClassDef):
            for b in n.bases:
                q = a.qual(b) or ast.unparse(b)
                if q.split(".")[-1] in ("Tensor", "Parameter"):
                    found.add(n, f"class {n.name} subclasses {q}; return a plain tensor from torch.empty*")
        elif isinstance(n, ast.Attribute) and n.attr in SUBCLASS_ATTRS or isinstance(n, ast.Name) and \
                n.id in SUBCLASS_ATTRS or isinstance(n, ast.FunctionDef) and n.name in SUBCLASS_ATTRS:
            found.add(n, f"{getattr(n, 'attr', None) or getattr(n, 'id', None) or n.name} builds a tensor subclass "
                         f"or dispatch hook")
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "type" and len(n.args) == 3:
            found.add(n, "type(name, bases, dict) builds a class at run time")
    return found.check()


def check_no_timers(tree: ast.Module, source: str) -> Check:
    # Rationale: a submission that reads or replaces timers (time.perf_counter, Event.elapsed_time) can fake speed.
    a = _analysis(tree)
    found = _classified(a, "no_timers")
    for n in a.nodes:
        if isinstance(n, ast.Attribute) and n.attr in TIMER_ATTRS \
                and (classify(a.qual(n) or "") or ("",))[0] != "no_timers":
            found.add(n, f"`.{n.attr}` reads or replaces a timer")
    return found.check()


def check_no_torch_compile(tree: ast.Module, source: str) -> Check:
    # Rationale: torch.compile / TorchScript / load_inline CUDA produce kernels that are not the submission's Triton.
    return _classified(_analysis(tree), "no_torch_compile").check()


def check_no_forbidden_modules(tree: ast.Module, source: str) -> Check:
    # Rationale: modules reached as attributes of allowed ones (triton.runtime.jit.os, torch.functional.np) dodge imports.
    a = _analysis(tree)
    found = _classified(a, "no_forbidden_modules")
    getattr_objects = {id(n.args[0]) for n in a.nodes if _literal_getattr(n)}
    for n in a.nodes:  # a module passed around as a value hides which of its attributes is reached
        if isinstance(n, ast.Name | ast.Attribute) and isinstance(n.ctx, ast.Load) and id(n) not in a.inner \
                and id(n) not in a.called and id(n) not in a.bound_values and id(n) not in getattr_objects:
            q = a.qual(n)
            if q in a.imported_modules or q in KNOWN_MODULES:
                found.add(n, f"the module {q} is used as a value (in a container, an argument or a return); "
                             f"use a module only as `{_tail(n)}.member` or bind it to a name")
    for key, value in sorted(a.overbound.items()):
        found.add(value, f"`{key}` is bound to more than 16 different modules or members; bind each name once")
    return found.check()


def check_no_torch_internals(tree: ast.Module, source: str) -> Check:
    # Rationale: torch._C (_DisableTorchDispatch, _unset_dispatch_mode), torch.ops.aten, torch.library slip past dispatch checks.
    return _classified(_analysis(tree), "no_torch_internals").check()


def check_no_interpreter_detection(tree: ast.Module, source: str) -> Check:
    # Rationale: helpers that read TRITON_INTERPRET, os.environ or triton.knobs can cheat only where judged (or only where not).
    a = _analysis(tree)
    found = _classified(a, "no_interpreter_detection")
    for n in a.nodes:
        if isinstance(n, ast.Constant) and isinstance(n.value, str) \
                and any(s.lower() in n.value.lower() for s in INTERPRETER_STRINGS):
            found.add(n, f"a string naming the Triton interpreter: {_INTERPRETER_WHY}")
    # A kernel object differs under the interpreter (InterpretedFunction): only launch it, never inspect it.
    uses = {id(n.value) for n in a.nodes if isinstance(n, ast.Subscript)}
    uses |= {id(n.value) for n in a.nodes if isinstance(n, ast.Attribute) and n.attr == "run"}
    uses |= a.called | a.bound_values
    for n in a.nodes:
        if _key(n) and isinstance(n.ctx, ast.Load) and _tail(n) in a.kernel_names and id(n) not in uses \
                and not (isinstance(n, ast.Name) and n.id in ("self", "cls")):
            found.add(n, f"kernel `{_tail(n)}` is used as a value (type(), str(), attributes, an argument); "
                         f"launch it only as `{_tail(n)}[grid](...)`: {_INTERPRETER_WHY}")
    # Under the interpreter a kernel body is Python: calls that the GPU compiler refuses run only there.
    own_functions = (a.local_defs | {n.name for n in a.nodes if isinstance(n, ast.ClassDef)}) - a.kernel_names
    for kernel in a.kernels.values():
        local = {x.arg for x in ast.walk(kernel.args) if isinstance(x, ast.arg)}
        local |= {x.id for x in ast.walk(kernel) if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Store)}
        for n in ast.walk(kernel):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id not in local \
                    and n.func.id not in a.kernel_names and n.func.id not in a.aliases \
                    and (n.func.id in own_functions or n.func.id in _BUILTIN_NAMES
                         and n.func.id not in KERNEL_BUILTINS):
                found.add(n, f"kernel {kernel.name} calls {n.func.id}(), which the GPU compiler refuses; it runs "
                             f"only under the interpreter: {_INTERPRETER_WHY}")
    return found.check()


def check_no_nondeterminism(tree: ast.Module, source: str) -> Check:
    # Rationale: random/secrets/uuid/time, os.urandom/getpid, id() and hash() draws could make a lucky verdict get cached.
    a = _analysis(tree)
    found = _classified(a, "no_nondeterminism")
    for n in a.nodes:
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in NONDETERMINISM_BUILTINS \
                and n.id not in a.aliases and n.id not in a.local_defs:
            found.add(n, f"{n.id}() differs from process to process; {_NONDETERMINISM_WHY}")
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "object" and not n.args \
                and "object" not in a.aliases:
            found.add(n, f"object() has a per-process address (its repr and id); {_NONDETERMINISM_WHY}")
    return found.check()


STATIC_CHECKS: list[tuple[str, Callable[[ast.Module, str], Check]]] = [
    ("bounded_source", check_bounded_source),  # first: the others assume a tree of bounded depth and size
    ("source_encoding", check_source_encoding),  # next: under another codec the rest judged a different program
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

def _analysis(tree: ast.Module) -> Analysis:
    """The shared analysis of `tree`, built on first use and kept on the tree (thread-safe: one tree per call)."""
    a = getattr(tree, "_kernelflow_analysis", None)
    if a is None:
        a = Analysis(tree)
        tree._kernelflow_analysis = a
    return a


def run_static_checks(source: str) -> dict[str, Check]:
    """Every static check on `source`, in `STATIC_CHECKS` order, after `parses` (see the module docstring).

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
