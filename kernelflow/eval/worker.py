"""The worker: runs one submission in a fresh process and reports what it saw, never what it concluded.

Started by `prewarm.py` as `python -m kernelflow.eval.worker` in its own temporary directory, process
group and scrubbed environment, one submission per process. It connects to the judge, warms up
(imports torch and triton, installs the launch counter, on CUDA initialises its context) and says
`warm`; then it waits for its one submission (a `judge` message, sent at once to a fresh worker or
later to a pre-warmed one: the same protocol). It imports the submission, builds `ModelNew`, and
then serves "call" requests: each call runs `forward` once on inputs the judge chose,
timed (CUDA events, L2 flushed first, device-wide synchronize before the end event) and watched by
runtime controls, and hands the output back to the judge. The judge (another process) holds the
reference and compares; the worker never sees an expected output.

Threat model. Covered:
- PyTorch doing the task's work inside forward (a TorchDispatchMode allow-list: allocation, views and
  shape queries only), so `x * (x > 0)` beside a launched decoy kernel is caught;
- no Triton launch of the submission's own kernels during a call (class-level launch counter);
- timers, Triton's launcher or torch functions replaced from inside the submission (identities
  snapshotted before the import and re-checked after every call);
- threads started by the submission (thread count before/after);
- lazy/proxy/subclass outputs, wrong shape/dtype/device, non-contiguous or aliased outputs;
- forged results on stdout/stderr: the judge reads only the private channel (an authenticated local
  socket whose key arrives on stdin and is dropped before the submission is imported);
- crashes, hangs, floods and exits: the judge sees a dead or silent worker and gives a verdict.
Not covered (documented in the README): this is not a sandbox for hostile native code. A submission
that reaches ctypes, os or the channel object through an escape the static checks miss could write
files outside its directory or forge the timing it reports; correctness is still decided by the judge
from the output buffer, and the roofline floor rejects impossible times.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import math
import os
import sys
import threading
import time
import traceback
from multiprocessing.connection import Client

from kernelflow.eval.runtime_controls import LaunchCounter, identity_snapshot, make_guard


class Report(Exception):
    """A fatal event to send to the judge (import failure, bad constructor)."""

    def __init__(self, event: str, **fields):
        super().__init__(event)
        self.payload = {"event": event, **fields}


def _trim_traceback(exc: BaseException, submission_path: str, limit: int = 1500) -> str:
    """The exception with only the submission's own frames, so line numbers are the model's."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == submission_path]
    lines = [f"  line {f.lineno}, in {f.name}: {(f.line or '').strip()}" for f in frames[-6:]]
    head = f"{type(exc).__name__}: {exc}"
    text = ("\n".join(lines) + "\n" if lines else "") + head
    return text[-limit:]


def _is_compile_error(exc: BaseException) -> bool:
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"CompilationError", "CompileTimeAssertionFailure", "InterpreterError", "SyntaxError",
                         "ImportError", "NameError", "UnsupportedLanguageConstruct"})


