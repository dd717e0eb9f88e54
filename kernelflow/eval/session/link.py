"""The judge's link to one worker: getting a warm worker, bounded messages with deadlines, its death.

`WorkerLink` takes a pre-warmed worker from the evaluator's pool when there is one, else spawns a
fresh one (session/worker_handle.py), waits until it is warm, and hands it the submission. Every message from the
worker goes through `recv`, which waits at most until the current deadline (the session's, or the
current call's limit, whichever is sooner) and decodes it with `protocol.decode`: a frame that breaks
the protocol raises `ProtocolViolation`, never anything the judge could mistake for its own error.
`death_outcome` explains a worker that stopped talking, from its exit status and its output file;
`dismiss` asks a live worker to release the judge's shared buffers before it is killed.

Not here: what the messages mean for the verdict (judge.py, checks.py).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from dataclasses import dataclass, field

from kernelflow.eval import protocol
from kernelflow.eval.session.prewarm import WarmPool
from kernelflow.eval.session.worker_handle import SpawnSpec, WorkerHandle, WorkerStartError
from kernelflow.eval.verdict import Check, Status

log = logging.getLogger(__name__)


@dataclass
class SessionOutcome:
    """What happened in one session; `evaluator.py` turns it into a verdict."""

    status: str
    checks: dict[str, Check] = field(default_factory=dict)
    detail: str = ""  # the failure, for the model's feedback
    times_ms: list[float] = field(default_factory=list)
    compare: object | None = None  # correctness.CompareResult of the last compared call
    worker_start_s: float | None = None
    import_s: float | None = None
    compile_s: float | None = None
    correctness_s: float | None = None
    timing_s: float | None = None
    reference_s: float = 0.0
    gpu_wait_s: float | None = None
    log_tail: str = ""


def signal_name(number: int) -> str:
    """A signal's name for any number a worker can die from (the real-time ones 35-63 have no enum member:
    `signal.Signals(40)` raised, and a worker's own death became an evaluator error)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        rt_min, rt_max = getattr(signal, "SIGRTMIN", 34), getattr(signal, "SIGRTMAX", 64)
        return f"SIGRTMIN+{number - rt_min}" if rt_min < number < rt_max else f"signal {number}"


class CallLimit(TimeoutError):
    """One call ran past its own limit (plan.call_limit_s), before the session's timeout."""


class WorkerGpuFault(Exception):
    """The worker said its GPU work for the current call failed after it replied (protocol.GpuFault)."""


