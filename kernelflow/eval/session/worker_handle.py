"""A worker process from spawn to kill: the one spawn path every worker takes.

`WorkerHandle(spec)` is one worker process. At spawn it gets its own temporary directory (its cwd,
HOME, TMPDIR and TRITON_CACHE_DIR, so compiled kernels are never shared between workers), a private
judge directory for its socket and output file (0700, or 0711 with the socket chowned to it when
the worker has its own UID), a scrubbed environment (`_KEEP_ENV` only; no tokens or credentials),
resource limits (output file size, no core dumps, address space under the interpreter), its own
process group, and its OS isolation (`sandbox/policy.py`: the `unshare`/`setpriv` prefix of its
command, a fresh UID, and what it applies to itself; after `warm` it must report `confined` with
every planned self-applied mechanism, or it is discarded as a start failure). Its bootstrap
(socket address, a fresh 32-byte key, backend, device, isolation) arrives on stdin;
TRITON_INTERPRET is part of its environment, so it is set before triton is imported. The worker
connects to the judge's authenticated socket, imports torch and triton (and on CUDA initialises its
context and allocates the L2-flush buffer), then says `warm` and waits. Only then does a judge hand
it a submission (`handover`): the source is written into the worker's directory and its path sent
over the socket. A handle can be handed over once; the worker judges that one submission and exits,
and the judge kills its process group and deletes its directories.

`SpawnSpec` is everything a spawn needs, known before any submission, so a pool (`session/prewarm.py`) can
spawn ahead with the same path. This module does not keep workers ready (`session/prewarm.py`) and does not
talk to a worker after the handover (`session/link.py`).
"""

from __future__ import annotations

import json
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Listener
from pathlib import Path

from kernelflow.eval import protocol
from kernelflow.eval.sandbox import policy as isolation