class Worker:
    """One submission's process-side harness (see the module docstring)."""

    def __init__(self, setup: dict, conn):
        import torch

        self.torch = torch
        self.conn = conn
        self.backend = setup["backend"]
        self.device = torch.device(setup["device"])
        self.submission_path = ""  # known at the handover (`receive_submission`)
        self.init_inputs: list = []
        self.l2_flush_bytes = int(setup.get("l2_flush_mb", 256)) << 20
        self.module_name = "submission"
        self.counter = LaunchCounter(self.module_name)
        self.buffers: dict[str, object] = {}
        self.model = None
        self.l2 = None
        self.timer_overhead_ms: float | None = None  # measured alone on the GPU before the first forward

    def send(self, payload: dict) -> None:
        self.conn.send_bytes(json.dumps(payload).encode())

    # ---- start-up -------------------------------------------------------------------------------
    def warm(self, t0: float) -> None:
        """Everything that does not depend on the submission; then say `warm` and wait for it."""
        torch = self.torch
        import triton  # noqa: F401  (after the judge set TRITON_INTERPRET in our environment)

        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            torch.cuda.init()
            self.l2 = torch.empty(self.l2_flush_bytes, dtype=torch.uint8, device=self.device)
        self.counter.install()
        self.guard_cls = make_guard(self.counter)
        # One launch of our own under the guard, so the one-off costs of a process's first Triton launch
        # under a dispatch mode are not charged to the submission's first call (warm_kernel.py). Its
        # count is reset before any submission exists; a failure here is the evaluator's, not a verdict.
        from kernelflow.eval.warm_kernel import launch_under

        t_warm = time.perf_counter()
        if not launch_under(self.guard_cls(), self.device):
            raise RuntimeError("the warm-up kernel computed a wrong result")
        self.counter.reset()
        self.warm_kernel_s = time.perf_counter() - t_warm

        self.warmup_s = time.perf_counter() - t0
        self.send({"event": "warm", "warmup_s": self.warmup_s, "warm_kernel_s": self.warm_kernel_s,
                   "pid": os.getpid()})

    def receive_submission(self) -> bool:
        """Block until the judge hands over the one submission; False if told to exit instead."""
        msg = self.conn.recv()
        if msg.get("op") != "judge":
            return False
        self.submission_path = str(msg["submission_path"])
        self.init_inputs = list(msg.get("init_inputs", []))
        return True

    def start(self) -> None:
        torch = self.torch
        self.identities = identity_snapshot()
        self.threads = threading.active_count()
        import_start = time.perf_counter()
        try:
            spec = importlib.util.spec_from_file_location(self.module_name, self.submission_path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[self.module_name] = module
            spec.loader.exec_module(module)
        except BaseException as exc:  # noqa: BLE001 - any failure of the submission's import is reported
            kind = "compile_error" if _is_compile_error(exc) else "runtime_error"
            if isinstance(exc, SystemExit):
                kind = "runtime_error"
            raise Report("import_failed", kind=kind, error=_trim_traceback(exc, self.submission_path)) from None
        model_cls = getattr(module, "ModelNew", None)
        if model_cls is None:
            raise Report("import_failed", kind="compile_error", error="the module defines no ModelNew")
        try:
            with torch.no_grad():
                self.model = model_cls(*self.init_inputs).to(self.device)
        except BaseException as exc:  # noqa: BLE001
            raise Report("import_failed", kind="runtime_error",
                         error="ModelNew(...) failed: " + _trim_traceback(exc, self.submission_path)) from None
        self.send({"event": "ready", "startup_s": self.warmup_s, "import_s": time.perf_counter() - import_start})

    # ---- calls ----------------------------------------------------------------------------------
    def _poison(self, nbytes: int) -> None:
        """Fill freed allocator blocks with NaN so a never-written output cannot reuse old results."""
        torch = self.torch
        if self.device.type != "cuda":
            return
        block = torch.empty(nbytes // 4 + 1, dtype=torch.float32, device=self.device)
        block.fill_(float("nan"))
        del block

    def _inputs_for(self, msg: dict) -> list:
        torch = self.torch
        if msg.get("slot") is not None:
            return list(self.buffers[msg["slot"]]["inputs"])
        dtype = getattr(torch, msg["dtype"])
        return [torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)
                for raw, shape in zip(msg["input_bytes"], msg["shapes"], strict=True)]

    def call(self, msg: dict) -> None:
        torch = self.torch
        t_setup = time.perf_counter()  # setup_ms: poisoning, the overhead measurement, the L2 flush
        inputs = self._inputs_for(msg)
        expected_shape = tuple(msg["out_shape"])
        out_dtype = getattr(torch, msg["out_dtype"])
        self._poison(math.prod(expected_shape) * out_dtype.itemsize)
        cuda = self.device.type == "cuda"
        launches0 = self.counter.own
        threads0 = threading.active_count()
        guard = self.guard_cls()
        result: dict = {"event": "called", "setup_ms": (time.perf_counter() - t_setup) * 1e3}
        if cuda:
            from kernelflow.eval.timing import cover_launch_latency, measure_timer_overhead, net_time_ms

            if self.timer_overhead_ms is None:
                # Not measured in a step of its own (the judge's exclusive lock mode): this first call
                # runs under the exclusive hold, so no verdict of ours overlaps it, and before the
                # submission's forward first executes, whatever its import did.
                self.timer_overhead_ms = measure_timer_overhead(self.device)
            self.l2.zero_()
            result["setup_ms"] = (time.perf_counter() - t_setup) * 1e3  # read before the clock starts
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            at_launch = torch.cuda.Event(enable_timing=True)
            # The clock starts at the call's first Triton launch when only allocation and views ran
            # before it (host-side Python is not kernel time); otherwise at the start of forward.
            self.counter.on_first_launch = at_launch.record
            torch.cuda.synchronize()
            cover_launch_latency()  # the GPU spins while the host reaches its first launch (timing.py)
            start.record()
        t0 = time.perf_counter()
        try:
            with torch.no_grad(), guard:
                out = self.model(*inputs)
            if cuda:
                torch.cuda.synchronize()  # device-wide: work on any stream is counted
                end.record()
                end.synchronize()
        except BaseException as exc:  # noqa: BLE001 - reported, never raised
            self.counter.on_first_launch = None
            kind = "compile_error" if _is_compile_error(exc) and msg.get("first") else "runtime_error"
            text = _trim_traceback(exc, self.submission_path)
            if isinstance(exc, SystemExit):
                text = f"the submission tried to exit the process (SystemExit {exc.code!r})"
            self.send({"event": "call_failed", "kind": kind, "error": text, "violations": guard.violations,
                       "cuda_error": "CUDA error" in str(exc) or "illegal" in str(exc).lower()})
            return
        result["host_ms"] = (time.perf_counter() - t0) * 1e3
        if cuda:
            launched = self.counter.on_first_launch is None
            self.counter.on_first_launch = None
            from_launch = launched and not guard.device_work_before_launch
            raw = (at_launch if from_launch else start).elapsed_time(end)
            result["ms"] = net_time_ms(raw, self.timer_overhead_ms)
            result["ms_raw"] = raw
            result["ms_from_forward"] = start.elapsed_time(end)
        else:
            result["ms"] = None
        result["launches"] = self.counter.own - launches0
        result["violations"] = guard.violations
        result["threads_added"] = threading.active_count() - threads0
        result["tampered"] = [k for k, v in identity_snapshot().items() if self.identities.get(k) != v]
        if not self.counter.intact():
            result["tampered"].append("triton launch methods")
        problem = self._output_problem(out, inputs, expected_shape, msg["out_dtype"])
        result["output_problem"] = problem
        if problem is None:
            if cuda:
                t_copy = time.perf_counter()
                self.buffers[msg["slot"]]["output"].copy_(out)
                torch.cuda.synchronize()
                result["copy_ms"] = (time.perf_counter() - t_copy) * 1e3
                result["input_bytes_after"] = None
            else:
                result["output_len"] = out.numel() * out.element_size()
        self.send(result)
        if problem is None and not cuda:
            self.conn.send_bytes(out.detach().contiguous().numpy().tobytes())
            for x in inputs:  # as they are after the call: the judge checks they were left unchanged
                self.conn.send_bytes(x.detach().numpy().tobytes())

    def _output_problem(self, out, inputs, shape: tuple, dtype: str) -> str | None:
        """Why the output cannot be accepted as a plain, owned result tensor (None if it can)."""
        torch = self.torch
        if type(out) is not torch.Tensor:
            return f"forward returned {type(out).__name__}, expected a plain torch.Tensor"
        if tuple(out.shape) != shape:
            return f"output shape {tuple(out.shape)}, expected {shape}"
        if out.dtype != getattr(torch, dtype):
            return f"output dtype {out.dtype}, expected torch.{dtype}"
        if out.device != (inputs[0].device):
            return f"output on {out.device}, expected {inputs[0].device}"
        if not out.is_contiguous():
            return "output is not contiguous (strides " + str(out.stride()) + ")"
        if out.untyped_storage().nbytes() < out.numel() * out.element_size():
            return "output does not own storage for all its elements"
        o0 = out.untyped_storage().data_ptr()
        o1 = o0 + out.untyped_storage().nbytes()
        for t in inputs:
            i0 = t.untyped_storage().data_ptr()
            i1 = i0 + t.untyped_storage().nbytes()
            if o0 < i1 and i0 < o1:
                return "output shares memory with an input; write the result to a new tensor"
        return None

    def measure_overhead(self) -> None:
        """Measure the timer's overhead now: the judge holds the GPU alone and no forward has run yet.

        Under the interpreter nothing is timed, so there is nothing to measure.
        """
        if self.device.type == "cuda":
            from kernelflow.eval.timing import measure_timer_overhead

            self.timer_overhead_ms = measure_timer_overhead(self.device)
        self.send({"event": "measured", "timer_overhead_ms": self.timer_overhead_ms})

    def map_buffers(self, msg: dict) -> None:
        self.buffers[msg["slot"]] = {"inputs": msg["inputs"], "output": msg["output"]}
        self.send({"event": "mapped"})

    def serve(self) -> None:
        while True:
            msg = self.conn.recv()
            op = msg.get("op")
            if op == "call":
                self.call(msg)
            elif op == "measure":
                self.measure_overhead()
            elif op == "map":
                self.map_buffers(msg)
            elif op == "exit":
                self.send({"event": "bye", "released": self.release_buffers()})
                return

    def release_buffers(self) -> bool:
        """Drop our handles on the judge's shared buffers, so the judge may free them (ipc_arena.py)."""
        try:
            self.buffers.clear()
            self.model = None  # the submission may keep references to its inputs
            gc.collect()
            if self.torch.cuda.is_initialized():
                self.torch.cuda.synchronize()
            return True
        except BaseException:  # noqa: BLE001 - whatever the submission left behind, the verdict is already out
            return False


def main() -> None:
    import signal

    # Python ignores SIGXFSZ; restore the default so a worker that floods its capped output file dies.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    t0 = time.perf_counter()
    setup = json.loads(sys.stdin.readline())
    sys.stdin.close()
    from kernelflow.eval.isolation import confine_early, confine_late

    confinement = setup.pop("isolation", None)  # isolation.py: no_new_privs + Landlock now, single-threaded
    try:
        applied, confine_error = confine_early(confinement), None
    except Exception as exc:  # noqa: BLE001 - reported to the judge after the warm-up, which then discards us
        applied, confine_error = [], f"{type(exc).__name__}: {exc}"
    authkey = bytes.fromhex(setup.pop("authkey"))
    if setup["backend"] == "cuda":
        import torch.multiprocessing  # noqa: F401  (registers CUDA IPC reductions for the judge's buffers)
    conn = Client(setup.pop("address"), family="AF_UNIX", authkey=authkey)
    del authkey
    worker = Worker(setup, conn)
    try:
        worker.warm(t0)
        if confine_error is None:  # seccomp on every thread, after the warm-up, before any submission
            try:
                applied += confine_late(confinement)
            except Exception as exc:  # noqa: BLE001
                confine_error = f"{type(exc).__name__}: {exc}"
        worker.send({"event": "confined", "applied": applied, "error": confine_error})
        try:  # a pre-warmed worker may wait here long; a judge that goes away closes the socket
            # never judge unconfined: the judge discards a worker that could not confine itself
            judging = confine_error is None and worker.receive_submission()
        except (EOFError, OSError):
            judging = False
        if judging:
            worker.start()
            worker.serve()
    except Report as report:
        worker.send(report.payload)
    finally:
        conn.close()
    # Skip interpreter teardown: a submission's atexit/finalizers must not run after the verdict.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
