"""The judge's side of one submission: one worker, the planned calls, every output checked here.

A `JudgeSession` gets a warm worker holding the submission (link.py), then runs the call plan
(plan.py). For every call it draws fresh inputs from the call's seed (or takes them, with their
float64 reference, from the evaluator's `ReferenceCache`), hands them over (bytes on the CPU; shared
device buffers on a GPU, buffers.py), and when the worker answers applies the runtime checks
(checks.py), compares the output with a float64 reference computed here (references.py), and checks that the inputs
are unchanged and the repeat reproduced its output. On CUDA every call is timed by the judge's own
clock (clock/gated_clock.py) and the output is read from the judge's side right behind the clock's end.
The first failure ends the session; a protocol violation, a call past its own limit, a dead worker:
every path ends in a `SessionOutcome`, and the worker is always killed.

It does not decide the reward (evaluator.py), calibrate the device or time eager PyTorch (clock/baselines.py).
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import replace

import torch
import torch.multiprocessing  # noqa: F401  (registers the CUDA IPC reductions used to share buffers)

from kernelflow.eval import protocol
from kernelflow.eval.cache import Reference, ReferenceCache
from kernelflow.eval.clock.gated_clock import (
    GateCalibration,
    GatedClock,
    GpuHealth,
    GpuStalled,
    GpuWorkAbandoned,
    gate_respected,
    net_ms,
    timed_median_input,
)
from kernelflow.eval.config import EvalConfig
from kernelflow.eval.correctness import CompareResult
from kernelflow.eval.feedback import worker_text
from kernelflow.eval.session.buffers import SharedInputs, import_output, unlink_ref_counters
from kernelflow.eval.session.checks import RUNTIME_CHECKS, CallFacts, first_failure
from kernelflow.eval.session.ipc_arena import ArenaPool
from kernelflow.eval.session.link import CallLimit, SessionOutcome, WorkerGpuFault, WorkerLink
from kernelflow.eval.session.plan import CallSpec, LockHolds, build_plan, call_limit_s
from kernelflow.eval.session.prewarm import WarmPool
from kernelflow.eval.session.references import ReferenceSide
from kernelflow.eval.session.worker_handle import SpawnSpec, WorkerStartError
from kernelflow.eval.verdict import Check, Status
from kernelflow.tasks import Task, generate_inputs


def clean_outcome(outcome: SessionOutcome, cache_dir: str | None = None) -> SessionOutcome:
    """`outcome` with its detail, output tail and every check's text passed through `worker_text`: the worker's
    messages, exit status and output reach a verdict only this way (issue #32 item 4)."""
    extra = (cache_dir,) if cache_dir else ()
    outcome.detail = worker_text(outcome.detail, 4000, extra)
    outcome.log_tail = worker_text(outcome.log_tail, 1000, extra)
    outcome.checks = {name: replace(c, why=worker_text(c.why, 1500, extra)) if c.why else c
                      for name, c in outcome.checks.items()}
    return outcome


class JudgeSession:
    """One submission, one worker (see the module docstring)."""

    def __init__(self, task: Task, source: str, config: EvalConfig, backend: str, device: torch.device,
                 seeds: list[int], gpu_lock=nullcontext, pool: WarmPool | None = None,
                 references: ReferenceCache | None = None, evaluator_version: str = "",
                 arenas: ArenaPool | None = None, gate: GateCalibration | None = None, input_salt: int = 0,
                 gpu_health: GpuHealth | None = None):
        self.task, self.source, self.config, self.backend, self.device, self.seeds = \
            task, source, config, backend, device, seeds
        self.input_salt = input_salt  # the judge's secret, mixed into every call's seed (plan.build_plan)
        self.gpu_health = gpu_health if gpu_health is not None else GpuHealth()
        self.gpu_stalled = False  # this session's GPU work never finished: its GPU state must not be touched
        self.cuda = device.type == "cuda"
        self.gpu_lock = gpu_lock
        self.refs = ReferenceSide(task, config, device, references, evaluator_version)
        self.distribution, self.dtype = self.refs.distribution, self.refs.dtype
        self.link = WorkerLink(SpawnSpec.of(config, backend, device), pool)
        self.arenas = arenas if arenas is not None else (ArenaPool(device) if self.cuda else None)
        self.gate = gate
        self.clock: GatedClock | None = None
        self.plan: list[CallSpec] = []
        self.inputs: SharedInputs | None = None
        self.ref_counters: set[str] = set()
        self._late = False  # the last CUDA call's window may hold host latency (clock/gated_clock.py)

    @property
    def prewarmed(self) -> bool:
        return self.link.prewarmed

    # ---- the whole session -----------------------------------------------------------------------
    def run(self) -> SessionOutcome:
        """The session's outcome, every worker-derived text in it cleaned (feedback.worker_text)."""
        return clean_outcome(self._run_guarded(), self.config.cache_dir)

    def _run_guarded(self) -> SessionOutcome:
        start = time.monotonic()
        self.link.deadline = start + self.config.timeout_s
        try:
            return self._run(start)
        except CallLimit:
            why = (f"call {self._label} ran past its own limit of {self._limit:.0f} s and was stopped "
                   "(each call is limited so that no submission holds the GPU for long)")
            return SessionOutcome(Status.TIMEOUT.value, {"finished_in_time": Check(False, why)}, why,
                                  log_tail=self.link.log_tail())
        except TimeoutError:
            why = f"the submission ran past the {self.config.timeout_s:.0f} s limit and was stopped"
            return SessionOutcome(Status.TIMEOUT.value, {"finished_in_time": Check(False, why)}, why,
                                  log_tail=self.link.log_tail())
        except protocol.ProtocolViolation as exc:
            why = f"the worker broke the judge's protocol ({exc}); the submission's code controls the worker"
            return SessionOutcome(Status.REJECTED_RUNTIME_CHECK.value, {"protocol": Check(False, why[:500])},
                                  why[:500], log_tail=self.link.log_tail())
        except WorkerGpuFault as exc:
            why = f"call {self._label}: the kernel failed on the GPU after forward returned: {exc}"[:1500]
            return SessionOutcome(Status.RUNTIME_ERROR.value, {"forward_runs": Check(False, why)}, why,
                                  log_tail=self.link.log_tail())
        except GpuStalled as exc:
            why = (f"call {self._label}: {exc} did not finish within the call's {self._limit:.0f} s limit (a kernel "
                   "that never ends, or a fault that lost the worker's GPU context, in this submission or one judged "
                   "beside it); not the verdict of this submission: the evaluator stops judging on this GPU until "
                   "it is restarted")
            return SessionOutcome(Status.EVALUATOR_ERROR.value, {"gpu_finished": Check(False, why)}, why,
                                  log_tail=self.link.log_tail())
        except WorkerStartError as exc:
            why = f"the worker could not be started: {exc}"[:1000]
            return SessionOutcome(Status.EVALUATOR_ERROR.value, {"worker_started": Check(False, why)}, why)
        except (EOFError, ConnectionError, OSError) as exc:
            if self.link.proc is None:
                why = f"the worker could not be started: {exc}"
                return SessionOutcome(Status.EVALUATOR_ERROR.value, {"worker_started": Check(False, why)}, why)
            return self.link.death_outcome("the evaluation", self.config.output_limit_mb)
        except Exception:
            # Anything else with the worker already dead is its death, seen late (a reply cut short, a
            # frame the judge then tripped over): the submission's outcome, never an evaluator error.
            # With the worker alive it is the judge's own fault and stays one (evaluator.py).
            proc = self.link.proc
            if proc is not None and proc.poll() is not None:
                return self.link.death_outcome("the evaluation", self.config.output_limit_mb)
            raise
        finally:
            clean = self.link.dismiss()
            self.link.close()
            # After a stall the judge's stream still holds work behind a wait that may never end: the
            # arena stays out of reuse (a copy queued there could land in it later), and nothing that
            # synchronises the device (ipc_collect, empty_cache: cudaFree) may run in this process.
            if self.inputs is not None and not self.gpu_stalled:  # only now: the worker that mapped them is dead
                self.inputs.release(clean)
            unlink_ref_counters(self.ref_counters)
            if self.cuda and not self.gpu_stalled:
                torch.cuda.ipc_collect()  # frees shared blocks whose consumers all let go
                torch.cuda.empty_cache()

    def _run(self, start: float) -> SessionOutcome:
        self._label, self._limit = "start-up", self.config.timeout_s
        self.plan = build_plan(self.task, self.config, self.seeds, self.backend, salt=self.input_salt)
        if self.cuda:  # the arena first: the clock's flag lives in it, and the worker gets it with the gate
            self.inputs = SharedInputs(self.arenas, self.dtype, list(dict.fromkeys(s.shapes for s in self.plan)))
            self.clock = GatedClock(self.device, self.config.l2_flush_mb, self.inputs.signal_flag())
        self.link.start(self.source, self.task.init_inputs, before_handover=self.clock.send_gates if self.cuda else None)
        hello = self.link.recv(protocol.Ready, protocol.ImportFailed)
        worker_start_s = time.monotonic() - start
        if isinstance(hello, protocol.ImportFailed):
            status = Status.COMPILE_ERROR.value if hello.kind == "compile_error" else Status.RUNTIME_ERROR.value
            return SessionOutcome(status, {"imports": Check(False, hello.error)}, hello.error,
                                  worker_start_s=worker_start_s, log_tail=self.link.log_tail())
        holds = LockHolds(self.gpu_lock, self.config.gpu_lock)
        try:
            outcome = self._calls(hello, worker_start_s, holds)
        finally:
            holds.close()
        outcome.gpu_wait_s = holds.waited_s
        return outcome

    # ---- one call --------------------------------------------------------------------------------
    def _reference(self, spec: CallSpec) -> Reference | None:
        return self.refs.cached(spec)

    def _run_call(self, index: int, spec: CallSpec, ref: Reference | None):
        """Send one call; returns (reply, output or None, inputs as given, the judge's raw window or None)."""
        out_shape, out_dtype = self.refs.output_spec(spec.shapes)
        distribution = spec.distribution or self.distribution
        msg = {"op": "call", "shapes": [list(s) for s in spec.shapes], "dtype": self.task.dtype,
               "out_shape": list(out_shape), "out_dtype": str(out_dtype).removeprefix("torch."),
               "first": index == 0, "slot": None}
        self._label, self._limit = spec.label, call_limit_s(self.config, index, spec, self.cuda)
        self.link.call_deadline = time.monotonic() + self._limit
        try:
            if not self.cuda:
                xs = list(ref.inputs) if ref is not None else generate_inputs(spec.shapes, spec.seed, distribution, "cpu")
                msg["input_bytes"] = [x.numpy().tobytes() for x in xs]
                self.link.send(msg)
                reply = self.link.recv(protocol.Called, protocol.CallFailed)
                if not isinstance(reply, protocol.Called) or reply.output_problem is not None:
                    return reply, None, xs, None
                if reply.output_bytes != math.prod(out_shape) * out_dtype.itemsize:
                    raise protocol.ProtocolViolation(f"announced {reply.output_bytes} output bytes")
                out = torch.frombuffer(bytearray(self.link.recv_raw(reply.output_bytes)), dtype=out_dtype)
                after = [torch.frombuffer(bytearray(self.link.recv_raw(x.numel() * x.element_size())),
                                          dtype=x.dtype).reshape(x.shape) for x in xs]
                self._inputs_after = after
                return reply, out.reshape(out_shape), xs, None
            bufs = self.inputs.for_shapes(spec.shapes, self.link)
            # The pristine inputs are made in memory the worker cannot map, before the clock is opened:
            # drawing them synchronises the host (torch.unique, a pageable copy), and a judge blocked
            # there would open the gate only after its spin had run out, putting the worker's whole host
            # path inside the window (every call was late on the H200). Behind the spin only an
            # asynchronous device copy remains; the staged copy is also what the inputs are checked against.
            staged = self.inputs.scratch_for(spec.shapes, self.device)
            if ref is not None:
                for dst, src in zip(staged, ref.inputs, strict=True):
                    dst.copy_(src)
            else:
                generate_inputs(spec.shapes, spec.seed, distribution, self.device, out=staged)

            def write_inputs() -> None:
                for dst, src in zip(bufs, staged, strict=True):
                    dst.copy_(src, non_blocking=True)

            self.clock.open(write_inputs)
            msg["slot"], msg["seq"] = str(spec.shapes), self.clock.seq
            self.link.send(msg)
            reply = self.link.recv(protocol.Called, protocol.CallFailed)
            if isinstance(reply, protocol.CallFailed) and reply.cuda_error:
                return reply, None, bufs, None  # its context failed before the flag: nothing to wait for
            self.clock.stop()
            got = None
            if isinstance(reply, protocol.Called) and reply.output is not None and reply.output_problem is None:
                self.ref_counters.add(reply.output.ref_counter)
                mapped, problem = import_output(reply.output, self.device, out_shape, out_dtype)
                if mapped is not None:
                    got = mapped.clone()  # queued right behind END: what is checked is what existed then
                else:
                    reply = replace(reply, output_problem=problem, output=None)
            copied = torch.cuda.Event()
            copied.record()  # behind END and the copy: once it completed, the mapping may go
            # The GPU gets the call's whole limit (from its start) and at least a second after the reply.
            gpu_deadline = max(self.link.call_deadline, time.monotonic() + 1.0)
            try:
                self.clock.settle(copied, gpu_deadline, abort=self.link.check_quiet)
            except GpuWorkAbandoned as exc:  # the judge wrote the flag itself; its stream is healthy again
                self.link.busy = True  # the worker may still be stuck in its kernel: no exit handshake
                if isinstance(exc.cause, GpuStalled):
                    raise CallLimit from exc  # a kernel that never ends: this call's own limit passed
                raise exc.cause from None  # WorkerGpuFault, a dead worker, a protocol violation: run() says
            except GpuStalled:
                self.gpu_stalled = True
                self.gpu_health.stall(f"{self.task.task_id}, {spec.label}")  # before any lock hold is let go
                raise
            raw = self.clock.elapsed_ms(adapt=index > 0)
            self._late = self.clock.late
            mapped = None
            return reply, got, bufs, raw
        finally:
            self.link.call_deadline = None

    def _pristine(self, spec: CallSpec, given: list[torch.Tensor]) -> list[torch.Tensor]:
        """The call's inputs as the judge drew them: on CUDA the private staged copy (_run_call), never the
        shared buffers the worker can still write to; on the CPU the judge's own tensors it sent."""
        return self.inputs.scratch_for(spec.shapes, self.device) if self.cuda else given

    def _input_changed(self, spec: CallSpec, given: list[torch.Tensor]) -> bool:
        after = given if self.cuda else self._inputs_after  # the inputs as forward left them
        return any(not torch.equal(a, p) for a, p in zip(after, self._pristine(spec, given), strict=True))

    def _judge_reply(self, spec: CallSpec, reply, raw_ms: float | None, checks: dict[str, Check]) -> SessionOutcome | None:
        """The runtime checks of one call (checks.py); an outcome if one failed."""
        if isinstance(reply, protocol.CallFailed):
            if reply.violations:
                why = (f"{spec.label}: forward left Triton to compute ({', '.join(reply.violations)}); "
                       "only allocation and views are allowed there")
                checks["pytorch_ops_in_forward"] = Check(False, why)
                return SessionOutcome(Status.REJECTED_RUNTIME_CHECK.value, checks, why)
            status = Status.COMPILE_ERROR.value if reply.kind == "compile_error" else Status.RUNTIME_ERROR.value
            why = f"{spec.label}: {reply.error}"
            checks["forward_runs"] = Check(False, why)
            return SessionOutcome(status, checks, why)
        gate_ok = raw_ms is None or self.gate is None or gate_respected(raw_ms, self.gate)
        facts = CallFacts(spec.label, not self.cuda, self.link.warm, raw_ms, gate_ok)
        failed = first_failure(reply, facts)
        if failed is not None:
            check, why = failed
            checks[check.name] = Check(False, why)
            return SessionOutcome(check.status.value, checks, why)
        for check in RUNTIME_CHECKS:
            checks.setdefault(check.name, Check(True))
        problem = reply.output_problem
        checks["output_tensor"] = Check(problem is None, f"{spec.label}: {problem}" if problem else "")
        if problem:
            return SessionOutcome(Status.INCORRECT.value, checks, f"{spec.label}: {problem}")
        return None

    # ---- the plan --------------------------------------------------------------------------------
    def _calls(self, hello: protocol.Ready, worker_start_s: float, holds: LockHolds) -> SessionOutcome:
        checks: dict[str, Check] = {"imports": Check(True)}
        self.refs.load()
        plan = self.plan
        base = dict(worker_start_s=worker_start_s, import_s=hello.import_s)
        times: list[float] = []
        outputs: dict[int, torch.Tensor] = {}
        ref_s, compile_s, t_timing, last = 0.0, None, None, None
        t_calls = time.monotonic()
        for i, spec in enumerate(plan):
            self.link.deadline += holds.hold(exclusive=spec.timed)  # waiting for other verdicts is not ours
            if spec.timed and t_timing is None:
                t_timing = time.monotonic()
            t_ref = time.monotonic()
            ref = self._reference(spec)
            ref_s += time.monotonic() - t_ref
            t_call = time.monotonic()
            reply, out, given, raw_ms = self._run_call(i, spec, ref)
            if i == 0:
                compile_s = time.monotonic() - t_call
            failed = self._judge_reply(spec, reply, raw_ms, checks)
            if failed is not None:
                failed.__dict__.update(base, compile_s=compile_s, log_tail=self.link.log_tail())
                return failed
            t_ref = time.monotonic()
            result: CompareResult = self.refs.compare(out, self._pristine(spec, given), ref,
                                                      sample_rows=self.config.timed_check_rows if spec.timed else 0)
            ref_s += time.monotonic() - t_ref
            last = result
            failed = None
            if not result.passed:
                failed = ("values", f"{spec.label}: wrong values: {result.summary()}")
            elif self._input_changed(spec, given):
                failed = ("inputs_unchanged", f"{spec.label}: forward modified its input; inputs must be left unchanged")
            elif spec.repeat_of is not None and not torch.equal(outputs[spec.repeat_of], out):
                failed = ("deterministic", f"{spec.label}: the same input gave a different output (a race or "
                                           "uninitialised memory)")
            if failed is not None:
                checks[failed[0]] = Check(False, failed[1])
                return SessionOutcome(Status.INCORRECT.value, checks, failed[1], compare=result, compile_s=compile_s,
                                      reference_s=ref_s, **base)
            if i == 0 and self.config.check_determinism:
                outputs[0] = out.clone()
            if spec.main and raw_ms is not None and self.gate is not None:
                times.append((net_ms(raw_ms, self.gate), self._late))
        checks["values"] = Check(True, f"{len(plan)} calls within tolerance ({last.summary() if last else ''})")
        checks["inputs_unchanged"] = Check(True)
        if self.config.check_determinism:
            checks["deterministic"] = Check(True)
        if self.cuda and self.gate is not None:  # how the clock went: late windows hold host latency
            late = sum(1 for _, was_late in times[-self.config.timed_runs:] if was_late)
            checks["judge_clock"] = Check(True, f"{late} of {min(len(times), self.config.timed_runs)} timed calls "
                                                f"late, spin {self.clock.spin} cycles at the end, empty call "
                                                f"{self.gate.median_ms:.3f} ms subtracted")
        now = time.monotonic()
        return SessionOutcome(
            Status.OK.value, checks, "", times_ms=timed_median_input(times[-self.config.timed_runs:]), compare=last,
            compile_s=compile_s, correctness_s=(t_timing or now) - t_calls,
            timing_s=(now - t_timing) if t_timing else None, reference_s=ref_s, **base,
        )
