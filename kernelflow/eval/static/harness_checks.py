"""Static checks that keep a submission from reaching or fooling the harness around it (see `static/checks.py`).

Imports follow an allow-list, and a module off it reached as an attribute of an allowed one, or used
as a value where no chain through it can be resolved, is refused (`no_forbidden_modules`); so are
builtins that hide what runs (`open`, `exec`, computed `getattr`), interpreter-escape dunders, CUDA
streams, events and graphs, assignments to library attributes (monkey-patching), tensor subclasses
and dispatch hooks, timers, torch/triton private internals, anything that tells the Triton
interpreter from a GPU (`TRITON_INTERPRET`, `os.environ`, `triton.knobs`, inspecting a kernel
object), and per-process draws (`random`, clocks, `id`, `hash`, `object()`). Most of them read the
hits that `static_rules._classified` assigns to their name and add the cases only a node shows.

What it does not cover: whether the submission does the task's work in Triton
(`static/kernel_checks.py`); frames, generators, class-pattern attribute reads and coding cookies
(`static/escapes.py`). Per-process draws it cannot name (set order of strings, `data_ptr()`) pass
here: judging again in a fresh process is the defence.
"""

from __future__ import annotations

import ast

from kernelflow.eval.static.analysis import _analysis, _key, _literal_getattr, _tail
from kernelflow.eval.static.rules import _classified, _Findings, classify
from kernelflow.eval.static.tables import (
    _BUILTIN_NAMES,
    _INTERPRETER_WHY,
    _MODULE_REASONS,
    _NONDETERMINISM_WHY,
    ALLOWED_IMPORT_ROOTS,
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
    _is_dunder,
)
from kernelflow.eval.verdict import Check


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
