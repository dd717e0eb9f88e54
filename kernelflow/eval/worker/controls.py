"""Runtime controls the worker applies around every call of a submission's forward.

- `DispatchGuard` (built by `make_guard`): a TorchDispatchMode that records every aten op outside an
  allow-list (allocation, views, shape queries), PyTorch called from inside a Triton launch (a
  kernel body under the interpreter, or a launch's grid callable), and host escapes (`Tensor.numpy`,
  `__array__`, `tolist`). After forward returns, still inside the guard, the worker runs a canary op
  that the guard must see: a guard that was popped or switched off is reported (`canary_seen`).
- `LaunchCounter`: counts launches of the submission's own kernels, and foreign ones (torch.compile's
  generated kernels, library kernels). Under the interpreter it wraps `InterpretedFunction.run`; on
  CUDA it wraps the driver's launcher class (`CudaLauncher`), through which every Triton launch goes,
  `JITFunction.run` and a compiled kernel's `CompiledKernel[grid](...)` / `.run(...)` alike.
- `identity_snapshot()`: ids of the functions and classes a submission could replace to fake a
  launch or hide PyTorch work, and of every attribute of the classes the worker's own code or its
  channel goes through (`torch.Tensor`, storages, CUDA streams and events, `Connection`, the json
  encoder); `tampered_names` compares two snapshots (changed, added and removed entries).

These run inside the worker, so the submission's Python can reach them: they are a cheap first layer
that catches what honest-looking code does, backed by the static checks (which reject the names that
reach them) and by what the judge decides from its own side (outputs, time: session/). The worker
reports what they saw; the judge decides.
"""

from __future__ import annotations

import json
import threading
import time

from kernelflow.eval.worker.launch_args import launch_argument_problem
from kernelflow.eval.worker.launch_args import prime as prime_launch_args
from kernelflow.eval.worker.refs import frozen_builtins

__builtins__ = frozen_builtins()  # worker/refs.py: builtins rebound by the submission change nothing here

# Aten ops a forward may run: allocation, fills, views and shape queries. Anything else is PyTorch
# doing the task's work (the kernel must do it). Not `_local_scalar_dense` (`float(t)`, `t.item()`): it
# reads a tensor's values into Python, where a loop of them computes the answer (the red team's a04);
# the interpreter's own in-launch reads are allowed by INTERPRETER_OWN.
ALLOWED_ATEN = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "fill_", "zero_",
    "view", "_unsafe_view", "reshape", "as_strided", "alias", "detach", "t", "transpose", "permute",
    "squeeze", "unsqueeze", "flatten", "unflatten", "expand", "slice", "select", "split", "chunk",
    "contiguous", "clone", "lift_fresh", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "is_contiguous", "resize_", "set_", "view_as", "narrow",
})


# What the Triton interpreter itself runs while it executes a launch (it copies arguments in and out
# through numpy); any other aten op during a launch is a kernel body calling PyTorch.
INTERPRETER_OWN = frozenset({"copy_", "new_empty", "set_", "empty", "empty_like", "empty_strided", "view",
                             "as_strided", "alias", "detach", "lift_fresh", "_local_scalar_dense", "zeros", "full"})
# Ways to leave PyTorch with a CPU tensor's values and compute elsewhere (numpy, Python lists).
HOST_ESCAPES = ("numpy", "__array__", "tolist")
# `fill_`/`zero_` of a view (an element, a row) per forward: writing an answer element by element from
# Python goes through them; an honest forward fills a few buffers whole, if any.
MAX_VIEW_FILLS = 16


