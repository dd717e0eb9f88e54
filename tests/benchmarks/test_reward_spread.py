"""The pure parts of the issue #19 benchmarks: the spread, the concurrency measure and the settings loader."""

from __future__ import annotations

import pytest

from benchmarks.eval_throughput import load_eval_config, parse_sets, prewarm_value
from benchmarks.reward_spread import others_mean, spread, summarise


def test_spread_is_range_over_mean_and_needs_two_values():
    assert spread([3.0, 3.0, 3.0]) == 0.0
    assert spread([1.0, 3.0]) == pytest.approx(1.0)
    assert spread([2.0]) is None
    assert spread([0.0, 0.0]) is None


def test_others_mean_is_time_weighted():
    own = (0.0, 10.0)
    # one other verdict all along, one for half of it
    assert others_mean(own, [own, (-1.0, 11.0), (5.0, 20.0)]) == pytest.approx(1.5)
    assert others_mean(own, [own]) == pytest.approx(0.0)


def test_gpu_yaml_loads_as_is_and_takes_overrides():
    config, dropped = load_eval_config("gpu")
    assert (config.backend, config.shape, config.gpu_lock, config.timed_runs) == ("cuda", "full", "shared_checks", 20)
    assert dropped == []
    # what eval=gpu and `kernelflow serve` give for a key the file leaves out (not the bare field default 0)
    assert config.prewarm_workers == "auto"
    config, _ = load_eval_config("gpu", parse_sets(["backend=interpret", "compile_baseline=false"]))
    assert config.backend == "interpret" and config.compile_baseline is False


def test_prewarm_value_passes_words_through():
    assert prewarm_value("3") == 3
    assert prewarm_value("auto") == "auto"


def test_summarise_passes_only_steady_ok_rewards():
    meta = {"modes": ["alone"], "tasks": ["19_ReLU", "23_Softmax"]}
    def row(task, reward, status="ok"):
        return {"mode": "alone", "task_id": task, "reward": reward, "runtime_ms": 1.0, "status": status,
                "others_at_start": 0, "others_at_end": 0}
    result = {"meta": meta, "processes": [{"index": 0, "verdicts": [row("19_ReLU", 2.0), row("23_Softmax", 2.0)]},
                                          {"index": 1, "verdicts": [row("19_ReLU", 2.03), row("23_Softmax", 2.1)]}]}
    table = summarise(result, 0.02, 2)["alone"]
    assert table["rows"]["19_ReLU"]["pass"] is True
    assert table["rows"]["23_Softmax"]["pass"] is False
    assert table["all_pass"] is False and table["complete"] is True
