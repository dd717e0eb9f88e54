"""Name resolution and the name tables behind the static checks (see `static_checks.py`).

`Analysis` walks a submission's syntax tree once: it resolves every name through import aliases and
simple assignments, and records, per check, which qualified names were reached where. The frozen
sets below say which imports, torch calls, tensor methods and dunders are allowed or forbidden; the
checks in `static_checks.py` read them. This module decides nothing itself.
"""

from __future__ import annotations

import ast

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