class LaunchCounter:
    """Counts Triton launches by wrapping the launch entry points at class level (see the module docstring).

    `in_launch` is above zero while a launch's Python runs (its grid callable, the interpreter's own
    argument copies), so the guard can apply its in-launch rules there.
    """

    def __init__(self, module_name: str):
        self.module_name = module_name
        self.own = 0
        self.other = 0
        self.in_launch = 0
        self.wrapped: list[tuple[type, str, object]] = []

    def reset(self) -> None:
        """Forget the launches counted so far (the worker's own warm-up launch, before any submission)."""
        self.own = self.other = 0

    def install(self, cuda: bool) -> None:
        import triton.runtime.jit as jit

        prime_launch_args()

        # JITFunction.run: the grid callable and the compile happen inside it (in_launch), never counted
        # here on CUDA: the launcher below counts there, so a CompiledKernel launched directly is counted too.
        self._wrap(jit.JITFunction, "run", self._owner_of_jit, count=not cuda)
        if cuda:
            from triton.runtime.driver import driver

            launcher = driver.active.launcher_cls
            self._wrap(launcher, "__init__", None, count=False, remember_owner=True)
            self._wrap(launcher, "__call__", lambda obj: getattr(obj, "_kf_owner", None), count=True)
        else:
            try:
                from triton.runtime.interpreter import InterpretedFunction
            except ImportError:  # pragma: no cover - triton without an interpreter
                return
            self._wrap(InterpretedFunction, "run", self._owner_of_jit, count=True)

    @staticmethod
    def _owner_of_jit(fn_self) -> str | None:
        return getattr(getattr(fn_self, "fn", None), "__module__", None)

    def _wrap(self, cls: type, name: str, owner_of, count: bool, remember_owner: bool = False) -> None:
        original = getattr(cls, name)
        counter = self
        signatures: dict = {}

        def wrapper(obj, *args, **kwargs):
            if remember_owner:  # CudaLauncher(src, metadata): src.fn is the JITFunction it was compiled from
                src = args[0] if args else kwargs.get("src")
                obj._kf_owner = getattr(getattr(getattr(src, "fn", None), "fn", None), "__module__", None)
                return original(obj, *args, **kwargs)
            if count and not kwargs.get("warmup", False):
                if owner_of(obj) == counter.module_name:
                    counter.own += 1
                else:
                    counter.other += 1
            if name == "run":  # a launch: its arguments must be what a kernel takes (launch_args.py)
                problem = launch_argument_problem(obj, args, kwargs, signatures)
                if problem:
                    raise TypeError(problem)
            grid = kwargs.get("grid")
            if callable(grid):
                # The grid callable is the submission's host code, though the launch calls it: it runs with
                # the in-launch allowances off, so it cannot do the work with the interpreter's own ops
                # (red team round 1, a01: ReLU in Python scalars inside the grid, a no-op kernel).
                kwargs["grid"] = _as_host_code(grid, counter)
            counter.in_launch += 1
            try:
                return original(obj, *args, **kwargs)
            finally:
                counter.in_launch -= 1

        setattr(cls, name, wrapper)
        self.wrapped.append((cls, name, wrapper))

    def intact(self) -> bool:
        return all(getattr(cls, name) is fn for cls, name, fn in self.wrapped)


def _as_host_code(grid, counter: LaunchCounter):
    """`grid` wrapped so that it runs outside the launch window (`in_launch` lowered while it runs)."""

    def host_grid(*args, **kwargs):
        counter.in_launch -= 1
        try:
            return grid(*args, **kwargs)
        finally:
            counter.in_launch += 1

    return host_grid


