"""A pool of pre-warmed fresh workers, and how large it is.

Every worker starts through one spawn path (`session/worker_handle.py`: `WorkerHandle`, `SpawnSpec`).
Without a pool (`prewarm_workers = 0`, the library default) a session spawns a handle and waits for
`warm` itself, exactly as long as a fresh worker always took. With `WarmPool(spec, size)`, `size`
handles are spawned ahead of time and warm up in the background; a session takes one (a warm one
if any, else the one that has been warming longest), and a replacement is spawned at once. A pooled
worker has judged nothing when it is taken and is never returned to the pool. A pooled worker that
fails to warm up is discarded and the session spawns a fresh one (the submission is not blamed for
the evaluator's trouble); repeated warm-up failures back the pool off.

The pool's size: `prewarm_workers = N`, or "auto", which `pool_size` resolves when the Evaluator starts
from this host's cores and available memory and, on CUDA, the device's free memory (the rule is
`config.auto_prewarm_workers`). "auto" is the default of every judge that serves verdicts
(`config.SERVE_DEFAULTS`: the environment server and the Hydra conf); the library default and
`kernelflow eval` (one submission per process, `config.ONE_SHOT_DEFAULTS`) keep 0, so one-off
evaluators (tests, benchmarks, the CLI) spawn no pool that they could not use. On a GPU each idle pooled
worker holds a CUDA context (~0.5 GB) and the L2-flush buffer, and a worker warming up while another
verdict is being timed may disturb that timing: that is measured on the H200 before the GPU default is
called validated (docs/eval_speed.md). On the CPU the pool only costs memory (~300 MB per idle worker).

This module does not spawn a worker itself (`session/worker_handle.py`) or talk to one (`session/link.py`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass

from kernelflow.eval.config import auto_prewarm_workers
from kernelflow.eval.session.worker_handle import SpawnSpec, WorkerHandle

log = logging.getLogger(__name__)


def host_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def host_available_mb() -> float:
    """The host memory available for new processes (MemAvailable), in MB."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:  # pragma: no cover - not Linux
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**20  # pragma: no cover


def pool_size(config, backend: str, device) -> int:
    """The number of pre-warmed workers for `config.prewarm_workers` (an int, or "auto": sized here)."""
    if config.prewarm_workers != "auto":
        return int(config.prewarm_workers)
    device_free_mb = None
    if backend == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info(device)
        device_free_mb = free / 2**20
    n = auto_prewarm_workers(backend=backend, max_workers=config.max_workers, cores=host_cores(),
                             host_available_mb=host_available_mb(), device_free_mb=device_free_mb,
                             l2_flush_mb=config.l2_flush_mb)
    log.info("prewarm_workers=auto: %d pre-warmed worker(s) (max_workers %d, %d cores, %.0f MB host memory "
             "available%s)", n, config.max_workers, host_cores(), host_available_mb(),
             "" if device_free_mb is None else f", {device_free_mb:.0f} MB free on {device}")
    return n


@dataclass(frozen=True)
class PoolStats:
    size: int
    idle: int  # spawned, not yet taken (warm or warming)
    warm: int  # of which warm
    spawned: int
    handed_out: int
    warmup_failures: int


class WarmPool:
    """`size` pre-warmed fresh workers kept ready for one spec (see the module docstring)."""

    def __init__(self, spec: SpawnSpec, size: int, warmup_timeout_s: float = 180.0, max_backoff_s: float = 60.0):
        if size < 1:
            raise ValueError(f"a warm pool needs size >= 1, got {size}")
        self.spec = spec
        self.size = size
        self.warmup_timeout_s = warmup_timeout_s
        self.max_backoff_s = max_backoff_s
        self._idle: list[WorkerHandle] = []
        self._cond = threading.Condition()
        self._closed = False
        self._failures = 0  # consecutive warm-up failures: each doubles the wait before the next spawn
        self._spawned = self._handed_out = self._warmup_failures = 0
        self._keeper = threading.Thread(target=self._keep_full, name="kf-warm-pool", daemon=True)
        self._keeper.start()

    def _keep_full(self) -> None:
        while True:
            with self._cond:
                while not self._closed and len(self._idle) >= self.size:
                    self._cond.wait()
                if self._closed:
                    return
                backoff = min(self.max_backoff_s, 2.0 ** self._failures - 1) if self._failures else 0.0
            if backoff:
                log.warning("warm pool: %d consecutive warm-up failures; next spawn in %.0f s", self._failures, backoff)
                with self._cond:
                    self._cond.wait_for(lambda: self._closed, timeout=backoff)
            try:
                handle = WorkerHandle(self.spec)
            except Exception as exc:  # noqa: BLE001 - the pool keeps trying, backed off
                log.warning("warm pool: could not spawn a worker: %s", exc)
                with self._cond:
                    self._failures += 1
                    self._warmup_failures += 1
                continue
            handle.pooled = True
            with self._cond:
                if self._closed:
                    handle.close()
                    return
                self._idle.append(handle)
                self._spawned += 1
            threading.Thread(target=self._warm, args=(handle,), name="kf-prewarm", daemon=True).start()

    def _warm(self, handle: WorkerHandle) -> None:
        handle.warm_in_background(self.warmup_timeout_s)
        handle._background.join()
        with self._cond:
            if handle.error is None:
                self._failures = 0
                return
            if self._closed:  # killed by close(): not a failure
                return
            self._failures += 1
            self._warmup_failures += 1
            discard = handle in self._idle
            if discard:
                self._idle.remove(handle)
                self._cond.notify_all()
        log.warning("warm pool: a worker failed to warm up: %s", handle.error)
        if discard:
            handle.close()

    def acquire(self) -> WorkerHandle | None:
        """Take a worker for one submission: a warm one, else the longest-warming one; None if empty."""
        dead: list[WorkerHandle] = []
        with self._cond:
            chosen = None
            for h in list(self._idle):
                if not h.usable and not h.warming:
                    self._idle.remove(h)
                    dead.append(h)
                elif chosen is None and not h.warming and h.usable:
                    chosen = h
            if chosen is None:
                pending = [h for h in self._idle if h.warming and h.usable]
                chosen = pending[0] if pending else None
            if chosen is not None:
                self._idle.remove(chosen)
                chosen.claim()
                self._handed_out += 1
            self._cond.notify_all()  # the keeper spawns the replacement at once
        for h in dead:
            h.close()
        return chosen

    def stats(self) -> PoolStats:
        with self._cond:
            return PoolStats(self.size, len(self._idle), sum(1 for h in self._idle if not h.warming and h.usable),
                             self._spawned, self._handed_out, self._warmup_failures)

    def wait_warm(self, timeout_s: float) -> bool:
        """Wait until `size` workers are warm (for benchmarks and tests); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            s = self.stats()
            if s.warm >= self.size:
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        """Stop refilling and kill every idle worker."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._cond.notify_all()
        for h in idle:
            h.close()
