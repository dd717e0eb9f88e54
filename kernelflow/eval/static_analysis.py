"""Name resolution and the name tables behind the static checks (see `static_checks.py`).

`Analysis` walks a submission's syntax tree once: it resolves every name through import aliases and
simple assignments (class attributes too, as self.x; every binding of a rebound name is kept), and
records, per check, which qualified names were reached where. Resolution is a worklist, linear in the
node count (a chain written backwards no longer costs a pass per link). `classify` and `reach` map a
dotted name to the checks it breaks; `_attribute_hits` does the same for an attribute name on an
object of unknown type (a module hidden in a container is still caught by what it is asked for). The frozen
sets below say which imports, torch calls, tensor methods and dunders are allowed or forbidden; the
checks in `static_checks.py` read them. This module decides nothing itself.
"""

from __future__ import annotations

import ast
import builtins
from collections import deque

from kernelflow.eval.static_reexports import REEXPORT_ALIASES, canonical_forms
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
    **dict.fromkeys(("random", "secrets", "uuid"), "draws per-process randomness; a verdict must not depend on it"),
}
TORCH_CALLS_ALLOWED = frozenset({
    "torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros", "torch.zeros_like", "torch.ones",
    "torch.ones_like", "torch.full", "torch.full_like", "torch.Size", "torch.device", "torch.is_tensor",
    "torch.is_floating_point", "torch.no_grad", "torch.inference_mode", "torch.get_default_dtype", "torch.finfo",
    "torch.iinfo", "torch.promote_types", "torch.cuda.is_available", "torch.cuda.current_device",
    "torch.cuda.device", "torch.cuda.device_count", "torch.cuda.get_device_properties",
    "torch.cuda.get_device_capability", "torch.cuda.get_device_name", "torch.cuda.synchronize",
    "torch.nn.Module", "torch.nn.Parameter", "torch.nn.ModuleList", "torch.nn.ModuleDict",
    "torch.nn.ParameterList", "torch.nn.ParameterDict", "torch.nn.Buffer",
    # torch.nn.init by whole name: the module also holds `torch` itself (torch.nn.init.torch.relu, red team a05)
    *(f"torch.nn.init.{f}" for f in """calculate_gain constant constant_ dirac dirac_ eye eye_ kaiming_normal
      kaiming_normal_ kaiming_uniform kaiming_uniform_ normal normal_ ones_ orthogonal orthogonal_ sparse sparse_
      trunc_normal_ uniform uniform_ xavier_normal xavier_normal_ xavier_uniform xavier_uniform_ zeros_""".split()),
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
# ---- names that reach what the import allow-list keeps out (see check_no_forbidden_modules and after) ----
# Attribute names under which torch, triton and the allowed stdlib modules hold a module that is off the
# allow-list (torch.functional.np, triton.runtime.jit.os, triton.language.core.builtins, typing.sys, ...).
# Generated on torch 2.11 / triton 3.6 by walking sys.modules after `import torch, triton.language` under
# TRITON_INTERPRET=1 and keeping every `vars(module)` entry that is a module with a root not allowed.
# On a chain that resolves to an allowed module every one of them is rejected.
REEXPORTED_MODULES = frozenset("""
_compat_pickle _operator _osp _socket _sys _thread _types _warnings argparse ast atexit base64 bisect bltns
builtins cmath concurrent contextlib contextvars copy copymodule copyreg ctypes datetime difflib dill dis errno
fnmatch gc glob gzip hashlib heapq importlib inspect io json keyword linecache locale logging mp
multiprocessing np numpy operator os pathlib pickle pickletools pkgutil platform pprint python_multiprocessing
queue random re reducer reduction shutil signal statistics stdlib_re string struct subprocess sys sysconfig
tarfile tempfile textwrap threading time tokenize torchgen traceback types unittest uuid warnings weakref
zipfile zlib
""".split())
# Harmless, common words among them: rejected only on a resolved module chain, not on any object.
_GENERIC_MODULE_WORDS = frozenset("""
argparse ast base64 bisect cmath copy difflib errno fnmatch hashlib heapq json keyword locale pprint queue re
statistics stdlib_re string struct textwrap zlib
""".split())
# Rejected as an attribute of anything (a module can hide in a container or a return value): the dangerous
# re-exports plus every root the import check refuses for a reason, and their private aliases.
ESCAPE_MODULE_ATTRS = (REEXPORTED_MODULES - _GENERIC_MODULE_WORDS) | frozenset({
    "posix", "posixpath", "_posixsubprocess", "_ctypes", "cffi", "mmap", "resource", "faulthandler", "pty",
    "socket", "ssl", "http", "urllib", "requests", "asyncio", "runpy", "code", "marshal", "shelve", "timeit",
    "secrets", "scipy", "cupy", "numba", "jax", "pandas", "_os", "_np", "_numpy", "_random", "_time",
    "_gc", "_inspect", "_importlib", "_builtins", "_contextlib", "_threading", "_multiprocessing",
})
# torch / triton internals reachable from an object of unknown type: rejected as an attribute of anything.
INTERNAL_ATTRS = frozenset({
    "_C", "_VF", "_ops", "_dynamo", "_inductor", "_python_dispatch", "_subclasses", "_guards", "_functorch",
    "_higher_order_ops", "_library", "_prims", "_refs", "_decomp", "_dispatch", "_jit_internal",
    "_utils_internal", "_mode_utils", "_export", "_meta_registrations", "_custom_op", "_custom_ops",
    "_lazy", "_native", "_logging", "_environment", "aten", "prims", "libtriton", "library",
})
# Namespaces that are raw operator registries or hook points, whatever is reached through them.
INTERNAL_NAMES = frozenset({"torch.ops", "torch.library", "torch.overrides", "torch.utils.hooks",
                            "torch.autograd.graph", "torch.utils.weak", "torch.utils.backend_registration"})
# Reading these tells the submission whether it runs under the Triton interpreter (or changes how it runs).
INTERPRETER_NAMES = frozenset({
    "triton.knobs", "triton.runtime.interpreter", "triton.runtime.driver", "triton.runtime.build",
    "triton.runtime.cache", "triton.runtime.errors", "triton.runtime.MockTensor", "triton.runtime.TensorWrapper",
    "triton.MockTensor", "triton.TensorWrapper", "triton.InterpreterError", "triton.runtime.InterpreterError",
    "triton.backends", "triton.compiler", "triton.compile", "triton.tools", "triton.set_allocator",
})
INTERPRETER_ATTRS = frozenset({"environ", "environb", "getenv", "putenv", "unsetenv", "knobs", "interpreter",
                               "interpreter_builder", "InterpreterBuilder", "InterpretedFunction",
                               "InterpreterError", "MockTensor", "TensorWrapper", "interpret", "_interpret"})
INTERPRETER_STRINGS = ("TRITON_INTERPRET", "InterpretedFunction", "interpreter_builder")
# Per-process draws: a verdict that depends on one could be a lucky draw, and verdicts are cached.
NONDETERMINISM_ROOTS = frozenset({"random", "secrets", "uuid", "time", "datetime", "timeit", "threading",
                                  "_thread"})
NONDETERMINISM_ATTRS = frozenset("""
random secrets uuid uuid1 uuid4 urandom getrandom getrandbits randbits token_bytes token_hex token_urlsafe
getpid getppid get_ident get_native_id time time_ns datetime threading seed initial_seed manual_seed
get_rng_state set_rng_state rand randn randint randperm rand_like randn_like randint_like bernoulli
multinomial normal_ uniform_ random_ exponential_ geometric_ cauchy_ log_normal_ default_generator
Generator
""".split())
NONDETERMINISM_BUILTINS = frozenset({"id", "hash"})
# Context managers a submission may enter; anything else can swallow exceptions (contextlib.suppress renamed).
WITH_ALLOWED = frozenset({"torch.no_grad", "torch.inference_mode", "torch.enable_grad", "torch.set_grad_enabled",
                          "torch.cuda.device", "torch.device", "torch.cuda.device_of", "torch.autocast",
                          "torch.amp.autocast", "torch.cuda.amp.autocast"})
# Builtins a @triton.jit body may call (triton's CodeGenerator.builtin_namespace, plus harmless ones): on a
# GPU anything else fails to compile, so under the interpreter it would run code the GPU never runs.
KERNEL_BUILTINS = frozenset({"len", "list", "range", "float", "int", "isinstance", "getattr", "hasattr", "print",
                             "min", "max", "abs", "bool", "tuple", "zip", "enumerate"})
# Functions that evaluate a string as code (string annotations, forward references).
EVAL_NAMES = frozenset({"typing.get_type_hints", "typing.ForwardRef", "typing_extensions.get_type_hints",
                        "typing_extensions.ForwardRef", "typing.get_overloads", "functools.singledispatch",
                        "functools.singledispatchmethod", "typing.evaluate_forward_ref",
                        "typing_extensions.evaluate_forward_ref", "typing_extensions.get_annotations"})
EVAL_ATTRS = frozenset({"get_type_hints", "ForwardRef", "get_annotations", "_eval_type", "evaluate_forward_ref",
                        "singledispatch", "singledispatchmethod", "_evaluate"})
# Modules a submission may name; used as a value (in a list, as an argument) any of them is rejected.
KNOWN_MODULES = frozenset({
    "torch", "torch.nn", "torch.nn.functional", "torch.functional", "torch.cuda", "torch.ops", "torch.utils",
    "torch.backends", "torch.autograd", "torch.library", "torch.linalg", "torch.special", "torch.fft",
    "torch.random", "torch.testing", "torch.types", "torch.jit", "torch.fx", "torch.overrides", "triton",
    "triton.language", "triton.language.core", "triton.language.math", "triton.language.extra",
    "triton.language.semantic", "triton.runtime", "triton.runtime.jit", "triton.runtime.autotuner",
    "triton.compiler", "triton.testing", "triton.backends", "triton.knobs", "math", "typing", "typing_extensions",
    "functools", "itertools", "dataclasses", "enum", "numbers", "collections", "collections.abc", "abc",
})
_BUILTIN_NAMES = frozenset(dir(builtins))
# Bare names assumed when the module never binds them (an evaluator may pre-import them).
_DEFAULT_ALIASES = {"torch": "torch", "triton": "triton", "tl": "triton.language", "nn": "torch.nn",
                    "F": "torch.nn.functional"}


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _op(name: str) -> str:
    """`relu_` -> `relu`: in-place variants compute too."""
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


class Analysis:
    """One pass of facts the checks share: aliases, kernels, node roles, and name resolution.

    Linear in the node count: resolution and the kernel-name closure are worklists (each binding is
    retried at most once per name it waits on), and `qual` is memoised once the aliases are final.
    """

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.nodes = list(ast.walk(tree))
        self.hits: list[tuple[ast.AST, tuple[str, str]]] | None = None  # see _classified
        self.aliases: dict[str, str] = {}
        # Further things a name is bound to (`a = torch.nn` and `a = torch`): every one is judged.
        self.alternates: dict[str, set[str]] = {}
        self._memo: dict[int, str | None] | None = None
        self.called: set[int] = set()  # ids of expressions in call position
        self.inner: set[int] = set()  # ids of Attribute.value nodes (only whole chains are judged)
        self.local_defs = {n.name for n in self.nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        self.imported_modules: set[str] = set()  # `import x.y [as z]`: x (or x.y) names a module
        for n in self.nodes:
            if isinstance(n, ast.Call):
                self.called.add(id(n.func))
            elif isinstance(n, ast.Attribute):
                self.inner.add(id(n.value))
            elif isinstance(n, ast.Import):
                for a in n.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                    self.imported_modules.add(a.name if a.asname else a.name.split(".")[0])
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                for a in n.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{n.module}.{a.name}"
        bound = {n.id for n in self.nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        bound |= {n.arg for n in self.nodes if isinstance(n, ast.arg)}
        for name, qual in _DEFAULT_ALIASES.items():
            if name not in self.aliases and name not in bound:
                self.aliases[name] = qual
                self.imported_modules.add(qual)
        # Right-hand sides bound to a name or self-attribute (a module may be aliased there, nowhere else).
        self.bound_values = {id(v) for t, v in self._pairs() if _key(t)}
        self.overbound: dict[str, ast.AST] = {}  # names bound to more distinct things than are tracked
        self._resolve_assignments()
        self._memo = {}
        self.kernels = {n.name: n for n in self.nodes if isinstance(n, ast.FunctionDef)
                        and any(self.qual(_undecorate(d)) in JIT_NAMES for d in n.decorator_list)}
        self.in_jit: set[int] = {id(m) for k in self.kernels.values() for m in ast.walk(k)}
        self.kernel_names = set(self.kernels)  # plus names and self-attributes bound to a kernel
        edges: dict[str, list[str]] = {}
        for target, value in self._pairs():
            name, source = (_tail(target) if _key(target) else None), _tail(value)
            if name and source:
                edges.setdefault(source, []).append(name)
        todo = list(self.kernel_names)
        while todo:
            for name in edges.get(todo.pop(), ()):
                if name not in self.kernel_names:
                    self.kernel_names.add(name)
                    todo.append(name)

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
        """Flow-insensitive: a name bound to a module member anywhere is treated as that member (each binding)."""
        pairs = [(_key(t), v) for t, v in self._pairs()]
        # A class attribute (`class M: t = typing`) is read back as self.t / cls.t.
        for c in self.nodes:
            if isinstance(c, ast.ClassDef):
                for stmt in c.body:
                    for t in stmt.targets if isinstance(stmt, ast.Assign) else \
                            [stmt.target] if isinstance(stmt, ast.AnnAssign) and stmt.value else []:
                        if isinstance(t, ast.Name):
                            pairs += [(f"self.{t.id}", stmt.value), (f"cls.{t.id}", stmt.value)]
        pairs = [(k, v) for k, v in pairs if k]
        waiting: dict[str, list[int]] = {}
        done: set[int] = set()
        todo = deque(range(len(pairs)))
        while todo:
            i = todo.popleft()
            if i in done:
                continue
            key, value = pairs[i]
            qual = self.qual(value)
            if qual is None:
                for dep in _chain_keys(value):
                    waiting.setdefault(dep, []).append(i)
                continue
            done.add(i)
            if key not in self.aliases:
                self.aliases[key] = qual
                todo.extend(waiting.pop(key, ()))
            elif self.aliases[key] != qual and qual not in self.alternates.setdefault(key, set()):
                if len(self.alternates[key]) < 16:
                    self.alternates[key].add(qual)
                else:
                    self.overbound.setdefault(key, value)

    def _chain(self, node: ast.AST) -> tuple[str, list[str]] | None:
        """(alias key, attribute names after it) for an expression rooted at a bound name, else None."""
        parts: list[str] = []
        while True:
            key = _key(node)
            if key and key in self.aliases:
                parts.reverse()
                return key, parts
            if isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            elif _literal_getattr(node):
                parts.append(node.args[1].value)
                node = node.args[0]
            else:
                return None

    def qual(self, node: ast.AST) -> str | None:
        """The dotted module path an expression names (`T.nn.functional.relu` -> `torch.nn.functional.relu`)."""
        memo = self._memo
        if memo is None:  # still resolving: aliases may grow
            chain = self._chain(node)
            return None if chain is None else ".".join([self.aliases[chain[0]], *chain[1]])
        path: list[tuple[ast.AST, str]] = []
        while id(node) not in memo:  # down to a memoised node or the chain's base, then fill in upwards
            key = _key(node)
            if key and key in self.aliases:
                memo[id(node)] = self.aliases[key]
            elif isinstance(node, ast.Attribute):
                path.append((node, node.attr))
                node = node.value
            elif _literal_getattr(node):
                path.append((node, node.args[1].value))
                node = node.args[0]
            else:
                memo[id(node)] = None
        base = memo[id(node)]
        for outer, attr in reversed(path):
            base = None if base is None else f"{base}.{attr}"
            memo[id(outer)] = base
        return base

    def quals(self, node: ast.AST) -> list[str]:
        """Every dotted path an expression may name: `qual`, and the same chain through each other binding."""
        chain = self._chain(node)
        if chain is None:
            return []
        key, parts = chain
        return [".".join([base, *parts]) for base in [self.aliases[key], *sorted(self.alternates.get(key, ()))]]


def _chain_keys(node: ast.AST) -> list[str]:
    """The names an expression's resolution waits on (`self.f.g` -> `self.f`, `self`)."""
    keys = []
    while True:
        key = _key(node)
        if key:
            keys.append(key)
        if isinstance(node, ast.Attribute):
            node = node.value
        elif _literal_getattr(node):
            node = node.args[0]
        else:
            return keys


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


_INTERPRETER_WHY = ("code that behaves differently under the interpreter cannot be judged honestly; "
                    "do not read the environment, triton.knobs or triton's runtime internals")
_NONDETERMINISM_WHY = "a verdict must not depend on a per-process draw; make the kernel deterministic"


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
                hit = classify(q)
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