def make_guard(counter: LaunchCounter, interpreter: bool):
    """The guard class for this worker; `interpreter`: in-launch aten ops are the interpreter's own copies."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    # The allow-lists as they are now, bound into the guard: the module globals can be rebound by code
    # that reaches this module (the red team's a12); a rebinding is also reported (identity_snapshot).
    allowed_aten, interpreter_own = frozenset(ALLOWED_ATEN), frozenset(INTERPRETER_OWN)
    host_escapes, max_view_fills = tuple(HOST_ESCAPES), int(MAX_VIEW_FILLS)
    fills = frozenset({"fill_", "zero_"})
    # Taken before any submission (worker/refs.py): the canary and the view test must not call what a
    # submission may have replaced since, and the host escapes are put back to these originals.
    tensor_cls, zeros, add_, is_view = torch.Tensor, torch.zeros, torch._C.TensorBase.add_, torch._C.TensorBase._is_view
    escape_originals = {n: getattr(torch.Tensor, n) for n in host_escapes}
    own_escapes = frozenset(n for n in host_escapes if n in vars(torch.Tensor))  # the rest are inherited

    class DispatchGuard(TorchDispatchMode):
        """Records every aten op outside the allow-list while forward runs (see the module docstring)."""

        def __init__(self):
            super().__init__()
            self.violations: list[str] = []
            self.canary: torch.Tensor | None = None
            self.canary_seen = False
            self.view_fills = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.__name__.split(".")[0]
            if self.canary is not None and args and args[0] is self.canary:
                self.canary_seen = True
                return func(*args, **(kwargs or {}))
            label = str(func.__name__)
            if counter.in_launch and interpreter:
                allowed = name in interpreter_own
            else:
                allowed = name in allowed_aten or name.rstrip("_") in allowed_aten
                if name in fills and args and isinstance(args[0], tensor_cls) and is_view(args[0]):
                    self.view_fills += 1
                    if self.view_fills > max_view_fills:
                        allowed = False
                        label += f" (more than {max_view_fills} fills of views in one forward: element-wise writes)"
            if not allowed and len(self.violations) < 20:
                self.violations.append(label + (" (inside a Triton launch)" if counter.in_launch else ""))
            return func(*args, **(kwargs or {}))

        def check_canary(self) -> bool:
            """Run one op the guard must see; False if the guard no longer intercepts (popped or disabled).
            On the host: the op only has to pass through the dispatcher, not run on the device."""
            self.canary = zeros(1)
            add_(self.canary, 1)
            self.canary = None
            return self.canary_seen

        def __enter__(self):
            # Block the host escapes too: values pulled out to numpy or lists dispatch no aten op.
            self._saved = escape_originals
            for n, original in self._saved.items():
                setattr(tensor_cls, n, self._blocked(n, original))
            return super().__enter__()

        def __exit__(self, *exc):
            try:
                return super().__exit__(*exc)
            finally:
                for n, original in self._saved.items():
                    if n in own_escapes:
                        setattr(tensor_cls, n, original)
                    else:  # inherited from the C base: leave torch.Tensor's own attributes as they were
                        delattr(tensor_cls, n)

        def _blocked(self, n, original):
            guard = self

            def escape(tensor, *args, **kwargs):
                if counter.in_launch and interpreter:  # the interpreter's own conversions
                    return original(tensor, *args, **kwargs)
                guard.violations.append(f"Tensor.{n}")
                raise RuntimeError(f"Tensor.{n}() is not allowed in forward: compute in a @triton.jit kernel")

            return escape

    return DispatchGuard


def identity_snapshot(guard_cls: type | None = None) -> dict[str, int]:
    """ids of the functions a submission could replace to fake a launch or hide PyTorch work."""
    import torch
    import triton
    from torch.utils import _python_dispatch

    targets = {
        # Timers no longer decide anything (the judge's clock does), but replacing one is still tampering.
        "time.perf_counter": time.perf_counter,
        "time.time": time.time,
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.cuda._sleep": torch.cuda._sleep,
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
        "torch.cuda.Event.synchronize": torch.cuda.Event.synchronize,
        "torch.Tensor.copy_": torch.Tensor.copy_,
        "torch.empty_like": torch.empty_like,
        "torch.cuda.Event.record": torch.cuda.Event.record,
        "torch.cuda.Stream.wait_event": torch.cuda.Stream.wait_event,
        "torch.UntypedStorage._share_cuda_": torch.UntypedStorage._share_cuda_,
        "triton.jit": triton.jit,
        "threading.active_count": threading.active_count,
        "json.dumps": json.dumps,
        "TorchDispatchMode.__enter__": _python_dispatch.TorchDispatchMode.__enter__,
        "TorchDispatchMode.__exit__": _python_dispatch.TorchDispatchMode.__exit__,
    }
    # The module's allow-list bindings (the guard uses its own bound copies; a rebinding is still tampering).
    for name in ("ALLOWED_ATEN", "INTERPRETER_OWN", "HOST_ESCAPES", "MAX_VIEW_FILLS"):
        targets[f"runtime_controls.{name}"] = globals().get(name)
    if guard_cls is not None:
        for name in ("__torch_dispatch__", "__enter__", "__exit__", "check_canary"):
            targets[f"DispatchGuard.{name}"] = guard_cls.__dict__[name]
        dispatch = guard_cls.__dict__["__torch_dispatch__"]
        for var, cell in zip(dispatch.__code__.co_freevars, dispatch.__closure__ or (), strict=True):
            targets[f"DispatchGuard.__torch_dispatch__ closure {var}"] = cell.cell_contents
    snapshot = {name: id(obj) for name, obj in targets.items()}
    for cls in _watched_classes(torch):
        for name, value in list(vars(cls).items()):
            snapshot[f"{cls.__module__}.{cls.__qualname__}.{name}"] = id(value)
    for module in (json, json.encoder):
        for name, value in list(vars(module).items()):
            if callable(value):
                snapshot[f"{module.__name__}.{name}"] = id(value)
    return snapshot


def _watched_classes(torch) -> list[type]:
    """The Python classes whose attributes the worker's code, its channel or torch's dispatch of the
    worker's calls go through after forward: a replaced attribute of one of them is tampering."""
    from multiprocessing import connection

    classes = [torch.Tensor, torch.UntypedStorage, torch.TypedStorage, connection.Connection,
               connection._ConnectionBase, json.JSONEncoder]
    for name in ("Stream", "Event"):
        cls = getattr(torch.cuda, name, None)
        if isinstance(cls, type):
            classes.append(cls)
    return classes


