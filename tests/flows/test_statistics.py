"""The comparison's statistics on inputs whose answers are known by hand (flows/analysis/statistics.py)."""

from __future__ import annotations

import math
from fractions import Fraction
from math import comb

import numpy as np
import pytest

from flows.analysis import results
from flows.analysis.statistics import (
    avg_at_n,
    bootstrap_difference,
    bootstrap_mean,
    fast_p,
    mean_pass_at_k,
    pass_at_k,
)


@pytest.mark.parametrize(("n", "c", "k", "expected"), [
    (5, 2, 1, 0.4),          # 1 - C(3,1)/C(5,1) = 1 - 3/5
    (5, 2, 2, 0.7),          # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (4, 1, 2, 0.5),          # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (5, 2, 4, 1.0),          # n - c = 3 < k: every 4-subset holds a correct sample
    (10, 0, 3, 0.0),
    (10, 10, 10, 1.0),
    (1000, 1, 1, 0.001),
])
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_stable_for_large_n():
    # exact rational value against the running product: no factorial overflow, ~1e-12 agreement
    for n, c, k in [(200, 50, 20), (500, 3, 100), (1000, 999, 1), (2000, 10, 1000)]:
        exact = 1 - Fraction(comb(n - c, k), comb(n, k))
        assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-10, abs=1e-12)


def test_pass_at_1_is_avg_at_n_and_invalid_inputs_are_refused():
    for n in range(1, 8):
        for c in range(n + 1):
            assert pass_at_k(n, c, 1) == pytest.approx(avg_at_n(n, c))
    for bad in [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)
    with pytest.raises(ValueError):
        avg_at_n(0, 0)
    # averaged over tasks; a task with fewer than k samples is left out
    assert mean_pass_at_k({"a": (4, 2), "b": (4, 0)}, 2) == pytest.approx((5 / 6) / 2)
    assert mean_pass_at_k({"a": (1, 1)}, 2) is None


OUTCOMES = [
    {"turn2_correct": True, "speedup_vs_eager": 2.0, "speedup_vs_compile": 1.1},
    {"turn2_correct": True, "speedup_vs_eager": 1.1, "speedup_vs_compile": 0.5},
    {"turn2_correct": 1.0, "speedup_vs_eager": None},          # correct but untimed: counts for p = 0 only
    {"turn2_correct": False, "speedup_vs_eager": 5.0, "speedup_vs_compile": 9.0},  # fast but wrong: never counts
    {"turn2_correct": math.nan, "speedup_vs_eager": None},      # a NaN flag is not correct
]


def test_fast_p_counts_over_all_tasks():
    assert fast_p(OUTCOMES, 0.0) == pytest.approx(3 / 5)
    assert fast_p(OUTCOMES, 1.0) == pytest.approx(2 / 5)
    assert fast_p(OUTCOMES, 1.2) == pytest.approx(1 / 5)
    assert fast_p(OUTCOMES, 1.0, "speedup_vs_compile") == pytest.approx(1 / 5)
    assert fast_p(OUTCOMES, 1.2, "speedup_vs_compile") == pytest.approx(0.0)
    # a correct task without the baseline's timing counts for p = 0 only
    assert fast_p([{"turn2_correct": True}], 1.0, "speedup_vs_compile") == 0.0
    assert fast_p([{"turn2_correct": True}], 0.0, "speedup_vs_compile") == 1.0
    assert fast_p([], 0.0) is None


def test_fast_p_agrees_with_the_flows_own_fast_p():
    def solved(o):
        return bool(o["turn2_correct"]) and not (isinstance(o["turn2_correct"], float) and math.isnan(o["turn2_correct"]))

    # the flow's outcomes say `correct` (TaskEvalResult.correct); compare's read turn2_correct from MLflow
    outs = {str(i): {**o, "turn2_correct": solved(o), "correct": solved(o)} for i, o in enumerate(OUTCOMES)}
    for p in results.FAST_P:
        assert fast_p(outs.values(), p) == pytest.approx(results.fast_p(outs, p))


def test_degenerate_bootstrap_when_all_values_are_equal():
    iv = bootstrap_mean([0.25] * 7, resamples=500, level=0.9, seed=1)
    assert (iv.estimate, iv.low, iv.high, iv.n) == (0.25, 0.25, 0.25, 7)
    one = bootstrap_mean([0.7])
    assert (one.low, one.high, one.n) == (0.7, 0.7, 1)
    # a constant paired difference is exact whatever the resampling
    d = bootstrap_difference([0.1, 0.2, 0.3], [0.4, 0.5, 0.6], paired=True)
    assert (d.estimate, d.low, d.high) == pytest.approx((0.3, 0.3, 0.3))
    u = bootstrap_difference([0.2, 0.2], [0.5, 0.5, 0.5], paired=False)
    assert (u.estimate, u.low, u.high) == pytest.approx((0.3, 0.3, 0.3))


def test_known_intervals_of_two_values():
    # resampled means of [0, 1] are 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4
    narrow = bootstrap_mean([0, 1], resamples=20_000, level=0.4, seed=0)   # 30th..70th percentile
    assert (narrow.estimate, narrow.low, narrow.high) == (0.5, 0.5, 0.5)
    wide = bootstrap_mean([0, 1], resamples=20_000, level=0.9, seed=0)     # 5th..95th percentile
    assert (wide.low, wide.high) == (0.0, 1.0)


def test_nan_and_none_are_dropped_and_empty_is_nan():
    iv = bootstrap_mean([1.0, None, math.nan, 1.0])
    assert (iv.estimate, iv.n) == (1.0, 2)
    assert math.isnan(bootstrap_mean([None, math.nan]).estimate)
    d = bootstrap_difference([0.0, None, 0.0], [1.0, 1.0, None], paired=True)  # only the first pair is whole
    assert (d.estimate, d.n) == (1.0, 1)
    with pytest.raises(ValueError):
        bootstrap_difference([1.0], [1.0, 2.0], paired=True)
    with pytest.raises(ValueError):
        bootstrap_mean([1.0, 2.0], level=1.5)
    with pytest.raises(ValueError):
        bootstrap_mean([1.0, 2.0], resamples=0)


def test_bootstrap_is_reproducible_from_its_seed():
    values = [0.1, 0.5, 0.2, 0.9, 0.4]
    a, b = bootstrap_mean(values, resamples=2000, seed=7), bootstrap_mean(values, resamples=2000, seed=7)
    assert a == b
    assert a.low < a.estimate < a.high
    assert bootstrap_difference(values, values[::-1], paired=False, resamples=2000, seed=3) == \
        bootstrap_difference(values, values[::-1], paired=False, resamples=2000, seed=3)


def test_percentile_interval_coverage_is_near_nominal():
    # 300 data sets of 40 Bernoulli(0.3) draws on a fixed seed; the 90% interval should cover 0.3 about 90% of
    # the time (the percentile bootstrap undercovers a little at this n: accept 80..97%)
    rng = np.random.default_rng(12345)
    covered = 0
    trials = 300
    for i in range(trials):
        data = (rng.random(40) < 0.3).astype(float)
        iv = bootstrap_mean(data.tolist(), resamples=1000, level=0.9, seed=i)
        covered += iv.low <= 0.3 <= iv.high
    assert 0.80 <= covered / trials <= 0.97
