"""evaluate(task, answer, config) -> Verdict: the evaluator's front door.

`Evaluator` holds what outlives one submission: the bounded worker pool (a semaphore; many
concurrent requests queue instead of exhausting memory), the device calibration and cached eager
timings (`clock/baselines.py`), the verdict cache and the input/reference cache (`cache.py`), and, when
`prewarm_workers` is above 0 (or "auto", sized above 0 for this device), a pool of pre-warmed fresh
workers (`session/prewarm.py`). Per submission it extracts the code, answers from the verdict cache when
an identical submission was judged under the same settings, else runs the static checks and, if
they pass, a `JudgeSession` with a fresh worker; then it turns the outcome into one `Verdict` with
its reward and feedback. Whatever the submission does, exactly one verdict
comes back; `evaluate` never raises for submitted code (an evaluator fault becomes status
`evaluator_error`).

It does not compare outputs or run submissions itself (`session/`, `worker/main.py`), does not time
the reference or calibrate the device (`clock/baselines.py`), and holds no formula but the call to
`compute_reward`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import traceback
import weakref
from contextlib import contextmanager, nullcontext
from dataclasses import asdict

import torch

import kernelflow
from kernelflow.eval.cache import ReferenceCache, VerdictCache, verdict_key
from kernelflow.eval.clock.baselines import Baselines
from kernelflow.eval.clock.gated_clock import GpuHealth
from kernelflow.eval.clock.timing import gpu_lock
from kernelflow.eval.config import EvalConfig, config_hash, input_salt
from kernelflow.eval.feedback import build_feedback
from kernelflow.eval.reward import compute_reward
from kernelflow.eval.sandbox.policy import protect_judge, resolve
from kernelflow.eval.session import GateCalibration, JudgeSession, SessionOutcome, WorkerLink
from kernelflow.eval.session import calibrate as calibrate_gate
from kernelflow.eval.session.device_memory import MemoryBudget, budget_bytes, estimate_verdict_bytes
from kernelflow.eval.session.ipc_arena import ALIGN, ArenaPool
from kernelflow.eval.session.prewarm import WarmPool, pool_size
from kernelflow.eval.session.worker_handle import SpawnSpec
from kernelflow.eval.static.checks import first_failure, run_static_checks
from kernelflow.eval.verdict import Check, Status, Verdict, WallTime, code_sha256
from kernelflow.tasks import Task, extract_code, get_task

log = logging.getLogger(__name__)

# eval.8 (2026-12-03): the allow-listed submission language, worker references captured before the submission,
# the keyed input salt, error paths the submission owns, no processes on the interpreter (issue #32)
EVALUATOR_VERSION = f"{kernelflow.__version__}+eval.8"


def resolve_backend(backend: str) -> str:
    """'auto' -> 'cuda' when a GPU is visible, else 'interpret'; 'cuda' without a GPU is an error."""
    if backend == "auto":
        return "cuda" if torch.cuda.is_available() else "interpret"
    if backend == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("backend 'cuda' was asked for but no CUDA GPU is visible; use backend 'interpret' or 'auto'")
    return backend


class Evaluator:
    """A reusable, thread-safe evaluator (see the module docstring)."""

    def __init__(self, config: EvalConfig | None = None):
        self.config = config or EvalConfig()
        self.backend = resolve_backend(self.config.backend)
        if self.backend == "cuda":
            self.device = torch.device("cuda", self.config.device_index)
            self.device_name = torch.cuda.get_device_name(self.device)
        else:
            self.device = torch.device("cpu")
            self.device_name = "cpu (triton interpreter)"
        protect_judge()  # non-dumpable: a worker of our UID cannot read our memory or environment
        self.isolation = resolve(self.backend, self.config.isolation)  # what every worker gets (sandbox/policy.py)
        self._slots = threading.BoundedSemaphore(self.config.max_workers)
        self._memory: MemoryBudget | None = None  # CUDA: sized at the first verdict (session/device_memory.py)
        self._verdict_bytes: dict[tuple, int] = {}
        self._state_lock = threading.Lock()
        # The device calibration and the reference's cached eager/torch.compile times (clock/baselines.py).
        self._baselines = Baselines(self.device, self.config, self._state_lock)
        self._gate: GateCalibration | None = None  # the judge's clock on an empty call (CUDA, clock/gated_clock.py)
        self._gate_lock = threading.Lock()
        self._gpu_health = GpuHealth()  # set when a call's GPU work never finished: judging here stops
        self._verdicts = VerdictCache(self.config.verdict_cache_size)
        self._references = ReferenceCache(self.config.input_cache_mb << 20) if self.config.input_cache_mb else None
        # Device memory shared with workers, kept and reused across verdicts (session/ipc_arena.py says why).
        self._arenas = ArenaPool(self.device) if self.backend == "cuda" else None
        # A secret of this judge process mixed into every call's input seed (input_salt), so no submission
        # can compute the inputs it will be called on from the project's own generator and answer from a
        # table (red team 2026-12-01, F6). Verdicts keep their declared seeds; the worker never sees one.
        self._input_salt = input_salt()
        self._sessions = 0  # workers used (one per session), for stats and tests
        self._prewarmed_sessions = 0
        self._pool: WarmPool | None = None
        # The pool's size: the setting, or "auto" sized here from this device (prewarm.pool_size). The config
        # keeps what was asked for; neither is in config_hash (no verdict depends on how workers start).
        self.prewarm_workers = pool_size(self.config, self.backend, self.device)
        if self.prewarm_workers > 0:
            spec = SpawnSpec.of(self.config, self.backend, self.device)
            self._pool = WarmPool(spec, self.prewarm_workers, warmup_timeout_s=max(60.0, self.config.timeout_s))
            weakref.finalize(self, self._pool.close)
        # A judge that keeps a pool serves many verdicts: it pays its own one-off imports now, in the
        # background, instead of in its first verdict (warm_judge says what they are).
        self._judge_warm = threading.Event()
        self._judge_warming: threading.Thread | None = None
        if self._pool is not None:
            self._judge_warming = threading.Thread(target=warm_judge, args=(self._judge_warm,), name="kf-warm-judge",
                                                   daemon=True)
            self._judge_warming.start()
        else:
            self._judge_warm.set()

    # ---- public ----------------------------------------------------------------------------------
    def info(self) -> dict:
        return {
            "evaluator_version": EVALUATOR_VERSION,
            "backend": self.backend,
            "device": self.device_name,
            "shape": self.config.shape,
            "max_workers": self.config.max_workers,
            "verdict_cache_size": self.config.verdict_cache_size,
            "prewarm_workers": self.prewarm_workers,  # resolved (an "auto" setting is sized at start)
            "prewarm_workers_setting": self.config.prewarm_workers,
            "config_hash": config_hash(self.config, EVALUATOR_VERSION),
            "clock": "judge-side gated CUDA events" if self.backend == "cuda" else "none (interpreter: not timed)",
            "empty_call_ms": None if self._gate is None else self._gate.median_ms,
            "calibration": self._baselines.calibration_source,
            "isolation": self.isolation.level,
            "isolation_mechanisms": list(self.isolation.mechanisms),
            "isolation_missing": dict(self.isolation.missing),
            "min_isolation": self.config.min_isolation,
            "gpu_stalled": self._gpu_health.stalled,  # None while healthy; else restart this evaluator
        }

    def stats(self) -> dict:
        """Counters of the caches and the pool (for benchmarks, logs and tests)."""
        refs = self._references
        with self._state_lock:
            sessions, prewarmed = self._sessions, self._prewarmed_sessions
        return {
            "sessions": sessions,
            "prewarmed_sessions": prewarmed,
            "judge_warm": self._judge_warm.is_set(),
            "verdict_cache": asdict(self._verdicts.stats()),
            "reference_cache": None if refs is None else {"entries": len(refs), "bytes": refs.nbytes, "hits": refs.hits,
                                                          "misses": refs.misses, "budget_bytes": refs.budget_bytes},
            "pool": None if self._pool is None else asdict(self._pool.stats()),
            "device_memory": None if self._memory is None else {
                "budget_bytes": self._memory.capacity, "held_bytes": self._memory.held, "waited_s": self._memory.waited_s},
        }

    def evaluate(
        self,
        task: Task | str,
        answer: str | None,
        *,
        seed: int | None = None,
        shape: str | None = None,
    ) -> Verdict:
        """Judge one answer (raw model text or module source). Never raises for what the answer does."""
        task = get_task(task) if isinstance(task, str) else task
        config = self.config
        if seed is not None or shape is not None:
            from dataclasses import replace

            config = replace(config, base_seed=config.base_seed if seed is None else int(seed),
                             shape=config.shape if shape is None else shape)
        started = time.monotonic()
        try:
            return self._evaluate(task, answer, config, started)
        except Exception as exc:  # noqa: BLE001 - our own fault must still yield exactly one verdict
            detail = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
            return self._verdict(task, config, extract_code(answer) if isinstance(answer, str) else None,
                                 Status.EVALUATOR_ERROR.value, {"evaluator": Check(False, detail[:500])}, detail,
                                 wall=WallTime(total_s=time.monotonic() - started))

    async def evaluate_async(self, task: Task | str, answer: str | None, **kwargs) -> Verdict:
        """`evaluate` without blocking the event loop (runs in a thread; the pool still bounds it)."""
        return await asyncio.to_thread(self.evaluate, task, answer, **kwargs)

    def close(self) -> None:
        """Kill the idle pre-warmed workers and drop the caches (verdicts in flight finish normally)."""
        if self._pool is not None:
            self._pool.close()
        if self._judge_warming is not None:
            # A process that exits while a thread is still importing torch modules aborts ("terminate
            # called without an active exception"): let the warm-up finish (seconds) before shutdown.
            self._judge_warming.join(timeout=30)
        self._baselines.clear()
        self._verdicts.clear()
        if self._references is not None:
            self._references.clear()
        if self._arenas is not None:
            self._arenas.close()

    # ---- steps -----------------------------------------------------------------------------------
    def _evaluate(self, task: Task, answer: str | None, config: EvalConfig, started: float) -> Verdict:
        code = extract_code(answer) if isinstance(answer, str) else None
        if code is None:
            why = "no ```python block and no parsable module in the answer"
            return self._verdict(task, config, answer if isinstance(answer, str) else None, Status.NO_CODE.value,
                                 {"has_code": Check(False, why)}, "", wall=WallTime(total_s=time.monotonic() - started))
        if not self._verdicts.enabled:
            return self._judge(task, code, config, started)
        key = verdict_key(code_sha256=code_sha256(code), task_id=task.task_id, shape=config.shape,
                          seeds=config.seed_list(), distribution=config.distribution or task.distribution,
                          tolerance_mode=config.tolerance_mode, config_hash=config_hash(config, EVALUATOR_VERSION),
                          backend=self.backend, device=self.device_name)
        return self._verdicts.get_or_judge(key, lambda: self._judge(task, code, config, started), started)

    def _judge(self, task: Task, code: str, config: EvalConfig, started: float) -> Verdict:
        checks: dict[str, Check] = {"has_code": Check(True)}
        if config.static_checks:
            static = run_static_checks(code, task.allowed_ops)  # the language check and the deny-list
            checks.update(static)
            failure = first_failure(static)
            if failure is not None:
                name, check = failure
                status = Status.COMPILE_ERROR.value if name == "parses" else Status.STATIC_REJECTED.value
                return self._verdict(task, config, code, status, checks, f"{name}: {check.why}",
                                     wall=WallTime(total_s=time.monotonic() - started))
        if self._gpu_health.stalled is not None:
            return self._stalled_verdict(task, config, code, checks, started)
        with self._memory_hold(task, config) as memory_wait_s:  # the session and the eager baseline after it
            return self._judge_admitted(task, code, config, started, checks, memory_wait_s or 0.0)

    def _judge_admitted(self, task: Task, code: str, config: EvalConfig, started: float, checks: dict,
                        memory_wait_s: float) -> Verdict:
        queued = time.monotonic()
        with self._slots:
            queue_s = memory_wait_s + time.monotonic() - queued
            gate = self._gate_calibration() if self.backend == "cuda" else None
            session = JudgeSession(task, code, config, self.backend, self.device, config.seed_list(),
                                   gpu_lock=self._gpu_lock, pool=self._pool, references=self._references,
                                   evaluator_version=EVALUATOR_VERSION, arenas=self._arenas, gate=gate,
                                   input_salt=self._input_salt, gpu_health=self._gpu_health)
            outcome = session.run()
            with self._state_lock:
                self._sessions += 1
                self._prewarmed_sessions += int(session.prewarmed)
        if session.gpu_stalled:
            log.error("GPU work of a call never finished (%s); this evaluator stops judging on %s until it is "
                      "restarted", self._gpu_health.stalled, self.device_name)
        checks.update(outcome.checks)
        if outcome.status == Status.OK.value and self._gpu_health.stalled is not None:
            return self._stalled_verdict(task, config, code, checks, started)  # no baseline timing behind the stall
        return self._from_outcome(task, config, code, outcome, checks, queue_s, started)

    def _memory_hold(self, task: Task, config: EvalConfig):
        """A hold on this device's memory budget for one verdict of `task` (CUDA; nothing to hold on the CPU)."""
        if self.backend != "cuda":
            return nullcontext()
        with self._state_lock:
            if self._memory is None:
                free, total = torch.cuda.mem_get_info(self.device)
                capacity = budget_bytes(free + torch.cuda.memory_reserved(self.device), total,
                                        self.config.device_memory_fraction)
                self._memory = MemoryBudget(capacity)
                log.info("device memory budget for concurrent verdicts: %.1f GB", capacity / 1e9)
            key = (task.task_id, config.shape, config.seeds, config.base_seed)
            need = self._verdict_bytes.get(key)
        if need is None:
            need = estimate_verdict_bytes(task, config, self.backend)
            with self._state_lock:
                self._verdict_bytes[key] = need
        return self._memory.hold(need)

    def _stalled_verdict(self, task, config, code, checks, started) -> Verdict:
        why = (f"the evaluator's GPU stream is blocked by an earlier call whose GPU work never finished "
               f"({self._gpu_health.stalled}); restart the evaluator (not this submission's verdict; not cached)")
        return self._verdict(task, config, code, Status.EVALUATOR_ERROR.value,
                             {**checks, "gpu_finished": Check(False, why)}, why,
                             wall=WallTime(total_s=time.monotonic() - started))

    def _gate_calibration(self) -> GateCalibration:
        """What the judge's clock reads for an empty call, measured once with a worker that has no submission."""
        with self._gate_lock:
            if self._gate is None:
                link = WorkerLink(SpawnSpec.of(self.config, self.backend, self.device), pool=None)
                link.deadline = time.monotonic() + max(120.0, self.config.timeout_s)
                arena = self._arenas.acquire(ALIGN)  # the clock's flag, in memory of its own (clock/gpu_signal.py)
                flag = arena.carve((1,), torch.int32)
                flag.zero_()
                try:
                    link.start_bare()
                    with self._gpu_lock():
                        self._gate = calibrate_gate(link, self.device, self.config.l2_flush_mb, flag)
                finally:
                    link.close()
                    self._arenas.release(arena, clean=False)  # the worker was killed with it mapped
                log.info("judge clock: an empty gated call reads %.4f ms (min %.4f, max %.4f, %d calls)",
                         self._gate.median_ms, self._gate.min_ms, self._gate.max_ms, self._gate.runs)
            return self._gate

    @contextmanager
    def _gpu_lock(self, shared: bool = False):
        """This GPU's lock, shared or exclusive (clock/gpu_lock.py); nothing to hold under the interpreter."""
        if self.backend != "cuda":
            ctx = nullcontext()
        else:
            lock = gpu_lock(self.config.device_index, self.config.cache_dir)
            ctx = lock.shared() if shared else lock.exclusive()
        with ctx:
            yield

    def _from_outcome(self, task, config, code, outcome: SessionOutcome, checks, queue_s, started) -> Verdict:
        wall = dict(queue_s=queue_s, worker_start_s=outcome.worker_start_s, import_s=outcome.import_s,
                    compile_s=outcome.compile_s, correctness_s=outcome.correctness_s, timing_s=outcome.timing_s,
                    reference_s=outcome.reference_s, gpu_wait_s=outcome.gpu_wait_s)
        fields = {}
        if outcome.compare is not None:
            fields = dict(max_abs_err=outcome.compare.max_abs_err, max_rel_violation=outcome.compare.violation)
        if outcome.status != Status.OK.value:
            wall["total_s"] = time.monotonic() - started
            return self._verdict(task, config, code, outcome.status, checks, outcome.detail, wall=WallTime(**wall),
                                 log_tail=outcome.log_tail, **fields)
        if self.backend != "cuda" or not outcome.times_ms:
            wall["total_s"] = time.monotonic() - started
            return self._verdict(task, config, code, Status.OK.value, checks, "", wall=WallTime(**wall), **fields)
        t_baselines = time.monotonic()
        timing, floor = self._baselines.timed_fields(task, config, outcome.times_ms, outcome.compile_s, self._gpu_lock)
        wall["baselines_s"] = time.monotonic() - t_baselines
        wall["total_s"] = time.monotonic() - started
        runtime = timing["runtime_ms"]
        if runtime < floor:
            why = (f"median time {runtime:.4f} ms is below the physical floor {floor:.4f} ms "
                   f"({config.impossible_factor} x bytes / the device's datasheet bandwidth)")
            checks["physically_possible"] = Check(False, why)
            return self._verdict(task, config, code, Status.IMPOSSIBLE_TIME.value, checks, why,
                                 wall=WallTime(**wall), **timing, **fields)
        checks["physically_possible"] = Check(True)
        return self._verdict(task, config, code, Status.OK.value, checks, "", wall=WallTime(**wall), **timing, **fields)

    def _verdict(self, task: Task, config: EvalConfig, code: str | None, status: str, checks: dict[str, Check],
                 detail: str, wall: WallTime | None = None, log_tail: str = "", **fields) -> Verdict:
        correct = status == Status.OK.value
        checks = {**checks, "isolation": Check(True, self.isolation.describe(reasons=False))}
        reward = compute_reward(correct, fields.get("t_min_ms"), fields.get("runtime_ms"), config.reward)
        feedback = build_feedback(
            status, detail, checks, fields.get("runtime_ms"), fields.get("t_min_ms"), fields.get("roofline_fraction"),
            fields.get("eager_ms"), fields.get("speedup_vs_eager"), log_tail=log_tail,
            max_chars=config.feedback_max_chars,
        )
        return Verdict(
            task_id=task.task_id, status=status, correct=correct, reward=reward, feedback=feedback,
            code_sha256=code_sha256(code), evaluator_version=EVALUATOR_VERSION, backend=self.backend,
            device=self.device_name, shape=config.shape, seeds=config.seed_list(), checks=checks, wall_time=wall,
            cached=False, isolation=self.isolation.level, **fields,
        )