def tampered_names(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """Entries of `identity_snapshot` changed, added or removed between two snapshots (20 at most)."""
    changed = [k for k, v in after.items() if before.get(k) != v]
    removed = [k for k in before if k not in after]
    return (changed + removed)[:20]


def os_thread_count() -> int:
    """Threads of this process as the kernel sees them, native ones included (/proc/self/task)."""
    import os

    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # pragma: no cover - no procfs
        return threading.active_count()


# torch internals that switch a dispatch mode off or step around it (the class of issue #17's pure-PyTorch
# ReLU that earned 2.95): the static checks reject the names; if a submission reaches one anyway, the
# call it makes from its own code during forward is recorded here.
TRIPWIRES = (
    ("torch._C", "_DisableTorchDispatch"), ("torch._C", "_unset_dispatch_mode"),
    ("torch._C", "_ExcludeDispatchKeyGuard"), ("torch._C", "_ForceDispatchKeyGuard"),
    ("torch._C", "_DisablePythonDispatcher"), ("torch._C", "_DisableTorchFunction"),
    ("torch._C", "_DisableTorchFunctionSubclass"),
    ("torch.utils._python_dispatch", "_disable_current_modes"),
    ("torch.utils._python_dispatch", "_pop_mode_temporarily"),
)


class Tripwires:
    """Wraps each `TRIPWIRES` entry so a call from the submission's module while `armed` is recorded."""

    def __init__(self, module_name: str):
        self.module_name = module_name
        self.armed = False
        self.tripped: list[str] = []

    def install(self) -> None:
        import importlib
        import sys

        for module_path, name in TRIPWIRES:
            module = importlib.import_module(module_path)
            original = getattr(module, name, None)
            if original is None:
                continue
            label = f"{module_path}.{name}"

            def wire(*args, _original=original, _label=label, **kwargs):
                caller = sys._getframe(1).f_globals.get("__name__")
                if self.armed and caller == self.module_name and len(self.tripped) < 20:
                    self.tripped.append(f"{_label} (switches the PyTorch-op guard off)")
                return _original(*args, **kwargs)

            setattr(module, name, wire)
