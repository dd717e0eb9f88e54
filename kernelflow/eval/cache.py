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

No cached lucky verdict: an `ok` is served from the cache only once two fresh judgements of the same
key agreed (`verdicts_agree`: same status and correctness, rewards within `REWARD_BAND`). The first ok
is returned but only held as pending; the next identical submission is judged fresh. A code whose
correctness depends on more than its text and inputs (a config drawn per process, a race) can be
lucky once; served from the cache, that one ok would be every later resubmission's reward. If the
second judgement is not ok, the key is marked nondeterministic: that verdict gets a failed
`reproducible_verdict` check and a feedback line, and it is what the cache serves from then on. Two
oks whose rewards differ by more than the band (timing noise, or a config that is sometimes fast)
confirm nothing: the newer one is held pending and the next submission is judged again. Why the band
is 5% and decides only confirmation, never nondeterminism: the same ReLU control was measured with a
runtime spread (max - min) / min of 0.96% to 2.83% over five verdicts on the H200 (docs/evaluator.md),
and a reward moves less than the runtime does; timing noise is the host's, correctness is the code's.
Every verdict that is not ok (and not transient) is stored at once: it earns reward 0, so serving it
cannot forge a reward, and a nondeterministic code that fails first simply stays failed.

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
`clock/baselines.py` (per device) and `clock/roofline.py` (on disk, per device name).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from kernelflow.eval.verdict import Check, Status, Verdict, WallTime

# Statuses that can come from the host rather than the submission: judged again on resubmission.
UNCACHED_STATUSES = frozenset({Status.EVALUATOR_ERROR.value, Status.TIMEOUT.value})
# Two ok verdicts of one key confirm each other when their rewards differ by at most this share of the
# larger (the module docstring says why 5%).
REWARD_BAND = 0.05
# The check a verdict gets when an identical submission was judged ok before and is not ok now.
REPRODUCIBLE_CHECK = "reproducible_verdict"


def verdicts_agree(a: Verdict, b: Verdict, reward_band: float = REWARD_BAND) -> bool:
    """Whether two fresh judgements of one key agree: status, correctness, and rewards within the band."""
    if a.status != b.status or a.correct != b.correct:
        return False
    return abs(a.reward - b.reward) <= reward_band * max(abs(a.reward), abs(b.reward))


def mark_nondeterministic(verdict: Verdict, earlier: Verdict) -> Verdict:
    """`verdict` (not ok) with a failed `reproducible_verdict` check and a feedback line saying why."""
    why = (f"an identical submission was judged {earlier.status} (reward {earlier.reward:.3g}) and is {verdict.status} "
           "now: its result depends on more than its code and inputs (a configuration chosen per process, a race, "
           "uninitialised memory), so it is not cached as ok")
    feedback = f"{verdict.feedback}\n{why}" if verdict.feedback else why
    return replace(verdict, checks={**verdict.checks, REPRODUCIBLE_CHECK: Check(False, why)}, feedback=feedback)


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
    pending: int = 0  # ok verdicts held until a second fresh judgement confirms them
    confirmed: int = 0  # ok verdicts stored after two agreeing judgements
    nondeterministic: int = 0  # keys judged ok once and not ok on a fresh judgement


class _InFlight:
    def __init__(self) -> None:
        self.done = threading.Event()


class VerdictCache:
    """A bounded, thread-safe LRU of verdicts with single-flight judging (see the module docstring).

    `_items` holds what is served (verdicts that are not ok, and confirmed oks); `_pending` the first
    ok of a key, which is never served. Both are bounded by `capacity`.
    """

    def __init__(self, capacity: int, reward_band: float = REWARD_BAND):
        if capacity < 0:
            raise ValueError(f"verdict cache capacity must be >= 0, got {capacity}")
        if not 0 <= reward_band < 1:
            raise ValueError(f"reward_band must be in [0, 1), got {reward_band}")
        self.capacity = capacity
        self.reward_band = reward_band
        self._items: OrderedDict[tuple, Verdict] = OrderedDict()
        self._pending: OrderedDict[tuple, Verdict] = OrderedDict()
        self._in_flight: dict[tuple, _InFlight] = {}
        self._lock = threading.Lock()
        self._hits = self._misses = self._waits = self._stores = self._skipped = 0
        self._confirmed = self._nondeterministic = 0

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def get(self, key: tuple) -> Verdict | None:
        """The served verdict (as stored, cached=False) or None; a hit refreshes its LRU position.

        A pending (unconfirmed) ok is not served: None.
        """
        with self._lock:
            verdict = self._items.get(key)
            if verdict is not None:
                self._items.move_to_end(key)
            return verdict

    def _store(self, key: tuple, verdict: Verdict) -> None:
        self._items[key] = replace(verdict, cached=False)
        self._items.move_to_end(key)
        self._stores += 1
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def record(self, key: tuple, verdict: Verdict) -> Verdict:
        """Take a fresh judgement of `key` into the cache; returns the verdict to answer with.

        Not ok (and not transient): stored at once; if an ok of this key was pending, the key is
        nondeterministic and the answer carries the failed `reproducible_verdict` check. Ok: held
        pending the first time, stored once a second ok agrees (`verdicts_agree`), else the newer
        one is held pending. Transient statuses are neither stored nor compared.
        """
        if not self.enabled:
            return verdict
        with self._lock:
            if verdict.status in UNCACHED_STATUSES:
                self._skipped += 1
                return verdict
            if verdict.status != Status.OK.value:
                earlier = self._pending.pop(key, None)
                if earlier is not None:
                    verdict = mark_nondeterministic(verdict, earlier)
                    self._nondeterministic += 1
                self._store(key, verdict)
                return verdict
            earlier = self._pending.pop(key, None)
            if earlier is not None and verdicts_agree(earlier, verdict, self.reward_band):
                self._store(key, verdict)
                self._confirmed += 1
                return verdict
            self._pending[key] = replace(verdict, cached=False)
            while len(self._pending) > self.capacity:
                self._pending.popitem(last=False)
            return verdict

    def put(self, key: tuple, verdict: Verdict) -> bool:
        """`record` a fresh judgement; returns whether the key is now served from the cache."""
        self.record(key, verdict)
        with self._lock:
            return key in self._items

    def get_or_judge(self, key: tuple, judge: Callable[[], Verdict], started: float | None = None) -> Verdict:
        """The served verdict for `key` (cached=True), else `judge()`'s, recorded for next time.

        Identical keys in flight are judged once: a second caller waits for the first and then reads
        its stored verdict (or, if it was not storable or is an unconfirmed ok, judges itself: so a
        burst of identical submissions costs two judgements when the first is ok, one otherwise).
        `started`: the monotonic time the request arrived, so a cached verdict's `total_s` covers the
        whole answer.
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
                continue  # stored now, or not storable / only pending: then this caller judges it itself
            try:
                return self.record(key, judge())
            finally:
                with self._lock:
                    self._in_flight.pop(key, None)
                flight.done.set()

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, self._waits, self._stores, self._skipped, len(self._items),
                              self.capacity, pending=len(self._pending), confirmed=self._confirmed,
                              nondeterministic=self._nondeterministic)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._pending.clear()


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