# Environment variables a worker may inherit; everything else (tokens, credentials) is dropped.
_KEEP_ENV = ("PATH", "LANG", "LC_ALL", "CUDA_HOME", "LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES",
             "CUDA_VISIBLE_DEVICES", "VIRTUAL_ENV", "PYTHONPATH", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH")


class _WorkerPopen(subprocess.Popen):
    """Popen whose returncode is the worker's own, through the PID-namespace init (sandbox/policy.py)."""

    plan: isolation.WorkerPlan | None = None

    def _handle_exitstatus(self, *args, **kwargs):
        super()._handle_exitstatus(*args, **kwargs)
        if self.plan is not None:
            self.returncode = self.plan.exit_status(self.returncode)


class WorkerStartError(RuntimeError):
    """A worker died or misbehaved before it was handed a submission (the evaluator's fault)."""


@dataclass(frozen=True)
class SpawnSpec:
    """Everything a worker needs at spawn: known before any submission (so a pool can spawn ahead)."""

    backend: str
    device: str
    l2_flush_mb: int
    output_limit_mb: int
    memory_limit_mb: int
    isolation: str = "auto"  # EvalConfig.isolation: "auto" or a level (sandbox/policy.py)

    @classmethod
    def of(cls, config, backend: str, device) -> SpawnSpec:
        return cls(backend, str(device), config.l2_flush_mb, config.output_limit_mb, config.memory_limit_mb,
                   config.isolation)


def worker_environment(workdir: Path, backend: str) -> dict[str, str]:
    """A worker's whole environment: the kept variables only, everything else pointing into `workdir`."""
    env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    env.update(HOME=str(workdir), TMPDIR=str(workdir), PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1",
               PYTHONUNBUFFERED="1", TRITON_CACHE_DIR=str(workdir / "triton_cache"), OMP_NUM_THREADS="1")
    if backend == "interpret":
        env["TRITON_INTERPRET"] = "1"
    return env


def _limits(spec: SpawnSpec):
    def apply() -> None:
        out = spec.output_limit_mb << 20
        resource.setrlimit(resource.RLIMIT_FSIZE, (out, out))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if spec.backend == "interpret":  # CUDA reserves a huge virtual address space: no AS cap there
            cap = spec.memory_limit_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return apply


class WorkerHandle:
    """One spawned worker (see the module docstring). `ensure_warm`, then `handover` once, then `close`."""

    def __init__(self, spec: SpawnSpec):
        self.spec = spec
        self.proc: subprocess.Popen | None = None
        self.conn = None
        self.warm_info: protocol.Warm | None = None  # the worker's warm message, decoded
        self.error: BaseException | None = None
        self.spawned_at = time.monotonic()
        self.pooled = False
        self._done = threading.Event()
        self._background: threading.Thread | None = None
        self._claim_lock = threading.Lock()
        self._claimed = False
        self._listener = None
        resolved = isolation.resolve(spec.backend, spec.isolation)
        base = isolation.reachable_tempdir() if "uid" in resolved.mechanisms else None
        self.workdir = Path(tempfile.mkdtemp(prefix="kf-worker-", dir=base))
        self.sockdir = Path(tempfile.mkdtemp(prefix="kf-judge-", dir=base))
        # The judge's side, never the worker's: a worker owns its workdir and could swap a log there for
        # a symlink to a file only the judge may read, which the judge would then quote in the feedback.
        self.log_path = self.sockdir / "worker.log"
        self.isolation = isolation.plan_worker(resolved, str(self.workdir))
        try:
            # 0711: a worker of another UID may reach its (chowned) socket but not list or plant anything
            os.chmod(self.sockdir, 0o711 if self.isolation.uid is not None else 0o700)
            if self.isolation.uid is not None:
                os.chown(self.workdir, self.isolation.uid, self.isolation.gid)
            self._spawn()
        except BaseException:
            self.close()
            raise

    def _spawn(self) -> None:
        env = worker_environment(self.workdir, self.spec.backend)
        address = str(self.sockdir / "judge.sock")
        authkey = secrets.token_bytes(32)
        self._listener = Listener(address, family="AF_UNIX", authkey=authkey)
        if self.isolation.uid is not None:  # only this worker's UID may connect (the key still authenticates)
            os.chown(address, self.isolation.uid, self.isolation.gid)
        out = open(self.log_path, "wb")  # noqa: SIM115 - handed to the child, closed below
        try:
            self.proc = _WorkerPopen(
                [*self.isolation.prefix, sys.executable, "-m", "kernelflow.eval.worker.main"], stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT, cwd=self.workdir, env=env, start_new_session=True,
                preexec_fn=_limits(self.spec),
            )
        finally:
            out.close()
        self.proc.plan = self.isolation
        setup = {"address": address, "authkey": authkey.hex(), "backend": self.spec.backend, "device": self.spec.device,
                 "l2_flush_mb": self.spec.l2_flush_mb, "isolation": self.isolation.self_setup}
        self.proc.stdin.write((json.dumps(setup) + "\n").encode())
        self.proc.stdin.close()

    # ---- warm-up --------------------------------------------------------------------------------
    def _warm(self, deadline: float) -> None:
        """Accept the worker's connection and wait for its `warm` message (raises on failure)."""
        sock = self._listener._listener._socket
        try:
            while True:  # accept() blocks; poll so a worker that dies before connecting is seen at once
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("the worker did not connect in time")
                sock.settimeout(min(0.5, remaining))
                try:
                    self.conn = self._listener.accept()
                    break
                except TimeoutError:
                    if self.proc.poll() is not None:
                        raise WorkerStartError(self._death("before connecting")) from None
        finally:
            self._listener.close()
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not self.conn.poll(remaining):
            raise TimeoutError("the worker did not finish warming up in time")
        msg = self._receive(protocol.Warm, "during warm-up")
        self._confirm_confined(deadline)
        self.warm_info = msg

    def _receive(self, wanted: type, when: str):
        """One start-up message through the same bounded, typed decoder as every later one (protocol.py)."""
        try:
            msg = protocol.decode(self.conn.recv_bytes(protocol.MAX_FRAME))
        except (EOFError, OSError) as exc:
            raise WorkerStartError(self._death(f"{when} ({type(exc).__name__})")) from None
        except protocol.ProtocolViolation as exc:
            raise WorkerStartError(f"the worker's message {when} was malformed: {exc}") from None
        if not isinstance(msg, wanted):
            raise WorkerStartError(f"the worker sent {type(msg).__name__} {when}, expected {wanted.__name__}")
        return msg

    def _confirm_confined(self, deadline: float) -> None:
        """The worker's word that it confined itself (sandbox/policy.py), sent before any submission exists."""
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not self.conn.poll(remaining):
            raise TimeoutError("the worker did not report its confinement in time")
        msg = self._receive(protocol.Confined, "while confining itself")
        lacking = set(self.isolation.self_applied) - set(msg.applied)
        if msg.error or lacking:
            raise WorkerStartError(f"the worker could not confine itself ({msg.error or sorted(lacking)}); "
                                   f"planned isolation: {self.isolation.resolved.describe(reasons=False)}")

    def _warm_recording(self, deadline: float) -> None:
        try:
            self._warm(deadline)
        except BaseException as exc:  # noqa: BLE001 - kept for whoever takes this handle
            self.error = exc
        finally:
            self._done.set()

    def _death(self, when: str) -> str:
        code = self.proc.poll() if self.proc else None
        try:
            tail = self.log_path.read_bytes()[-600:].decode("utf-8", errors="replace")
        except OSError:
            tail = ""
        return f"the worker exited (status {code}) {when}, before it received a submission: {tail.strip()}"

    def warm_in_background(self, timeout_s: float) -> None:
        self._background = threading.Thread(target=self._warm_recording, args=(time.monotonic() + timeout_s,),
                                            name="kf-prewarm", daemon=True)
        self._background.start()

    @property
    def warming(self) -> bool:
        return not self._done.is_set()

    @property
    def usable(self) -> bool:
        """Warm (or still warming) without an error, and its process alive."""
        return self.error is None and self.proc is not None and self.proc.poll() is None

    def ensure_warm(self, deadline: float) -> None:
        """Block until the worker is warm; TimeoutError past `deadline`, WorkerStartError if it failed."""
        if self._background is None and not self._done.is_set():
            self._warm_recording(deadline)
        elif not self._done.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError("the worker did not finish warming up in time")
        if self.error is not None:
            raise self.error

    # ---- handover -------------------------------------------------------------------------------
    def claim(self) -> None:
        """Mark the handle as taken by one session; a second claim is a bug and raises."""
        with self._claim_lock:
            if self._claimed:
                raise RuntimeError("a worker handle is handed out at most once")
            self._claimed = True

    @property
    def claimed(self) -> bool:
        return self._claimed

    def handover(self, source: str, init_inputs: list) -> None:
        """Give the warm worker its one submission (written into its own directory).

        As UTF-8 with its newlines untranslated: the worker compiles exactly this str (worker/submission.py,
        `load_submission`), the text the static checks parsed, whatever coding cookie it declares."""
        path = self.workdir / "submission.py"
        path.write_text(source, encoding="utf-8", newline="")  # exactly the text the static checks read
        self.conn.send({"op": "judge", "submission_path": str(path), "init_inputs": list(init_inputs)})

    def close(self) -> None:
        """Kill the worker's process group and delete its directories (idempotent)."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - a zombie we cannot reap
                pass
        if self._listener is not None:
            try:
                self._listener.close()
            except OSError:
                pass
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
        shutil.rmtree(self.workdir, ignore_errors=True)
        shutil.rmtree(self.sockdir, ignore_errors=True)
