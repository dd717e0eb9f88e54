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

Under the Triton interpreter a @triton.jit body is plain Python executed during the launch, so
`pure_triton_kernels` also keeps kernel bodies from reading mutable module state or calling PyTorch
tensor methods (on a GPU, Triton's compiler refuses both anyway).

What it does not do: it cannot see types, so arithmetic operators on tensors (`x * (x > 0)`),
builtins applied to tensors (`abs(x)`, `sum(x)`) and caching keyed on `data_ptr()` pass here; the
worker's dispatch allow-list, launch counter and the judge's fresh-input checks catch those at run
time. Code under `if __name__ == "__main__":` is checked like the rest (test harnesses that call
torch ops are rejected; the prompt asks for no testing code). Static checks narrow the attack
surface; they are not the sandbox.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from kernelflow.eval.verdict import Check

_KERNEL_HINT = "compute it in a @triton.jit kernel"

ALLOWED_IMPORT_ROOTS = frozenset({
    "torch", "triton", "math", "typing", "typing_extensions", "functools", "itertools", "dataclasses",
    "enum", "numbers", "collections", "abc", "__future__",
})
# Why a module is refused, by root; roots absent here and from the allow-list get a generic reason.
_MODULE_REASONS = {
    **dict.fromkeys(("threading", "_thread", "multiprocessing", "concurrent", "asyncio"),
                    "runs work on other threads or processes, outside the timed and checked call"),
    **dict.fromkeys(("subprocess", "os", "posix", "pty", "shutil", "pathlib", "io", "tempfile", "glob"),
                    "reaches the operating system and its files"),
    **dict.fromkeys(("ctypes", "_ctypes", "cffi", "mmap", "resource", "signal", "faulthandler", "atexit"),
                    "reaches native memory or process state"),
    **dict.fromkeys(("socket", "http", "urllib", "requests", "ssl"), "opens network connections"),
    **dict.fromkeys(("gc", "inspect", "traceback", "weakref", "sys", "builtins", "importlib", "types", "pkgutil",
                     "runpy", "code", "dis", "pickle", "marshal", "copyreg", "shelve"),
                    "introspects or rewires the interpreter (object scans, frames, dynamic imports)"),
    **dict.fromkeys(("operator", "contextlib"), "hides what runs (methodcaller, attrgetter) or swallows errors"),
    **dict.fromkeys(("time", "timeit", "datetime"), "reads or replaces timers"),
    **dict.fromkeys(("numpy", "scipy", "cupy", "numba", "jax", "tensorflow", "pandas"),
                    "computes outside Triton"),
}
TORCH_CALLS_ALLOWED = frozenset({
    "torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros", "torch.zeros_like", "torch.ones",
    "torch.ones_like", "torch.full", "torch.full_like", "torch.Size", "torch.device", "torch.is_tensor",
    "torch.is_floating_point", "torch.no_grad", "torch.inference_mode", "torch.get_default_dtype", "torch.finfo",
    "torch.iinfo", "torch.promote_types", "torch.cuda.is_available", "torch.cuda.current_device",
    "torch.cuda.device", "torch.cuda.device_count", "torch.cuda.get_device_properties",
    "torch.cuda.get_device_capability", "torch.cuda.get_device_name", "torch.cuda.synchronize",
    "torch.nn.Module", "torch.nn.Parameter", "torch.nn.ModuleList", "torch.nn.ModuleDict",
    "torch.nn.ParameterList", "torch.nn.ParameterDict", "torch.nn.Buffer", "torch.nn.init",
})
NN_ALLOWED = frozenset({"Module", "Parameter", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "Buffer"})
# torch namespaces whose every member computes.
COMPUTE_NAMESPACES = frozenset({
    "torch.nn.functional", "torch.special", "torch.linalg", "torch.fft", "torch.ops", "torch._C", "torch._VF",
    "torch._refs", "torch._prims", "torch._decomp", "torch.sparse", "torch.func", "torch.nested", "torch.masked",
    "torch.signal", "torch.distributions", "torch.ao", "torch.nn.modules", "torch.nn.quantized",
})
# Names that compute when reached as torch.X, torch.Tensor.X or x.X(...); in-place `X_` forms included.
COMPUTE_OPS = frozenset("""
relu relu6 sigmoid tanh softmax log_softmax softmin exp exp2 expm1 log log1p log2 log10 where clamp clip
clamp_min clamp_max maximum minimum fmax fmin mul multiply add sub subtract rsub div divide true_divide
floor_divide pow float_power square sqrt rsqrt erf erfc erfinv gelu silu mish hardtanh hardsigmoid hardswish
leaky_relu elu selu celu softplus softsign logsigmoid threshold hardshrink softshrink tanhshrink glu prelu rrelu
abs absolute neg negative sign sgn signbit reciprocal sum nansum mean nanmean amax amin aminmax max min argmax
argmin logsumexp cumsum cumprod cummax cummin logcumsumexp prod std var norm matmul mm bmm addmm addmv baddbmm
einsum dot vdot mv outer inner ger tensordot kron linear bilinear conv1d conv2d sin cos tan asin acos atan atan2
sinh cosh asinh acosh atanh floor ceil round trunc frac fix fmod remainder lerp addcmul addcdiv masked_fill
masked_scatter masked_select index_put index_add index_copy scatter scatter_add scatter_reduce gather heaviside
gt ge lt le eq ne greater greater_equal less less_equal equal logical_and logical_or logical_not logical_xor
bitwise_and bitwise_or bitwise_xor bitwise_not sort argsort topk kthvalue median nanmedian mode nan_to_num logit
xlogy sinc i0 lgamma digamma polygamma mvlgamma copysign ldexp hypot diff all any count_nonzero allclose isclose
sigmoid_ apply_ map_ map2_ numpy tolist item baddbmm_ deg2rad rad2deg dist cdist renorm frexp
""".split())
STREAM_NAMES = frozenset({
    "torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.ExternalStream", "torch.cuda.current_stream",
    "torch.cuda.default_stream", "torch.cuda.set_stream", "torch.cuda.Event", "torch.cuda.graph",
    "torch.cuda.graphs", "torch.cuda.CUDAGraph", "torch.cuda.make_graphed_callables", "torch.cuda.streams",
    "torch.cuda.StreamContext", "torch.Stream", "torch.Event", "torch.cuda._sleep",
    "triton.testing.do_bench_cudagraph",
})
STREAM_ATTRS = frozenset({"wait_stream", "record_stream", "wait_event", "record_event", "CUDAGraph",
                          "make_graphed_callables", "ExternalStream"})
COMPILE_NAMES = frozenset({
    "torch.compile", "torch.jit", "torch.library", "torch.utils.cpp_extension", "torch._dynamo", "torch._inductor",
    "torch.compiler", "torch.fx", "torch.export", "torch._export", "torch.cuda.jiterator",
})
SUBCLASS_NAMES = frozenset({"torch.overrides", "torch.utils._python_dispatch", "torch._subclasses",
                            "torch.Tensor._make_subclass", "torch.Tensor.as_subclass"})
SUBCLASS_ATTRS = frozenset({"_make_subclass", "_make_wrapper_subclass", "as_subclass", "__torch_function__",
                            "__torch_dispatch__", "TorchFunctionMode", "TorchDispatchMode"})
FORBIDDEN_TORCH_MODULES = frozenset({"torch.multiprocessing", "torch.distributed", "torch.hub", "torch.package",
                                     "torch.save", "torch.load", "torch.utils.data"})
TIMER_ATTRS = frozenset({"elapsed_time", "perf_counter", "perf_counter_ns", "process_time", "monotonic",
                         "monotonic_ns", "thread_time"})
DANGEROUS_BUILTINS = frozenset({"open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars",
                                "breakpoint", "exit", "quit", "input", "setattr", "delattr", "memoryview", "help"})
ESCAPE_DUNDERS = frozenset({"__class__", "__subclasses__", "__globals__", "__builtins__", "__dict__", "__code__",
                            "__closure__", "__mro__", "__bases__", "__getattribute__", "__base__", "__func__",
                            "__self__", "__module__", "__loader__", "__spec__", "__reduce__", "__reduce_ex__"})
DUNDER_ATTRS_ALLOWED = frozenset({"__init__", "__name__", "__doc__", "__qualname__"})
DUNDER_DEFS_ALLOWED = frozenset({"__init__", "__repr__", "__str__", "__post_init__"})
# PyTorch tensor methods that Triton's tl.tensor does not have (in-place `x_` methods are caught by name).
TORCH_ONLY_METHODS = frozenset({"clone", "detach", "numpy", "tolist", "item", "cpu", "cuda", "data_ptr", "storage",
                                "untyped_storage", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor",
                                "contiguous", "copy", "set"})
JIT_NAMES = frozenset({"triton.jit", "triton.runtime.jit", "triton.runtime.jit.jit"})
# Bare names assumed when the module never binds them (an evaluator may pre-import them).
_DEFAULT_ALIASES = {"torch": "torch", "triton": "triton", "tl": "triton.language", "nn": "torch.nn",
                    "F": "torch.nn.functional"}


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _op(name: str) -> str:
    """`relu_` -> `relu`: in-place variants compute too."""
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


class Analysis:
    """One pass of facts the checks share: aliases, kernels, node roles, and name resolution."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.nodes = list(ast.walk(tree))
        self.hits: list[tuple[ast.AST, tuple[str, str]]] | None = None  # see _classified
        self.aliases: dict[str, str] = {}
        self.called: set[int] = set()  # ids of expressions in call position
        self.inner: set[int] = set()  # ids of Attribute.value nodes (only whole chains are judged)
        self.local_defs = {n.name for n in self.nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        for n in self.nodes:
            if isinstance(n, ast.Call):
                self.called.add(id(n.func))
            elif isinstance(n, ast.Attribute):
                self.inner.add(id(n.value))
            elif isinstance(n, ast.Import):
                for a in n.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                for a in n.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{n.module}.{a.name}"
        bound = {n.id for n in self.nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        bound |= {n.arg for n in self.nodes if isinstance(n, ast.arg)}
        for name, qual in _DEFAULT_ALIASES.items():
            if name not in self.aliases and name not in bound:
                self.aliases[name] = qual
        self._resolve_assignments()
        self.kernels = {n.name: n for n in self.nodes if isinstance(n, ast.FunctionDef)
                        and any(self.qual(_undecorate(d)) in JIT_NAMES for d in n.decorator_list)}
        self.in_jit: set[int] = {id(m) for k in self.kernels.values() for m in ast.walk(k)}
        self.kernel_names = set(self.kernels)  # plus names and self-attributes bound to a kernel
        changed = True
        while changed:
            changed = False
            for target, value in self._pairs():
                name = _tail(target) if _key(target) else None
                if name and name not in self.kernel_names and _tail(value) in self.kernel_names:
                    self.kernel_names.add(name)
                    changed = True

    def _pairs(self):
        for n in self.nodes:
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple) and len(t.elts) == len(n.value.elts):
                        yield from zip(t.elts, n.value.elts, strict=True)
                    else:
                        yield t, n.value
            elif isinstance(n, ast.AnnAssign | ast.NamedExpr) and n.value is not None:
                yield n.target, n.value

    def _resolve_assignments(self) -> None:
        """Flow-insensitive fixpoint: a name bound to a module member anywhere is treated as that member."""
        pairs = [(_key(t), v) for t, v in self._pairs()]
        pairs = [(k, v) for k, v in pairs if k]
        changed = True
        while changed:
            changed = False
            for key, value in pairs:
                qual = self.qual(value)
                if qual and key not in self.aliases:
                    self.aliases[key] = qual
                    changed = True

    def qual(self, node: ast.AST) -> str | None:
        """The dotted module path an expression names (`T.nn.functional.relu` -> `torch.nn.functional.relu`)."""
        parts: list[str] = []
        while True:
            key = _key(node)
            if key and key in self.aliases:
                return ".".join([self.aliases[key], *reversed(parts)])
            if isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            elif _literal_getattr(node):
                parts.append(node.args[1].value)
                node = node.args[0]
            else:
                return None


def _key(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
        return f"{node.value.id}.{node.attr}"
    return None


def _tail(node: ast.AST) -> str | None:
    """The last name of a Name or attribute chain (`self.kern` -> `kern`)."""
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _literal_getattr(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str))


def _undecorate(node: ast.AST) -> ast.AST:
    return node.func if isinstance(node, ast.Call) else node


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
    """Every import, whole name chain or literal getattr that `classify` assigns to `check_name`."""
    if a.hits is None:  # computed once per tree, shared by the checks
        a.hits = []
        for n in a.nodes:
            quals: list[str] = []
            if isinstance(n, ast.Import):
                quals = [al.name for al in n.names]
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                quals = [f"{n.module}.{al.name}" for al in n.names if al.name != "*"]
            elif isinstance(n, ast.Name | ast.Attribute) and id(n) not in a.inner or _literal_getattr(n):
                q = a.qual(n)
                quals = [q] if q else []
            a.hits += [(n, hit) for hit in map(classify, quals) if hit]
    found = _Findings()
    for n, (name, why) in a.hits:
        if name == check_name:
            found.add(n, why)
    return found


# ---- the checks ------------------------------------------------------------------------------


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
            if q and q.startswith("torch.") and not any(p in TORCH_CALLS_ALLOWED for p, _ in _prefixes(q)) \
                    and not classify(q):
                found.add(n, f"{q}(...) is not allowed: PyTorch may only allocate outputs and query shapes; "
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
    found = _Findings()
    for n in ast.walk(tree):
        if isinstance(n, ast.Try | ast.TryStar):
            found.add(n, "try/except is not allowed (no fallbacks); let errors surface")
        elif isinstance(n, ast.With | ast.AsyncWith):
            for item in n.items:
                if "suppress" in ast.unparse(item.context_expr) or "ExitStack" in ast.unparse(item.context_expr):
                    found.add(n, f"`with {ast.unparse(item.context_expr)}` swallows exceptions")
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
    # Rationale: open/exec/eval/__import__/globals/setattr and computed getattr reach files or hide what runs.
    a = _analysis(tree)
    found = _Findings()
    for n in a.nodes:
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


STATIC_CHECKS: list[tuple[str, Callable[[ast.Module, str], Check]]] = [
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

    A check that raises fails closed: the submission is rejected with the analysis error, never run.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        where = f"line {exc.lineno}, column {exc.offset}: " if exc.lineno else ""
        return {"parses": Check(False, f"{where}SyntaxError: {exc.msg}")}
    except (ValueError, RecursionError, MemoryError) as exc:
        return {"parses": Check(False, f"the source cannot be parsed: {type(exc).__name__}: {exc}")}
    checks = {"parses": Check(True)}
    for name, fn in STATIC_CHECKS:
        try:
            checks[name] = fn(tree, source)
        except RecursionError:
            checks[name] = Check(False, "the code is nested too deeply to analyse; simplify it")
        except Exception as exc:  # noqa: BLE001 - a bug in a check must not let code through unchecked
            checks[name] = Check(False, f"static check could not analyse the code: {type(exc).__name__}: {exc}")
    return checks


def first_failure(checks: dict[str, Check]) -> tuple[str, Check] | None:
    """The first failed check in order, or None when all passed."""
    return next(((name, c) for name, c in checks.items() if not c.passed), None)
