"""What the judge keeps between submissions: a verdict cache and an input/reference cache.

`VerdictCache` answers an identical resubmission (common within a GRPO group and across greedy
evaluations) without running anything. Its key (`verdict_key`) holds everything a verdict depends on:
the sha256 of the extracted code, the task, the shape profile, the seeds, the input distribution, the
tolerance mode, the judging-config hash (`config_hash(config, EVALUATOR_VERSION)`: every setting that
changes a verdict, the reward constants and the evaluator version), the backend and the device name.
It is a bounded LRU (`verdict_cache_size`; 0 disables it) and thread-safe. Identical submissions that
arrive together are judged once: the later ones wait for the first (single flight). `evaluator_error`
and `timeout` verdicts are never stored: they can be transient (an overloaded host, a worker that
could not start), so the next identical submission is judged again. A stored verdict comes back with
`cached=True` and a `wall_time` that is the lookup's own (queue_s: time spent waiting for an identical
submission in flight; total_s: the whole answer).

`ReferenceCache` keeps what the correctness checks need that does not depend on the submission: the
input of one (task, shape, seed, distribution, dtype, device, evaluator version) and its float64
reference output. It lives in the judge's process; the worker only ever receives copies of inputs
(bytes, or CUDA IPC buffers the judge refills from the cached tensor), never a reference. It is bounded
by bytes (`input_cache_mb`; 0 disables it) and evicts least recently used entries; an entry larger
than the whole budget (a 6.4 GB full-shape input with its 12.9 GB reference) is never stored, so full
shapes on a GPU compute their reference per call as before. Callers must treat the tensors it hands
out as read-only.

Neither cache touches disk or outlives the process; a code change needs a restart anyway, and the
evaluator version is part of every key. The device calibration and eager timings are cached in
`evaluator.py` (per device) and `roofline.py` (on disk, per device name).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from kernelflow.eval.verdict import Status, Verdict, WallTime

# Statuses that can come from the host rather than the submission: judged again on resubmission.
UNCACHED_STATUSES = frozenset({Status.EVALUATOR_ERROR.value, Status.TIMEOUT.value})


def verdict_key(*, code_sha256: str, task_id: str, shape: str, seeds: list[int], distribution: str,
                tolerance_mode: str, config_hash: str, backend: str, device: str) -> tuple:
    """The verdict cache key: everything a verdict depends on (see the module docstring)."""
    return (code_sha256, task_id, shape, tuple(int(s) for s in seeds), distribution, tolerance_mode, config_hash,
            backend, device)


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    waits: int  # identical submissions that waited for one in flight
    stores: int
    skipped: int  # verdicts not stored (evaluator_error, timeout)
    size: int
    capacity: int


class _InFlight:
    def __init__(self) -> None:
        self.done = threading.Event()


class VerdictCache:
    """A bounded, thread-safe LRU of verdicts with single-flight judging (see the module docstring)."""

    def __init__(self, capacity: int):
        if capacity < 0:
            raise ValueError(f"verdict cache capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self._items: OrderedDict[tuple, Verdict] = OrderedDict()
        self._in_flight: dict[tuple, _InFlight] = {}
        self._lock = threading.Lock()
        self._hits = self._misses = self._waits = self._stores = self._skipped = 0

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def get(self, key: tuple) -> Verdict | None:
        """The stored verdict (as stored, cached=False) or None; a hit refreshes its LRU position."""
        with self._lock:
            verdict = self._items.get(key)
            if verdict is not None:
                self._items.move_to_end(key)
            return verdict

    def put(self, key: tuple, verdict: Verdict) -> bool:
        """Store `verdict` unless its status may be transient; returns whether it was stored."""
        if not self.enabled:
            return False
        with self._lock:
            if verdict.status in UNCACHED_STATUSES:
                self._skipped += 1
                return False
            self._items[key] = replace(verdict, cached=False)
            self._items.move_to_end(key)
            self._stores += 1
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
            return True

    def get_or_judge(self, key: tuple, judge: Callable[[], Verdict], started: float | None = None) -> Verdict:
        """The stored verdict for `key` (cached=True), else `judge()`'s, stored for next time.

        Identical keys in flight are judged once: a second caller waits for the first and then reads
        its stored verdict (or, if it was not storable, judges itself). `started`: the monotonic time
        the request arrived, so a cached verdict's `total_s` covers the whole answer.
        """
        if not self.enabled:
            return judge()
        started = time.monotonic() if started is None else started
        waited = 0.0
        while True:
            with self._lock:
                stored = self._items.get(key)
                if stored is not None:
                    self._items.move_to_end(key)
                    self._hits += 1
                    return replace(stored, cached=True, wall_time=WallTime(
                        queue_s=waited, total_s=time.monotonic() - started))
                flight = self._in_flight.get(key)
                if flight is None:
                    flight = self._in_flight[key] = _InFlight()
                    self._misses += 1
                    owner = True
                else:
                    self._waits += 1
                    owner = False
            if not owner:
                t0 = time.monotonic()
                flight.done.wait()
                waited += time.monotonic() - t0
                continue  # stored now, or not storable: then this caller judges it itself
            try:
                verdict = judge()
                self.put(key, verdict)
                return verdict
            finally:
                with self._lock:
                    self._in_flight.pop(key, None)
                flight.done.set()

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, self._waits, self._stores, self._skipped, len(self._items),
                              self.capacity)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


@dataclass(frozen=True)
class Reference:
    """One call's submission-independent data: its inputs and the float64 (or integer) reference output."""

    inputs: tuple[torch.Tensor, ...]
    expected: torch.Tensor

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.inputs, self.expected))


def reference_key(*, task_id: str, shapes: tuple[tuple[int, ...], ...], seed: int, distribution: str, dtype: str,
                  device: str, evaluator_version: str) -> tuple:
    return (task_id, tuple(tuple(s) for s in shapes), int(seed), distribution, dtype, device, evaluator_version)


class ReferenceCache:
    """A byte-bounded, thread-safe LRU of `Reference`s (see the module docstring)."""

    def __init__(self, budget_bytes: int):
        self.budget_bytes = max(0, int(budget_bytes))
        self._items: OrderedDict[tuple, Reference] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def fits(self, nbytes: int) -> bool:
        """Whether an entry of `nbytes` could ever be stored (full-shape tensors usually cannot)."""
        return 0 < nbytes <= self.budget_bytes

    def get(self, key: tuple) -> Reference | None:
        with self._lock:
            ref = self._items.get(key)
            if ref is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return ref

    def put(self, key: tuple, ref: Reference) -> bool:
        size = ref.nbytes
        if not self.fits(size):
            return False
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._items[key] = ref
            self._bytes += size
            while self._bytes > self.budget_bytes:
                _, evicted = self._items.popitem(last=False)
                self._bytes -= evicted.nbytes
            return True

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