def warm_judge(done: threading.Event | None = None) -> None:
    """The judge process's own one-off costs, paid before any submission (never fails a verdict).

    The first meta-device op of a process (the reference side derives every call's output shape on the
    meta device, session/references.py) imports ~900 modules: torch's meta registrations pull in
    torch._dynamo and sympy. Measured on the 2-core CPU host, 2026-12-01: 1.9 s idle, 4.9 s under load,
    16.8 s of the first served verdict's `reference_s` on a loaded host. The first float64 comparison
    adds ~0.1 s. Both are the judge's, not the submission's, and the same for every task.
    """
    try:
        from kernelflow.eval.correctness import compare

        with torch.no_grad():
            torch.nn.functional.relu(torch.empty((2, 2), dtype=torch.float64, device="meta"))
            compare(torch.zeros(8), torch.zeros(8, dtype=torch.float64), get_task("19_ReLU").tolerance)
    except Exception:  # noqa: BLE001 - a warm-up only saves time; the first verdict pays it otherwise
        log.warning("warming the judge failed; its first verdict pays the imports", exc_info=True)
    finally:
        if done is not None:
            done.set()


def evaluate(task: Task | str, answer: str | None, config: EvalConfig | None = None) -> Verdict:
    """Judge one answer with a one-off evaluator (see `Evaluator` to reuse calibration and the pool)."""
    return Evaluator(config).evaluate(task, answer)
