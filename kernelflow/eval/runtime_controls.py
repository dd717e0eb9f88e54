"""Runtime controls the worker applies around every call of a submission's forward.

- `DispatchGuard` (built by `make_guard`): a TorchDispatchMode that records every aten op outside an
  allow-list (allocation, views, shape queries), PyTorch called from inside a Triton launch under the
  interpreter, and host escapes (`Tensor.numpy`, `__array__`, `tolist`).
- `LaunchCounter`: wraps the launch methods of Triton's kernel classes to count launches of the
  submission's own kernels (Triton's launch hook is silent under the interpreter) and to start the
  call's clock at its first launch.
- `identity_snapshot()`: ids of the timers and launchers a submission could replace.

The worker reports what these saw; the judge decides. Runs inside the worker process only.
"""

from __future__ import annotations

import json
import threading
import time

# Aten ops a forward may run: allocation, fills, views and shape queries. Anything else is PyTorch
# doing the task's work (the kernel must do it).
ALLOWED_ATEN = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "fill_", "zero_",
    "view", "_unsafe_view", "reshape", "as_strided", "alias", "detach", "t", "transpose", "permute",
    "squeeze", "unsqueeze", "flatten", "unflatten", "expand", "slice", "select", "split", "chunk",
    "contiguous", "clone", "lift_fresh", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "is_contiguous", "_local_scalar_dense", "resize_", "set_", "view_as", "narrow",
})


# The subset of ALLOWED_ATEN that queues no device work: a call's clock may start at its first launch
# only when nothing but these ran before it.
ALLOCATION_AND_VIEWS = ALLOWED_ATEN - {"fill_", "zero_", "clone", "contiguous", "zeros", "zeros_like", "ones",
                                       "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full",
                                       "resize_", "set_", "_local_scalar_dense"}


# What the Triton interpreter itself runs while it executes a launch (it copies arguments in and out
# through numpy); any other aten op during a launch is a kernel body calling PyTorch.
INTERPRETER_OWN = frozenset({"copy_", "new_empty", "set_", "empty", "empty_like", "empty_strided", "view",
                             "as_strided", "alias", "detach", "lift_fresh", "_local_scalar_dense", "zeros", "full"})
# Ways to leave PyTorch with a CPU tensor's values and compute elsewhere (numpy, Python lists).
HOST_ESCAPES = ("numpy", "__array__", "tolist")



class LaunchCounter:
    """Counts Triton launches by wrapping the launch methods of Triton's kernel classes.

    Triton's own launch hook does not fire under the interpreter, so the `run` methods of
    `JITFunction` and `InterpretedFunction` are wrapped at class level before the submission is
    imported. While a launch runs, the dispatch guard is paused: the interpreter makes aten copies of
    its own that are not the submission's work.
    """

    def __init__(self, module_name: str):
        self.module_name = module_name
        self.own = 0
        self.other = 0
        self.in_launch = 0
        self.wrapped: list[tuple[type, object]] = []
        self.on_first_launch = None  # set per call: records the start event at the call's first launch

    def reset(self) -> None:
        """Forget the launches counted so far (the worker's own warm-up launch, before any submission)."""
        self.own = self.other = 0

    def install(self) -> None:
        import triton.runtime.jit as jit

        classes = [jit.JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        except ImportError:  # pragma: no cover - triton without an interpreter
            pass
        for cls in classes:
            run = self._wrap(cls.run)
            cls.run = run
            self.wrapped.append((cls, run))

    def _wrap(self, original):
        counter = self

        def run(fn_self, *args, **kwargs):
            if not kwargs.get("warmup", False):
                owner = getattr(getattr(fn_self, "fn", None), "__module__", None)
                if owner == counter.module_name:
                    counter.own += 1
                else:
                    counter.other += 1
                if counter.on_first_launch is not None:
                    hook, counter.on_first_launch = counter.on_first_launch, None
                    hook()
            counter.in_launch += 1
            try:
                return original(fn_self, *args, **kwargs)
            finally:
                counter.in_launch -= 1

        return run

    def intact(self) -> bool:
        return all(cls.run is run for cls, run in self.wrapped)


def make_guard(counter: LaunchCounter):
    from torch.utils._python_dispatch import TorchDispatchMode

    class DispatchGuard(TorchDispatchMode):
        """Records every aten op outside the allow-list while forward runs (outside Triton launches)."""

        def __init__(self):
            super().__init__()
            self.violations: list[str] = []
            self.device_work_before_launch = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.__name__.split(".")[0]
            if counter.in_launch:
                allowed = name in INTERPRETER_OWN
            else:
                if counter.on_first_launch is not None and name not in ALLOCATION_AND_VIEWS:
                    self.device_work_before_launch = True
                allowed = name in ALLOWED_ATEN or name.rstrip("_") in ALLOWED_ATEN
            if not allowed and len(self.violations) < 20:
                self.violations.append(str(func.__name__) + (" (inside a Triton launch)" if counter.in_launch else ""))
            return func(*args, **(kwargs or {}))

        def __enter__(self):
            # Block the host escapes too: values pulled out to numpy or lists dispatch no aten op.
            self._saved = {n: getattr(torch.Tensor, n) for n in HOST_ESCAPES}
            for n, original in self._saved.items():
                setattr(torch.Tensor, n, self._blocked(n, original))
            return super().__enter__()

        def __exit__(self, *exc):
            try:
                return super().__exit__(*exc)
            finally:
                for n, original in self._saved.items():
                    setattr(torch.Tensor, n, original)

        def _blocked(self, n, original):
            guard = self

            def escape(tensor, *args, **kwargs):
                if counter.in_launch:  # the interpreter's own conversions
                    return original(tensor, *args, **kwargs)
                guard.violations.append(f"Tensor.{n}")
                raise RuntimeError(f"Tensor.{n}() is not allowed in forward: compute in a @triton.jit kernel")

            return escape

    import torch

    return DispatchGuard


def identity_snapshot() -> dict[str, int]:
    """ids of the functions a submission could replace to fake a time or a launch."""
    import torch
    import triton

    targets = {
        "time.perf_counter": time.perf_counter,
        "time.time": time.time,
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.cuda._sleep": torch.cuda._sleep,
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Event.record": torch.cuda.Event.record,
        "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
        "torch.cuda.Event.synchronize": torch.cuda.Event.synchronize,
        "torch.Tensor.copy_": torch.Tensor.copy_,
        "torch.empty_like": torch.empty_like,
        "triton.jit": triton.jit,
        "threading.active_count": threading.active_count,
        "json.dumps": json.dumps,
    }
    return {name: id(obj) for name, obj in targets.items()}