class WorkerLink:
    """One worker, from handover to kill (see the module docstring)."""

    def __init__(self, spec: SpawnSpec, pool: WarmPool | None):
        self.spec = spec
        self.pool = pool
        self.handle: WorkerHandle | None = None
        self.prewarmed = False
        self.deadline = 0.0  # the session's
        self.call_deadline: float | None = None  # the current call's, when one is out
        self.busy = False  # a request is out and unanswered: the worker may be stuck in the submission
        self.warm: protocol.Warm | None = None

    @property
    def proc(self) -> subprocess.Popen | None:
        return None if self.handle is None else self.handle.proc

    def start(self, source: str, init_inputs: list, before_handover=None) -> None:
        """A warm worker holding this submission: from the pool if it has one, else freshly spawned.

        `before_handover(link)` runs once the worker is warm and before it has the submission (the
        CUDA gates are sent then, while the worker is still the judge's own code).
        """
        handle = self.pool.acquire() if self.pool is not None and self.pool.spec == self.spec else None
        if handle is not None:
            try:
                handle.ensure_warm(self.deadline)
                if not handle.usable:
                    raise WorkerStartError("the pre-warmed worker died while it waited")
                self._adopt(handle, prewarmed=True)
                if before_handover is not None:
                    before_handover(self)
                handle.handover(source, init_inputs)
                return
            except TimeoutError:
                self._adopt(handle, prewarmed=True)  # still warming at the deadline: judged like a slow fresh one
                raise
            except (WorkerStartError, EOFError, OSError, protocol.ProtocolViolation) as exc:
                # The evaluator's trouble, not the submission's (none was handed over): a fresh worker.
                log.warning("a pre-warmed worker was unusable (%s); spawning a fresh one", exc)
                handle.close()
                self.handle = None
        handle = WorkerHandle(self.spec)
        handle.claim()
        self.handle = handle
        handle.ensure_warm(self.deadline)
        self._adopt(handle, prewarmed=False)
        if before_handover is not None:
            before_handover(self)
        handle.handover(source, init_inputs)

    def start_bare(self) -> None:
        """A fresh, warm worker that never gets a submission (the judge's clock calibration)."""
        handle = WorkerHandle(self.spec)
        handle.claim()
        self.handle = handle
        handle.ensure_warm(self.deadline)
        self._adopt(handle, prewarmed=False)

    def _adopt(self, handle: WorkerHandle, prewarmed: bool) -> None:
        self.handle, self.prewarmed = handle, prewarmed
        if handle.warm_info is not None:  # sent before any submission existed, decoded by the handle
            self.warm = handle.warm_info

    # ---- messages --------------------------------------------------------------------------------
    def send(self, msg: dict) -> None:
        self.handle.conn.send(msg)
        self.busy = True

    def _remaining(self) -> float:
        end = self.deadline if self.call_deadline is None else min(self.deadline, self.call_deadline)
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise CallLimit if self.call_deadline is not None and self.call_deadline < self.deadline else TimeoutError
        return remaining

    def _poll(self) -> None:
        remaining = self._remaining()
        if not self.handle.conn.poll(remaining):
            self._remaining()  # raises the right kind of timeout
            raise TimeoutError

    def _read(self):
        """One control frame, decoded (ProtocolViolation for one over MAX_FRAME; EOFError once the worker is gone)."""
        try:
            data = self.handle.conn.recv_bytes(protocol.MAX_FRAME)
        except OSError as exc:  # multiprocessing raises OSError for a frame over the limit
            if "bad message length" in str(exc):
                raise protocol.ProtocolViolation(f"a frame over {protocol.MAX_FRAME} bytes") from None
            raise
        return protocol.decode(data)

    def recv(self, *wanted: type):
        """The worker's next message, decoded and of one of the `wanted` types (ProtocolViolation if not)."""
        self._poll()
        msg = self._read()
        self.busy = False
        return protocol.expect(msg, *wanted) if wanted else msg

    def check_quiet(self) -> None:
        """While the judge waits for a call's GPU work: raise if the worker spoke or died meanwhile.

        WorkerGpuFault for its `gpu_fault`; EOFError if it is gone; ProtocolViolation for anything else
        (no other message is due before the judge's next request)."""
        if not self.handle.conn.poll(0):
            return
        raise WorkerGpuFault(protocol.expect(self._read(), protocol.GpuFault).error)

    def recv_raw(self, expected: int) -> bytes:
        """One raw frame of exactly `expected` bytes (the CPU output and inputs after a call)."""
        self._poll()
        try:
            data = self.handle.conn.recv_bytes(expected + 1)
        except OSError as exc:
            if "bad message length" in str(exc):
                raise protocol.ProtocolViolation(f"a data frame larger than the {expected} bytes expected") from None
            raise
        if len(data) != expected:
            raise protocol.ProtocolViolation(f"a data frame of {len(data)} bytes, expected {expected}")
        return data

    # ---- the end ---------------------------------------------------------------------------------
    def log_tail(self, limit: int = 16000) -> str:
        """The end of the worker's output, wide enough that `feedback.worker_text` sees whole traceback frames
        (it drops the judge's own frames, then the feedback keeps the last few hundred characters)."""
        if self.handle is None:
            return ""
        try:
            with open(self.handle.log_path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - limit))
                data = f.read(limit)
        except OSError:
            return ""
        text = data.decode("utf-8", errors="replace")
        if size > limit:  # the window starts mid-output: its first, partial line is no one's
            text = text.partition("\n")[2]
        return text

    def death_outcome(self, phase: str, output_limit_mb: int) -> SessionOutcome:
        """A worker that stopped talking: why, from its exit status and its output file."""
        proc = self.proc
        code = proc.poll() if proc else None
        if code is None and proc is not None:
            try:
                code = proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
        path = self.handle.log_path if self.handle else None
        size = path.stat().st_size if path is not None and path.exists() else 0
        if code == -signal.SIGXFSZ or size >= (output_limit_mb << 20):
            why = f"the worker printed more than {output_limit_mb} MB and was stopped"
        elif code is not None and code < 0:
            why = f"the worker died from signal {signal_name(-code)} during {phase}"
        elif code is None:
            why = f"the worker closed its channel during {phase} without a result"
        else:
            why = f"the worker exited (status {code}) during {phase} without a result"
        return SessionOutcome(Status.CRASHED.value, {"worker_alive": Check(False, why)}, why, log_tail=self.log_tail())

    def dismiss(self, wait_s: float = 5.0) -> bool:
        """Ask a live worker to drop its mapping of our buffers and exit; True if it confirmed.

        The worker's word only decides whether its arena may be freed later (never whether it is
        reused), so a worker that lies costs memory, not correctness.
        """
        proc = self.proc
        if self.busy or self.handle is None or self.handle.conn is None or proc is None or proc.poll() is not None:
            return False
        try:
            self.handle.conn.send({"op": "exit"})
            if not self.handle.conn.poll(wait_s):
                return False
            msg = protocol.decode(self.handle.conn.recv_bytes(protocol.MAX_FRAME))
        except (EOFError, OSError, protocol.ProtocolViolation):
            return False
        return isinstance(msg, protocol.Bye) and msg.released

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()  # kills the process group, deletes the worker's directories
