"""The worker: runs one submission in a fresh process and reports what it saw, never what it concluded.

Started by `session/worker_handle.py` as `python -m kernelflow.eval.worker.main` in its own temporary directory, process
group and scrubbed environment, one submission per process. It connects to the judge, warms up
(imports torch and triton, installs the launch counter, on CUDA initialises its context) and says
`warm`; then it waits for its one submission (a `judge` message, sent at once to a fresh worker or
later to a pre-warmed one: the same protocol). Before that it may be given the session's gate event
and done flag (`gates`) and, on a worker that will never see a submission, asked for
empty gated calls that calibrate the judge's clock (`probe`). It runs the submission from the text
the judge checked (`worker_submission.load_submission`), builds `ModelNew`, and serves `call` requests: each runs
`forward` once on inputs the judge chose, under the runtime controls (worker/controls.py), and
reports what they saw (protocol.py). On CUDA the call waits for the judge's gate event before
anything runs, writes the call's done value into the judge's flag after forward's launches, exports
its output's storage so the judge reads it directly, and after its reply waits for its own GPU work:
if that failed it says `gpu_fault` (the flag will never come; clock/gpu_signal.py). On the CPU
the output and the inputs, copied as forward left them, go back as raw frames. The worker never sees
an expected output and measures no time the verdict uses: the judge's clock is the judge's (clock/gated_clock.py).

Threat model: everything here runs in the submission's process, so the submission's Python can reach
and replace it. Nothing this process says decides a verdict alone: the judge reads the outputs
itself and times from its own side; the runtime controls are a first layer (PyTorch doing the work,
no launch, foreign launches, threads, tampering, a switched-off guard) backed by the static checks.
The operating system confines the process (sandbox/policy.py).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
from multiprocessing.connection import Client

from kernelflow.eval import protocol
from kernelflow.eval.worker.controls import (
    LaunchCounter,
    Tripwires,
    identity_snapshot,
    make_guard,
    os_thread_count,
    tampered_names,
)
from kernelflow.eval.worker.refs import FrameWriter, Refs, frozen_builtins
from kernelflow.eval.worker.submission import is_compile_error, load_submission, output_problem, trim_traceback

# A private copy of the builtins (worker/refs.py): a submission that rebinds `builtins.type`, `len` or
# `isinstance` changes nothing this module calls. Before the first def: functions take it when defined.
__builtins__ = frozen_builtins()
_perf_counter, _active_count, _collect = time.perf_counter, threading.active_count, gc.collect


class Report(Exception):
    """A fatal event to send to the judge (import failure, bad constructor)."""

    def __init__(self, payload):
        super().__init__(type(payload).__name__)
        self.payload = payload


def _hook_slots() -> tuple:
    """(label, getter, setter) of each interpreter hook that runs Python code on later calls."""
    return (("sys.setprofile", sys.getprofile, sys.setprofile), ("sys.settrace", sys.gettrace, sys.settrace),
            ("threading.setprofile", threading.getprofile, threading.setprofile),
            ("threading.settrace", threading.gettrace, threading.settrace))


class Worker:
    """One submission's process-side harness (see the module docstring)."""

    def __init__(self, setup: dict, conn):
        import torch

        self.torch = torch
        self.conn = conn
        # Every frame the worker sends goes through this writer, and every tensor, storage and CUDA call
        # after the submission's import through `refs`: both captured now, before any submission exists.
        self.write = FrameWriter(conn.fileno())
        self.refs = Refs(torch)
        self.backend = setup["backend"]
        self.device = torch.device(setup["device"])
        self.cuda = self.device.type == "cuda"
        self.submission_path = ""  # known at the handover (`receive_submission`)
        self.init_inputs: list = []
        self.module_name = "submission"
        self.counter = LaunchCounter(self.module_name)
        self.buffers: dict[str, list] = {}
        self.model = None
        self.gate = self.flag = None  # the judge's gate event and done flag (CUDA)
        self.seq = 0  # the current call's done value (the judge's nonce), written into the flag behind forward
        self.fault = ""  # why the flag could not be written (a failed context)
        self.outputs: list = []  # the last call's output, alive until the next call (the judge reads it)
        self.hooks: list = []  # (label, getter, setter, the worker's own hook) per profile/trace slot (warm)
        self.pending_hooks: list[str] = []  # hooks found and removed between calls, reported with the next

    def send(self, msg) -> None:
        self.write(protocol.encode(msg))

    # ---- start-up -------------------------------------------------------------------------------
    def warm(self, t0: float) -> None:
        """Everything that does not depend on the submission; then say `warm` and wait for it."""
        torch = self.torch
        import triton  # noqa: F401  (after the judge set TRITON_INTERPRET in our environment)

        if self.cuda:
            torch.cuda.set_device(self.device)
            torch.cuda.init()
            # The flag's fill kernel, loaded now: lazy module loading at the first call's signal would
            # synchronise this context inside the judge's window.
            torch.zeros(1, dtype=torch.int32, device=self.device).fill_(1)
            torch.cuda.synchronize()
        self.counter.install(cuda=self.cuda)
        self.hooks = [(label, get, put, get()) for label, get, put in _hook_slots()]  # ours (None, or a coverage tracer)
        self.tripwires = Tripwires(self.module_name)
        self.tripwires.install()
        self.guard_cls = make_guard(self.counter, interpreter=not self.cuda)
        # One launch of our own under the guard, so the one-off costs of a process's first Triton launch
        # under a dispatch mode are not charged to the submission's first call (worker/warm_kernel.py). Its
        # count is reset before any submission exists; a failure here is the evaluator's, not a verdict.
        from kernelflow.eval.worker.warm_kernel import launch_under

        t_warm = time.perf_counter()
        if not launch_under(self.guard_cls(), self.device):
            raise RuntimeError("the warm-up kernel computed a wrong result")
        self.counter.reset()
        self.warm_kernel_s = time.perf_counter() - t_warm
        self.warmup_s = time.perf_counter() - t0
        self.send(protocol.Warm(self.warmup_s, self.warm_kernel_s, os.getpid(), threading.active_count(),
                                os_thread_count()))

    def receive_submission(self) -> bool:
        """Serve `gates` and `probe` until the judge hands over the one submission; False if told to exit."""
        while True:
            msg = self.conn.recv()
            op = msg.get("op")
            if op == "gates":
                self.gate = self.torch.cuda.Event.from_ipc_handle(self.device, msg["gate"])
                self.flag = msg["flag"]  # an int32 in the judge's arena (torch's CUDA IPC)
            elif op == "probe":  # an empty gated call: what the judge's clock reads for no work
                self.torch.cuda.current_stream().wait_event(self.gate)
                self.flag.fill_(int(msg["seq"]))
                self.send(protocol.Probed())
            elif op == "judge":
                self.submission_path = str(msg["submission_path"])
                self.init_inputs = list(msg.get("init_inputs", []))
                return True
            else:
                return False

    def start(self) -> None:
        torch = self.torch
        self.identities = identity_snapshot(self.guard_cls)
        import_start = _perf_counter()
        try:
            module = load_submission(self.module_name, self.submission_path)
        except BaseException as exc:  # noqa: BLE001 - any failure of the submission's import is reported
            kind = "compile_error" if is_compile_error(exc) else "runtime_error"
            if isinstance(exc, SystemExit):
                kind = "runtime_error"
            raise Report(protocol.ImportFailed(kind, trim_traceback(exc, self.submission_path))) from None
        model_cls = getattr(module, "ModelNew", None)
        if model_cls is None:
            raise Report(protocol.ImportFailed("compile_error", "the module defines no ModelNew"))
        try:
            with torch.no_grad():
                self.model = model_cls(*self.init_inputs).to(self.device)
        except BaseException as exc:  # noqa: BLE001
            raise Report(protocol.ImportFailed(
                "runtime_error", "ModelNew(...) failed: " + trim_traceback(exc, self.submission_path))) from None
        # A hook set at import or in the constructor would run between calls, where the next call's inputs
        # are in reach and no guard runs: removed now, reported with the first call.
        self.pending_hooks = self._hooks_removed()
        self.send(protocol.Ready(self.warmup_s, _perf_counter() - import_start))

    # ---- calls ----------------------------------------------------------------------------------
    def _hooks_removed(self) -> list[str]:
        """The profile/trace hooks the submission left installed, each put back to ours.

        Such a hook runs the submission's code inside the worker's own after forward returns: outside
        the guard, before the output is read (the red team's a13 filled its output from one). Called
        first thing after forward, still inside the guard, so what a hook does on seeing it is guarded."""
        found = []
        for label, get, put, ours in self.hooks:
            if get() is not ours:
                put(ours)
                found.append(label)
        return found

    def _more_hooks(self, hooks: list[str]) -> list[str]:
        return hooks + [h for h in self._hooks_removed() if h not in hooks]

    def _inputs_for(self, msg: dict) -> list:
        torch = self.torch
        if msg.get("slot") is not None:
            return list(self.buffers[msg["slot"]])
        dtype = getattr(torch, msg["dtype"])
        return [torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)
                for raw, shape in zip(msg["input_bytes"], msg["shapes"], strict=True)]

    def call(self, msg: dict) -> None:
        torch, refs = self.torch, self.refs
        hooks, self.pending_hooks = self._more_hooks(self.pending_hooks), []
        inputs = self._inputs_for(msg)
        expected_shape = tuple(msg["out_shape"])
        self.outputs = []  # the previous call's output may go now: the judge has copied it
        launches0, foreign0 = self.counter.own, self.counter.other
        guard = self.guard_cls()
        if self.cuda:
            # Nothing of this call may run before the judge's clock starts: the gate opens right after it.
            with refs.no_torch_function():
                refs.stream_wait_event(refs.current_stream(), self.gate)
            self.seq = int(msg["seq"])
        t0 = _perf_counter()
        self.tripwires.tripped.clear()
        self.tripwires.armed = True
        snapshot = None
        try:
            with torch.no_grad(), guard:
                out = self.model(*inputs)
                hooks = self._more_hooks(hooks)  # first, still inside the guard
                canary = guard.check_canary()  # on the host: no GPU op inside the judge's window
                problem = output_problem(refs, out, inputs, expected_shape, msg["out_dtype"])
                if problem is None and not self.cuda:
                    # What the judge reads, taken now as immutable bytes through the captured C accessors:
                    # nothing the submission left behind (a finaliser, a hook we missed, a replaced Tensor
                    # method, a function mode) can change it once the worker's own code runs.
                    snapshot = [refs.as_bytes(out)] + [refs.as_bytes(x) for x in inputs]
        except BaseException as exc:  # noqa: BLE001 - reported, never raised
            self._hooks_removed()
            self.tripwires.armed = False
            guard.violations.extend(self.tripwires.tripped)
            signalled = self._signal() if self.cuda else True  # the judge's clock must stop whatever happened
            kind = "compile_error" if is_compile_error(exc) and msg.get("first") else "runtime_error"
            text = trim_traceback(exc, self.submission_path)
            if isinstance(exc, SystemExit):
                text = "the submission tried to exit the process (SystemExit)"
            self.send(protocol.CallFailed(kind, text, guard.violations[:20], not signalled or
                                          "CUDA error" in text or "illegal" in text.lower()))
            if self.cuda and signalled:
                self._settle()
            return
        self.tripwires.armed = False
        guard.violations.extend(self.tripwires.tripped)
        host_ms = (_perf_counter() - t0) * 1e3
        # Everything on the host happens before DONE and the reply goes right after it: the judge queues
        # its END when the reply arrives, and host work of ours in between would sit inside its window
        # while the GPU idles (measured on the H200: every control read 1.4-2 ms slow). The GPU is still
        # behind the gate here as long as the judge's spin outlasts this path (clock/gated_clock.py).
        tampered = tampered_names(self.identities, identity_snapshot(self.guard_cls))
        if refs.function_modes():  # a TorchFunctionMode left entered sees every torch call of the process
            tampered.append("a TorchFunctionMode left active")
        if not self.counter.intact():
            tampered.append("triton launch methods")
        shared = nbytes = None
        if problem is None:
            if self.cuda:
                shared, problem = self._export(out)
                if problem is not None and ("CUDA error" in problem or "illegal" in problem.lower()):
                    # An asynchronous fault of an earlier call's kernels (an illegal address) surfaces at
                    # the first CUDA call after them: the kernel's failure, as a synchronising worker reported
                    # it. No flag: this context can queue nothing more, and the judge does not wait for one.
                    self.send(protocol.CallFailed("runtime_error", problem, guard.violations[:20], True))
                    return
            else:
                nbytes = len(snapshot[0])
        hooks = self._more_hooks(hooks)  # one set again after the guard (a finaliser, say)
        if self.cuda and not self._signal():
            self.send(protocol.CallFailed("runtime_error", self.fault, guard.violations[:20], True))
            return
        self.send(protocol.Called(problem, self.counter.own - launches0, self.counter.other - foreign0,
                                  [v[:200] for v in guard.violations[:20]], _active_count(),
                                  os_thread_count(), tampered[:20], canary, host_ms, shared, nbytes, hooks))
        if problem is None and not self.cuda:
            # the output, then each input (the judge checks they were left unchanged), as forward left them
            for data in snapshot:
                self.write(data)
        if self.cuda:
            self._settle()
        self.pending_hooks = self._hooks_removed()  # none may run until the next call: reported with it
        # No GPU work of ours follows the flag: it would compete with the judge's END for the GPU (contexts are
        # time-sliced) and lengthen the window. A never-written output is still caught: every call's
        # inputs are fresh (plan.py), so a stale block holds another call's results and fails the check.

    def _signal(self) -> bool:
        """Write this call's done value into the judge's flag behind forward's work; False if CUDA refused."""
        try:
            with self.refs.no_torch_function():
                self.refs.fill_(self.flag, self.seq)
            return True
        except Exception as exc:  # noqa: BLE001 - a sticky fault of this context (an illegal address)
            self.fault = f"the kernel failed on the GPU: {type(exc).__name__}: {exc}"[:1500]
            return False

    def _settle(self) -> None:
        """After a CUDA reply: wait for our own GPU work; if it failed, say so (the flag never comes).

        Host-side only, after the reply: the judge's END does not wait for this, only for the flag."""
        try:
            with self.refs.no_torch_function():
                self.refs.stream_synchronize(self.refs.current_stream())
        except Exception as exc:  # noqa: BLE001
            self.send(protocol.GpuFault(f"{type(exc).__name__}: {exc}"[:1500]))

    def _export(self, out):
        """The output's CUDA storage exported for the judge (kept alive until the next call)."""
        refs = self.refs
        try:
            with refs.no_torch_function():
                storage = refs.untyped_storage(out)
                _dev, handle, size, offset, ref, ref_offset, event, sync = refs.share_cuda(storage)
                element_offset = refs.storage_offset(out)
        except Exception as exc:  # noqa: BLE001 - e.g. memory the caching allocator does not own
            return None, f"the output's memory cannot be shared with the judge ({type(exc).__name__}: {exc})"[:1500]
        self.outputs = [out]
        return protocol.SharedOutput(self.device.index or 0, bytes(handle).hex(), int(size), int(offset),
                                     bytes(ref).decode(errors="replace"), int(ref_offset),
                                     bytes(event or b"").hex(), bool(sync), int(element_offset)), None

    def map_buffers(self, msg: dict) -> None:
        self.buffers[msg["slot"]] = list(msg["inputs"])
        self.send(protocol.Mapped())

    def serve(self) -> None:
        while True:
            msg = self.conn.recv()
            op = msg.get("op")
            if op == "call":
                self.call(msg)
            elif op == "map":
                self.map_buffers(msg)
            elif op == "exit":
                self.send(protocol.Bye(self.release_buffers()))
                return

    def release_buffers(self) -> bool:
        """Drop our handles on the judge's shared buffers, so the judge may free them (session/ipc_arena.py)."""
        try:
            self.buffers.clear()
            self.outputs = []
            self.model = None  # the submission may keep references to its inputs
            _collect()
            if self.refs.cuda_initialized():
                self.refs.cuda_synchronize()
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
    from kernelflow.eval.sandbox.confine import confine_early, confine_late

    confinement = setup.pop("isolation", None)  # sandbox/policy.py: no_new_privs + Landlock now, single-threaded
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
        worker.send(protocol.Confined(list(applied), confine_error))
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
