"""The name tables the static checks judge by (see `static/checks.py` for the checks themselves).

Frozen sets of dotted names and attribute names: which imports, torch calls and context managers are
allowed; which torch namespaces and tensor methods compute; which names reach streams, timers,
compilers, tensor subclasses, torch/triton internals, the Triton interpreter, per-process draws and
string evaluators; which modules the allowed ones re-export. Also the reason texts the model reads
(`_KERNEL_HINT`, `_MODULE_REASONS`, `_INTERPRETER_WHY`, `_NONDETERMINISM_WHY`) and two predicates on
names (`_is_dunder`, `_op`).

What it does not do: it walks no syntax tree and maps no name to a check. Resolving a submission's
names is `static/analysis.py`; deciding which check a resolved name breaks is `static/rules.py`.
"""

from __future__ import annotations

import builtins

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
# ---- names that reach what the import allow-list keeps out (see static_rules.reach, _attribute_hits) ----
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
# Reasons several checks give, in the words the model reads.
_INTERPRETER_WHY = ("code that behaves differently under the interpreter cannot be judged honestly; "
                    "do not read the environment, triton.knobs or triton's runtime internals")
_NONDETERMINISM_WHY = "a verdict must not depend on a per-process draw; make the kernel deterministic"


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _op(name: str) -> str:
    """`relu_` -> `relu`: in-place variants compute too."""
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name
