"""What a Triton launch may be given: the worker's check of every launch's arguments, before the launch runs.

Why: under the interpreter a `tl.constexpr` argument reaches the kernel body unchanged, so a host object
passed as one (a torch tensor, a lambda, a numpy array: through a launch keyword, a `triton.heuristics`
value or a default argument) gave the body a way to do the work in Python with the interpreter's in-launch
allowances (red team round 2a, 2026-12-03: b02, b04, b08, each `ok` 0.3). A kernel needs nothing of the
kind: pointer arguments are tensors, scalar arguments numbers, and constexpr arguments numbers, booleans,
strings, None or Triton dtypes. `launch_argument_problem` says what is wrong with a launch's arguments (the
launch wrapper in `controls.py` raises it as a TypeError, so the launch never runs: `runtime_error`).

Covered: every argument of every `JITFunction.run` / `InterpretedFunction.run` call (direct launches, and
those that autotune and heuristics make, which end there), bound to the kernel's parameters by name.
Launch options (`num_warps`, `num_stages`, ...) that are not parameters of the kernel are left to Triton.
Not covered: what a kernel does with a legal argument (the kernel language's static rules, issue #32).
"""

from __future__ import annotations

import inspect

from kernelflow.eval.worker.refs import frozen_builtins

__builtins__ = frozen_builtins()  # worker/refs.py: builtins rebound by the submission change nothing here

_SCALARS = (bool, int, float)
_signature = inspect.signature  # captured at import, before any submission exists
_TYPES: dict[str, type] = {}


def prime() -> None:
    """Capture the classes the check compares with (at the worker's warm-up, before the submission exists)."""
    import torch
    import triton.language as tl

    _TYPES.update(tensor=torch.Tensor, dtype=tl.dtype, constexpr=tl.constexpr)


def _constexpr_params(fn, cache: dict) -> dict[str, bool]:
    """name -> whether the parameter is a `tl.constexpr`, for the Python function behind a kernel."""
    key = id(fn)
    if key not in cache:
        params = {}
        for p in _signature(fn).parameters.values():
            ann = p.annotation
            params[p.name] = ann is _TYPES["constexpr"] or (isinstance(ann, str) and ann.split(".")[-1] == "constexpr")
        cache[key] = (fn, params)  # fn kept alive with its id
    return cache[key][1]


def _legal(value, constexpr: bool, tensor_type: type, dtype_type: type, constexpr_type: type) -> bool:
    if value is None or type(value) in _SCALARS or isinstance(value, dtype_type):
        return True
    if isinstance(value, constexpr_type):  # tl.constexpr(literal) wraps a plain value
        return _legal(value.value, constexpr, tensor_type, dtype_type, constexpr_type)
    if constexpr:
        return type(value) is str
    return isinstance(value, tensor_type)  # a pointer argument (nn.Parameter is a tensor too)


def launch_argument_problem(jit_fn, args: tuple, kwargs: dict, cache: dict) -> str | None:
    """None if every argument of this launch is legal for its parameter, else what is wrong (for the model)."""
    if not _TYPES:
        prime()
    fn = getattr(jit_fn, "fn", None)
    if fn is None or not callable(fn):
        return None
    params = _constexpr_params(fn, cache)
    names = list(params)
    bound = dict(zip(names, args, strict=False))
    bound.update({k: v for k, v in kwargs.items() if k in params})
    for name, value in bound.items():
        if not _legal(value, params[name], _TYPES["tensor"], _TYPES["dtype"], _TYPES["constexpr"]):
            kind = "constexpr " if params[name] else ""
            allowed = ("a number, bool, string, None or Triton dtype" if params[name]
                       else "a tensor (a pointer), a number, a bool or None")
            return (f"kernel {getattr(fn, '__name__', '?')}: {kind}argument {name!r} got a "
                    f"{type(value).__name__}; it takes {allowed}")
    return None
