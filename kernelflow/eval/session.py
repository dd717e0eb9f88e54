"""The judge's side of one submission: start a fresh worker, feed it calls, check every output.

A `JudgeSession` owns one worker process (`worker.py`) from handover to kill. It takes a pre-warmed
worker from the evaluator's pool when there is one, else spawns a fresh one (`prewarm.py`: private
temporary directory, own process group, scrubbed environment, resource limits, authenticated local
socket; the same protocol either way), waits until it is warm, and hands it the submission. For
every call it draws fresh inputs from a new seed, hands them over (bytes on the CPU; CUDA IPC
buffers on a GPU, allocated once per shape), and, when the worker answers, checks the runtime
controls it reports, the output against a float64 reference computed here, and that the inputs are
unchanged. Every call is timed and checked the same way, so a submission cannot tell a check from a
measurement. The first failure ends the session. Inputs and float64 references of small shapes come
from the evaluator's `ReferenceCache` when it holds them (computed here and stored otherwise); they
never leave this process except as the input copy a call hands over.

It does not decide the reward, calibrate the device or time eager PyTorch (see `evaluator.py`), and
it never raises for anything a submission does: every path ends in a `SessionOutcome`.
"""

from __future__ import annotations

import json
import logging
import math
import signal
import statistics
import subprocess
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field

import torch
import torch.multiprocessing  # noqa: F401  (registers the CUDA IPC reductions used to share buffers)

from kernelflow.eval.cache import Reference, ReferenceCache, reference_key
from kernelflow.eval.config import EvalConfig
from kernelflow.eval.correctness import CompareResult, as_reference_input, check_against_reference, compare
from kernelflow.eval.ipc_arena import Arena, ArenaPool, bytes_needed
from kernelflow.eval.prewarm import SpawnSpec, WarmPool, WorkerHandle, WorkerStartError
from kernelflow.eval.verdict import Check, Status
from kernelflow.tasks import KERNELBENCH_TOLERANCE, Task, generate_inputs

log = logging.getLogger(__name__)


@dataclass
class CallSpec:
    label: str  # "seed 3", "odd shape", "repeat of seed 0", "timed 4"
    shapes: tuple[tuple[int, ...], ...]  # every input's shape, in forward's argument order
    seed: int
    main: bool  # main shape: its times feed the median
    timed: bool  # one of the final `timed_runs` calls
    repeat_of: int | None = None  # index of the call whose output this one must reproduce bit for bit


@dataclass
class SessionOutcome:
    """What happened in one session; `evaluator.py` turns it into a verdict."""

    status: str
    checks: dict[str, Check] = field(default_factory=dict)
    detail: str = ""  # the failure, for the model's feedback
    times_ms: list[float] = field(default_factory=list)
    compare: CompareResult | None = None
    worker_start_s: float | None = None
    import_s: float | None = None
    compile_s: float | None = None
    correctness_s: float | None = None
    timing_s: float | None = None
    reference_s: float = 0.0
    gpu_wait_s: float | None = None
    log_tail: str = ""


class LockHolds:
    """Which hold of the GPU lock a session's calls run under (`EvalConfig.gpu_lock`, gpu_lock.py).

    "exclusive": the first hold asked for is taken exclusively and kept to the end, whatever the calls.
    "shared_checks": each step asks for what it needs (`hold(exclusive)`): the timer-overhead step and
    the timed calls exclusive, the compilation and correctness calls shared; changing mode releases one
    hold and queues for the other (no upgrade in place: that deadlocks two upgraders). `gpu_lock` is
    the evaluator's context factory, `gpu_lock(shared=...)`.
    """

    def __init__(self, gpu_lock, mode: str) -> None:
        self.gpu_lock = gpu_lock
        self.mode = mode
        self.held: str | None = None  # "exclusive" or "shared"
        self.stack = ExitStack()
        self.waited_s = 0.0  # all waits for the lock, summed

    def hold(self, exclusive: bool) -> float:
        """Hold the lock in the mode this step needs; returns the seconds spent waiting for it."""
        want = "shared" if self.mode == "shared_checks" and not exclusive else "exclusive"
        if self.held == want:
            return 0.0
        self.stack.close()
        self.held = None
        t = time.monotonic()
        self.stack.enter_context(self.gpu_lock(shared=want == "shared"))
        self.held = want
        waited = time.monotonic() - t
        self.waited_s += waited
        return waited

    def close(self) -> None:
        self.stack.close()
        self.held = None


