"""The statistics of a multi-seed comparison: pass@k, avg@n, fast_p and percentile bootstrap intervals.

    pass_at_k(n, c, k)   the unbiased estimator of "at least one of k samples is correct" from n samples
                         of which c are correct: 1 - C(n-c, k) / C(n, k), computed as a running product
                         (no factorials, so it is exact in floating point for any n)
    avg_at_n(n, c)       the mean correctness of the n samples, c / n
    fast_p(outcomes, p)  KernelBench's fast_p: the fraction of ALL tasks that are correct and faster
                         than the baseline by more than p (`speedup_key` picks the baseline: eager, or
                         torch.compile through `speedup_vs_compile`). fast_0 is the correct fraction:
                         a correct task without a timing counts for p = 0 only. Tasks that are not
                         correct count in the denominator, never in the numerator.
    bootstrap_mean       percentile bootstrap interval of a mean (e.g. a success rate over seeds)
    bootstrap_difference the same for after - before: paired (per-seed differences are resampled)
                         or unpaired (each side resampled on its own)

Every bootstrap takes a seed and uses its own `numpy.random.Generator`, so a report is reproducible.
The unit of resampling is whatever the caller passes: the comparison passes one value per seed (a
task's 0/1 outcome, a group's success fraction), so the interval says how much the number moves from
seed to seed, not how it would move with other tasks. With one value the interval is that value.
NaN values (a metric that does not exist for a run) are dropped before anything is computed.

Pure functions over numbers; nothing here reads MLflow or writes files (that is the comparison's:
`flows/analysis/seed_runs.py` reads the runs, `flows/analysis/comparison.py` writes the files).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

DEFAULT_RESAMPLES = 10_000
DEFAULT_LEVEL = 0.95


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k) (Chen et al. 2021, Kevin)."""
    if not (0 <= c <= n):
        raise ValueError(f"pass_at_k: c={c} correct of n={n} samples (need 0 <= c <= n)")
    if not (1 <= k <= n):
        raise ValueError(f"pass_at_k: k={k} with n={n} samples (need 1 <= k <= n; draw more samples or lower k)")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i): a product of numbers in (0, 1], no overflow.
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def avg_at_n(n: int, c: int) -> float:
    """The mean correctness of n samples with c correct."""
    if n <= 0 or not (0 <= c <= n):
        raise ValueError(f"avg_at_n: c={c} correct of n={n} samples (need n >= 1 and 0 <= c <= n)")
    return c / n


def mean_pass_at_k(samples: Mapping[str, tuple[int, int]], k: int) -> float | None:
    """pass@k averaged over tasks (`samples`: task -> (n, c)); tasks with fewer than k samples are skipped."""
    values = [pass_at_k(n, c, k) for n, c in samples.values() if n >= k]
    return float(np.mean(values)) if values else None


def fast_p(outcomes: Iterable[Mapping[str, Any]], p: float, speedup_key: str = "speedup_vs_eager",
           correct_key: str = "turn2_correct") -> float | None:
    """KernelBench's fast_p over `outcomes` (one mapping per task; see the module docstring); None without tasks.

    A task with no `speedup_key` value counts for p = 0 only, so whether the baseline was timed at all
    (e.g. torch.compile) is the caller's question: only correct kernels carry a speedup, so their
    absence cannot tell "not measured" from "nothing correct".
    """
    outs = list(outcomes)
    if not outs:
        return None
    hits = 0
    for o in outs:
        if not _truthy(o.get(correct_key)):
            continue
        s = o.get(speedup_key)
        if p == 0 or (_finite(s) and float(s) > p):
            hits += 1
    return hits / len(outs)


@dataclass(frozen=True)
class Interval:
    """A point estimate with its percentile bootstrap interval (`n`: values used; `low == high` when n <= 1
    or all values are equal)."""

    estimate: float
    low: float
    high: float
    level: float
    n: int
    resamples: int

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def format(self, digits: int = 2) -> str:
        if math.isnan(self.estimate):
            return "—"
        if self.n <= 1:
            return f"{self.estimate:.{digits}f}"
        return f"{self.estimate:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def _values(values: Iterable[float | None]) -> np.ndarray:
    arr = np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    return arr[~np.isnan(arr)]


def _check(resamples: int, level: float) -> None:
    if resamples < 1:
        raise ValueError(f"bootstrap: resamples={resamples} (need >= 1; 10000 is usual)")
    if not (0.0 < level < 1.0):
        raise ValueError(f"bootstrap: level={level} (a probability, e.g. 0.95)")


def _resampled_means(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    idx = rng.integers(0, len(values), size=(resamples, len(values)))
    return values[idx].mean(axis=1)


def _interval(estimate: float, stats: np.ndarray, level: float, n: int, resamples: int) -> Interval:
    alpha = (1.0 - level) / 2.0
    # inverted_cdf: each bound is a value some resample took (linear interpolation would invent values
    # between the few that a small number of seeds allows, e.g. 0.84 between 2/3 and 1)
    low, high = np.quantile(stats, [alpha, 1.0 - alpha], method="inverted_cdf")
    return Interval(float(estimate), float(low), float(high), level, n, resamples)


def _nan(level: float, resamples: int) -> Interval:
    return Interval(math.nan, math.nan, math.nan, level, 0, resamples)


def bootstrap_mean(values: Sequence[float | None], resamples: int = DEFAULT_RESAMPLES, level: float = DEFAULT_LEVEL,
                   seed: int = 0) -> Interval:
    """The mean of `values` (NaN/None dropped) with its percentile bootstrap interval."""
    _check(resamples, level)
    arr = _values(values)
    if arr.size == 0:
        return _nan(level, resamples)
    if np.all(arr == arr[0]):  # one value, or all equal: every resample is that value (exactly, no rounding)
        value = float(arr[0])
        return Interval(value, value, value, level, int(arr.size), resamples)
    estimate = float(arr.mean())
    stats = _resampled_means(arr, resamples, np.random.default_rng(seed))
    return _interval(estimate, stats, level, int(arr.size), resamples)


def bootstrap_difference(before: Sequence[float | None], after: Sequence[float | None], paired: bool = True,
                         resamples: int = DEFAULT_RESAMPLES, level: float = DEFAULT_LEVEL, seed: int = 0) -> Interval:
    """mean(after) - mean(before) with its percentile bootstrap interval.

    `paired`: before[i] and after[i] belong together (the same seed's run before and after training);
    the per-pair differences are resampled, and a pair with either side missing is dropped. Unpaired:
    each side is resampled on its own with one generator.
    """
    _check(resamples, level)
    if paired:
        if len(before) != len(after):
            raise ValueError(f"bootstrap_difference: paired samples of different lengths ({len(before)} vs {len(after)})")
        diffs = [None if b is None or a is None else float(a) - float(b) for b, a in zip(before, after, strict=True)]
        return bootstrap_mean(diffs, resamples, level, seed)
    b, a = _values(before), _values(after)
    if b.size == 0 or a.size == 0:
        return _nan(level, resamples)
    estimate = float(a.mean() - b.mean())
    rng = np.random.default_rng(seed)
    stats = _resampled_means(a, resamples, rng) - _resampled_means(b, resamples, rng)
    return _interval(estimate, stats, level, int(min(a.size, b.size)), resamples)


def _finite(value: Any) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _truthy(value: Any) -> bool:
    """A correctness flag as stored: bool, or a 0/1 float metric (NaN: not correct)."""
    if value is None:
        return False
    if isinstance(value, float) and math.isnan(value):
        return False
    return bool(value)