def build_plan(task: Task, config: EvalConfig, seeds: list[int], backend: str = "cuda") -> list[CallSpec]:
    """The calls of one session: seeds, the odd shape, a repeat, then `timed_runs` fresh calls.

    Under the interpreter nothing is timed, so only two of the final calls are made: they still
    check that fresh inputs in the same buffers give fresh, correct outputs.
    """
    main_shape = tuple(task.input_shapes(config.shape))
    final_calls = config.timed_runs if backend == "cuda" else min(2, config.timed_runs)
    plan = [CallSpec(f"seed {s}", main_shape, s, main=True, timed=False) for s in seeds]
    if config.check_odd_shape:
        odd = tuple(task.input_shapes(config.shape, odd=True))
        plan.append(CallSpec("odd shape", odd, seeds[-1] + 1000, main=False, timed=False))
    if config.check_determinism:
        plan.append(CallSpec(f"repeat of seed {seeds[0]}", main_shape, seeds[0], main=True, timed=False, repeat_of=0))
    for j in range(final_calls):
        plan.append(CallSpec(f"timed call {j + 1}", main_shape, seeds[-1] + 1 + j, main=True, timed=True))
    return plan


class JudgeSession:
    """One submission, one worker (see the module docstring)."""

    def __init__(self, task: Task, source: str, config: EvalConfig, backend: str, device: torch.device,
                 seeds: list[int], gpu_lock=nullcontext, pool: WarmPool | None = None,
                 references: ReferenceCache | None = None, evaluator_version: str = "",
                 arenas: ArenaPool | None = None):
        self.task = task
        self.gpu_lock = gpu_lock  # gpu_lock(shared=False): held as `LockHolds` says, so no work of ours overlaps a timing
        self.source = source
        self.config = config
        self.backend = backend
        self.device = device
        self.seeds = seeds
        self.tolerance = KERNELBENCH_TOLERANCE if config.tolerance_mode == "kernelbench" else task.tolerance
        self.distribution = config.distribution or task.distribution
        self.pool = pool
        self.references = references
        self.evaluator_version = evaluator_version
        self.handle: WorkerHandle | None = None
        self.prewarmed = False  # whether the worker came warm from the pool
        self.proc: subprocess.Popen | None = None
        self.conn = None
        self.deadline = 0.0
        self.buffers: dict[tuple, dict] = {}
        # CUDA: the buffers shared with the worker are carved from one arena of the evaluator's pool,
        # reused across sessions (ipc_arena.py says why they are never simply freed). A session made
        # without a pool gets its own, which nothing reuses: only for a lone session.
        self.arenas = arenas if arenas is not None else ArenaPool(device)
        self.arena: Arena | None = None
        self.worker_busy = False  # a request is out and unanswered: the worker may be stuck in the submission
        self.shape_sets: list[tuple] = []  # every input-shape set of the plan, so one arena holds them all
        self.output_specs: dict[tuple, tuple[tuple[int, ...], torch.dtype]] = {}
        self.ref_model = None

    # ---- process -------------------------------------------------------------------------------
    def _start_worker(self) -> None:
        """A warm worker holding this submission: from the pool if it has one, else freshly spawned."""
        spec = SpawnSpec.of(self.config, self.backend, self.device)
        handle = self.pool.acquire() if self.pool is not None and self.pool.spec == spec else None
        if handle is not None:
            try:
                handle.ensure_warm(self.deadline)
                if not handle.usable:
                    raise WorkerStartError("the pre-warmed worker died while it waited")
                handle.handover(self.source, self.task.init_inputs)
                self._adopt(handle)
                self.prewarmed = True
                return
            except TimeoutError:
                self._adopt(handle)  # still warming at the deadline: judged like a fresh worker that was slow
                raise
            except (WorkerStartError, EOFError, OSError) as exc:
                # The evaluator's trouble, not the submission's: fall back to a fresh worker.
                log.warning("a pre-warmed worker was unusable (%s); spawning a fresh one", exc)
                handle.close()
        handle = WorkerHandle(spec)
        handle.claim()
        self._adopt(handle)
        handle.ensure_warm(self.deadline)
        self.conn = handle.conn
        handle.handover(self.source, self.task.init_inputs)

    def _adopt(self, handle: WorkerHandle) -> None:
        self.handle, self.proc, self.log_path, self.conn = handle, handle.proc, handle.log_path, handle.conn

    def _send(self, msg: dict) -> None:
        self.conn.send(msg)
        self.worker_busy = True

    def _recv_json(self) -> dict:
        """The worker's next message; raises TimeoutError past the deadline, EOFError if it died."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0 or not self.conn.poll(remaining):
            raise TimeoutError
        data = self.conn.recv_bytes(64 << 20)
        self.worker_busy = False
        msg = json.loads(data)
        if not isinstance(msg, dict):
            raise EOFError("malformed message")
        return msg

    def _recv_raw(self, expected: int) -> bytes:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0 or not self.conn.poll(remaining):
            raise TimeoutError
        data = self.conn.recv_bytes(expected + 1)
        if len(data) != expected:
            raise EOFError(f"expected {expected} bytes, got {len(data)}")
        return data

    def _log_tail(self, limit: int = 800) -> str:
        try:
            data = self.log_path.read_bytes()[-limit:]
        except OSError:
            return ""
        return data.decode("utf-8", errors="replace")

    def _death_outcome(self, phase: str) -> SessionOutcome:
        """A worker that stopped talking: why, from its exit status and its output file."""
        code = self.proc.poll() if self.proc else None
        if code is None and self.proc is not None:
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
        size = self.log_path.stat().st_size if self.log_path.exists() else 0
        if code == -signal.SIGXFSZ or size >= (self.config.output_limit_mb << 20):
            why = f"the worker printed more than {self.config.output_limit_mb} MB and was stopped"
        elif code is not None and code < 0:
            why = f"the worker died from signal {signal.Signals(-code).name} during {phase}"
        else:
            why = f"the worker exited (status {code}) during {phase} without a result"
        return SessionOutcome(Status.CRASHED.value, {"worker_alive": Check(False, why)}, why, log_tail=self._log_tail())

    # ---- calls -----------------------------------------------------------------------------------
    def _output_spec(self, shapes: tuple) -> tuple[tuple[int, ...], torch.dtype]:
        """The shape and dtype forward must return for inputs of `shapes`, from the reference on the meta device.

        A floating reference result means the task's dtype (the reference runs in float64); an integer
        one (argmax indices) keeps its dtype.
        """
        if shapes not in self.output_specs:
            import copy

            meta_model = copy.deepcopy(self.ref_model).to("meta")
            dtype = getattr(torch, self.task.dtype)
            with torch.no_grad():
                out = meta_model(*[torch.empty(s, dtype=torch.float64, device="meta") for s in shapes])
            out_dtype = dtype if out.dtype.is_floating_point else out.dtype
            self.output_specs[shapes] = (tuple(out.shape), out_dtype)
        return self.output_specs[shapes]

    def _take_arena(self) -> Arena:
        """The session's arena, big enough for the inputs and output of every shape set of the plan."""
        if self.arena is None:
            dtype = getattr(torch, self.task.dtype)
            tensors = []
            for shapes in self.shape_sets:
                tensors += [(tuple(s), dtype) for s in shapes]
                tensors.append(self._output_spec(shapes))
            self.arena = self.arenas.acquire(bytes_needed(tensors))
        return self.arena

    def _buffers_for(self, shapes: tuple) -> dict:
        if shapes not in self.buffers:
            dtype = getattr(torch, self.task.dtype)
            out_shape, out_dtype = self._output_spec(shapes)
            arena = self._take_arena()
            buf = {"inputs": [arena.carve(tuple(s), dtype) for s in shapes],
                   "output": arena.carve(out_shape, out_dtype),
                   "scratch": [torch.empty(s, dtype=dtype, device=self.device) for s in shapes]}
            self._send({"op": "map", "slot": str(shapes), "inputs": buf["inputs"], "output": buf["output"]})
            msg = self._recv_json()
            if msg.get("event") != "mapped":
                raise EOFError("worker did not map the buffers")
            self.buffers[shapes] = buf
        return self.buffers[shapes]

    def _reference(self, spec: CallSpec) -> Reference | None:
        """The call's inputs and float64 reference from the cache (computed and stored on a miss).

        Kept on the CPU even for a CUDA session: a tensor of ours in device memory could share an
        allocator segment with the buffers the worker maps over CUDA IPC, and a kernel can read past
        its arguments. None when the cache is off or the entry exceeds its whole budget.
        """
        if self.references is None or self.ref_model is None:
            return None
        dtype = getattr(torch, self.task.dtype)
        out_shape, _ = self._output_spec(spec.shapes)
        numel_in = sum(math.prod(s) for s in spec.shapes)
        if not self.references.fits(numel_in * dtype.itemsize + math.prod(out_shape) * 8):
            return None
        key = reference_key(task_id=self.task.task_id, shapes=spec.shapes, seed=spec.seed,
                            distribution=self.distribution, dtype=self.task.dtype, device=str(self.device),
                            evaluator_version=self.evaluator_version)
        ref = self.references.get(key)
        if ref is None:
            xs = generate_inputs(spec.shapes, spec.seed, self.distribution, self.device, dtype=dtype)
            with torch.no_grad():
                expected = self.ref_model(*[as_reference_input(x) for x in xs])
            ref = Reference(tuple(x.cpu() for x in xs), expected.cpu())
            del xs, expected
            self.references.put(key, ref)
        return ref

    def _run_call(self, spec: CallSpec, first: bool,
                  ref: Reference | None = None) -> tuple[dict, torch.Tensor | None, list[torch.Tensor]]:
        """Send one call; returns (reply, output or None, inputs as given). `ref`: cached inputs to use."""
        dtype_name = self.task.dtype
        out_shape, out_dtype = self._output_spec(spec.shapes)
        msg = {"op": "call", "shapes": [list(s) for s in spec.shapes], "dtype": dtype_name,
               "out_shape": list(out_shape), "out_dtype": str(out_dtype).removeprefix("torch."),
               "first": first, "slot": None}
        if self.device.type == "cuda":
            buf = self._buffers_for(spec.shapes)
            if ref is not None:
                for dst, src in zip(buf["inputs"], ref.inputs, strict=True):
                    dst.copy_(src)
            else:
                generate_inputs(spec.shapes, spec.seed, self.distribution, self.device, out=buf["inputs"])
            # A worker that never copies its output leaves NaN (or the smallest integer) here.
            buf["output"].fill_(float("nan") if out_dtype.is_floating_point else torch.iinfo(out_dtype).min)
            torch.cuda.synchronize(self.device)
            msg["slot"] = str(spec.shapes)
            self._send(msg)
            reply = self._recv_json()
            torch.cuda.synchronize(self.device)
            return reply, (buf["output"] if reply.get("output_problem") is None else None), buf["inputs"]
        xs = list(ref.inputs) if ref is not None else generate_inputs(spec.shapes, spec.seed, self.distribution, "cpu")
        msg["input_bytes"] = [x.numpy().tobytes() for x in xs]
        self._send(msg)
        reply = self._recv_json()
        if reply.get("event") != "called" or reply.get("output_problem") is not None:
            return reply, None, xs
        out_bytes = math.prod(out_shape) * out_dtype.itemsize
        out = torch.frombuffer(bytearray(self._recv_raw(out_bytes)), dtype=out_dtype).reshape(out_shape)
        changed = False
        for x in xs:
            after = torch.frombuffer(bytearray(self._recv_raw(x.numel() * x.element_size())), dtype=x.dtype)
            changed = changed or not torch.equal(after.reshape(x.shape), x)
        reply["input_changed"] = changed
        return reply, out, xs

    def _input_changed(self, spec: CallSpec, given: list[torch.Tensor], reply: dict, ref: Reference | None = None) -> bool:
        if "input_changed" in reply:
            return bool(reply["input_changed"])
        if ref is not None:
            return any(not torch.equal(g.cpu(), r) for g, r in zip(given, ref.inputs, strict=True))
        scratch = self.buffers[spec.shapes]["scratch"]
        generate_inputs(spec.shapes, spec.seed, self.distribution, self.device, out=scratch)
        return any(not torch.equal(a, g) for a, g in zip(scratch, given, strict=True))

    def _judge_reply(self, spec: CallSpec, reply: dict, checks: dict[str, Check]) -> SessionOutcome | None:
        """Runtime controls reported by the worker; an outcome if one failed."""
        event = reply.get("event")
        if event == "call_failed" and reply.get("violations"):
            why = (f"{spec.label}: forward left Triton to compute ({', '.join(reply['violations'])}); "
                   "only allocation and views are allowed there")
            checks["pytorch_ops_in_forward"] = Check(False, why)
            return SessionOutcome(Status.REJECTED_RUNTIME_CHECK.value, checks, why)
        if event == "call_failed":
            status = Status.COMPILE_ERROR.value if reply.get("kind") == "compile_error" else Status.RUNTIME_ERROR.value
            why = f"{spec.label}: {reply.get('error', '')}"
            checks["forward_runs"] = Check(False, why)
            return SessionOutcome(status, checks, why)
        if event != "called":
            return SessionOutcome(Status.CRASHED.value, checks, f"unexpected message from the worker: {event!r}")
        runtime = [
            ("pytorch_ops_in_forward", not reply.get("violations"),
             "PyTorch computed in forward (" + ", ".join(reply.get("violations") or []) + "); only allocation and "
             "views are allowed there: do the math in a @triton.jit kernel"),
            ("triton_kernel_launched", reply.get("launches", 0) > 0,
             "forward launched none of the submission's @triton.jit kernels"),
            ("no_new_threads", reply.get("threads_added", 0) <= 0, "forward left new threads running"),
            ("harness_intact", not reply.get("tampered"),
             "the submission replaced " + ", ".join(reply.get("tampered") or []) + " (timers or launchers)"),
        ]
        for name, ok, why in runtime:
            checks[name] = Check(ok, "" if ok else f"{spec.label}: {why}")
            if not ok:
                return SessionOutcome(Status.REJECTED_RUNTIME_CHECK.value, checks, f"{spec.label}: {why}")
        problem = reply.get("output_problem")
        checks["output_tensor"] = Check(problem is None, f"{spec.label}: {problem}" if problem else "")
        if problem:
            return SessionOutcome(Status.INCORRECT.value, checks, f"{spec.label}: {problem}")
        return None

    def run(self) -> SessionOutcome:
        start = time.monotonic()
        self.deadline = start + self.config.timeout_s
        try:
            return self._run(start)
        except TimeoutError:
            why = f"the submission ran past the {self.config.timeout_s:.0f} s limit and was stopped"
            return SessionOutcome(Status.TIMEOUT.value, {"finished_in_time": Check(False, why)}, why,
                                  log_tail=self._log_tail() if hasattr(self, "log_path") else "")
        except WorkerStartError as exc:
            why = f"the worker could not be started: {exc}"[:1000]
            return SessionOutcome(Status.EVALUATOR_ERROR.value, {"worker_started": Check(False, why)}, why)
        except (EOFError, ConnectionError, OSError) as exc:
            if self.proc is None:
                why = f"the worker could not be started: {exc}"
                return SessionOutcome(Status.EVALUATOR_ERROR.value, {"worker_started": Check(False, why)}, why)
            return self._death_outcome("the evaluation")
        finally:
            clean = self._dismiss_worker()
            if self.handle is not None:
                self.handle.close()  # kills the process group, deletes the worker's directories
            self.buffers.clear()
            if self.arena is not None:  # only now: the worker that mapped it is dead
                self.arenas.release(self.arena, clean)
                self.arena = None
            if self.device.type == "cuda":
                torch.cuda.ipc_collect()  # frees shared blocks whose consumers all let go
                torch.cuda.empty_cache()

    def _dismiss_worker(self, wait_s: float = 5.0) -> bool:
        """Ask a live worker to drop its mapping of our buffers and exit; True if it confirmed.

        The worker's word only decides whether its arena may be freed later (never whether it is
        reused), so a worker that lies costs memory, not correctness.
        """
        if self.arena is None or self.worker_busy or self.conn is None or self.proc is None \
                or self.proc.poll() is not None:
            return False
        try:
            self.conn.send({"op": "exit"})
            if not self.conn.poll(wait_s):
                return False
            msg = json.loads(self.conn.recv_bytes(1 << 16))
        except (EOFError, OSError, ValueError):
            return False
        return isinstance(msg, dict) and msg.get("event") == "bye" and msg.get("released") is True

    def _run(self, start: float) -> SessionOutcome:
        self._start_worker()
        hello = self._recv_json()
        worker_start_s = time.monotonic() - start
        if hello.get("event") == "import_failed":
            status = Status.COMPILE_ERROR.value if hello.get("kind") == "compile_error" else Status.RUNTIME_ERROR.value
            why = str(hello.get("error", ""))
            return SessionOutcome(status, {"imports": Check(False, why)}, why, worker_start_s=worker_start_s,
                                  log_tail=self._log_tail())
        if hello.get("event") != "ready":
            return self._death_outcome("start-up")
        self.holds = LockHolds(self.gpu_lock, self.config.gpu_lock)
        try:
            if self.config.gpu_lock == "shared_checks":
                measured = self._measure_overhead()
                if measured is not None:
                    return measured
            outcome = self._calls(hello, worker_start_s)
        finally:
            self.holds.close()
        outcome.gpu_wait_s = self.holds.waited_s
        return outcome

    def _hold(self, exclusive: bool) -> None:
        """Hold the GPU lock as the next step needs it (`LockHolds`).

        Waiting for other verdicts is not the submission's time: without moving the deadline, a busy
        GPU would turn honest submissions into timeouts.
        """
        self.deadline += self.holds.hold(exclusive)

    def _measure_overhead(self) -> SessionOutcome | None:
        """Have the worker measure its timer's overhead alone on the GPU, before any call (shared mode).

        In exclusive mode the worker measures it at the first call, which runs under the exclusive hold;
        under a shared hold that call would overlap other verdicts' work, and moving the measurement to
        a timed call would let the submission's code run first. So it is a step of its own.
        """
        self._hold(exclusive=True)
        self._send({"op": "measure"})
        reply = self._recv_json()
        if reply.get("event") != "measured":
            return self._death_outcome("the timer-overhead measurement")
        return None

    def _calls(self, hello: dict, worker_start_s: float) -> SessionOutcome:
        checks: dict[str, Check] = {"imports": Check(True)}
        ref_module = self.task.load_module()
        self.ref_model = ref_module.Model(*self.task.init_inputs).to(self.device).to(torch.float64)
        plan = build_plan(self.task, self.config, self.seeds, self.backend)
        self.shape_sets = list(dict.fromkeys(spec.shapes for spec in plan))
        times: list[float] = []
        outputs: dict[int, torch.Tensor] = {}
        ref_s = 0.0
        compile_s = None
        t_calls = time.monotonic()
        t_timing = None
        last: CompareResult | None = None
        for i, spec in enumerate(plan):
            self._hold(exclusive=spec.timed)
            if spec.timed and t_timing is None:
                t_timing = time.monotonic()
            t_ref = time.monotonic()
            ref = self._reference(spec)
            ref_s += time.monotonic() - t_ref
            t_call = time.monotonic()
            reply, out, given = self._run_call(spec, first=(i == 0), ref=ref)
            if i == 0:
                compile_s = time.monotonic() - t_call
            failed = self._judge_reply(spec, reply, checks)
            if failed is not None:
                failed.worker_start_s, failed.import_s, failed.log_tail = worker_start_s, hello.get("import_s"), \
                    self._log_tail()
                failed.compile_s = compile_s
                return failed
            t_ref = time.monotonic()
            if ref is not None:  # the reference of the pristine input, computed before the call
                result = compare(out.cpu(), ref.expected, self.tolerance)
            else:
                result = check_against_reference(self.ref_model, given, out, self.tolerance,
                                                 rows_independent=self.task.rows_independent)
            ref_s += time.monotonic() - t_ref
            last = result
            if not result.passed:
                why = f"{spec.label}: wrong values: {result.summary()}"
                checks["values"] = Check(False, why)
                return SessionOutcome(Status.INCORRECT.value, checks, why, compare=result,
                                      worker_start_s=worker_start_s, import_s=hello.get("import_s"),
                                      compile_s=compile_s, reference_s=ref_s)
            if self._input_changed(spec, given, reply, ref):
                why = f"{spec.label}: forward modified its input; inputs must be left unchanged"
                checks["inputs_unchanged"] = Check(False, why)
                return SessionOutcome(Status.INCORRECT.value, checks, why, worker_start_s=worker_start_s)
            if spec.repeat_of is not None and not torch.equal(outputs[spec.repeat_of], out):
                why = f"{spec.label}: the same input gave a different output (a race or uninitialised memory)"
                checks["deterministic"] = Check(False, why)
                return SessionOutcome(Status.INCORRECT.value, checks, why, worker_start_s=worker_start_s)
            if i == 0 and self.config.check_determinism:
                outputs[0] = out.clone()
            if spec.main and reply.get("ms") is not None:
                times.append(float(reply["ms"]))
        checks["values"] = Check(True, f"{len(plan)} calls within tolerance ({last.summary() if last else ''})")
        checks["inputs_unchanged"] = Check(True)
        if self.config.check_determinism:
            checks["deterministic"] = Check(True)
        now = time.monotonic()
        timed = times[-self.config.timed_runs:] if times else []
        return SessionOutcome(
            Status.OK.value, checks, "", times_ms=timed, compare=last, worker_start_s=worker_start_s,
            import_s=hello.get("import_s"), compile_s=compile_s,
            correctness_s=(t_timing or now) - t_calls, timing_s=(now - t_timing) if t_timing else None,
            reference_s=ref_s,
        )


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
