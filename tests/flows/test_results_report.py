"""Per-task outcomes, the pilot's table, fast_p and the report, from stored stage results (no model, no server)."""

from __future__ import annotations

import pytest

from flows import results
from flows.config import to_experiment_config
from flows.report import TINY_WARNING, artifact_key, write_report
from flows.run_dir import RunDir, write_json
from tests.flows.conftest import compose_config


def turn(n, status, reward=0.0, speedup=None, runtime=None, answer="x"):
    verdict = {"status": status, "speedup_vs_eager": speedup, "runtime_ms": runtime, "roofline_fraction": None}
    return {"turn": n, "status": status, "correct": status == "ok", "reward": reward, "answer": answer, "verdict": verdict}


def record(task_id, *turns):
    return {"task_id": task_id, "seed": 0, "turns": list(turns)}


RECORDS = [
    record("19_ReLU", turn(1, "ok", 2.5, speedup=1.5, runtime=1.0)),               # first try, fast
    record("20_LeakyReLU", turn(1, "incorrect"), turn(2, "ok", 0.9, speedup=1.1)),  # after feedback, a bit fast
    record("23_Softmax", turn(1, "no_code"), turn(2, "compile_error")),             # never
    record("25_Swish", turn(1, "ok", 0.3)),                                          # correct, untimed
]
GROUPS = {"train": ("19_ReLU", "20_LeakyReLU"), "reserved": ("25_Swish",), "heldout": ("23_Softmax",)}


def test_task_outcome():
    o = results.outcomes(RECORDS)
    assert (o["19_ReLU"]["turn1_correct"], o["19_ReLU"]["turn2_correct"]) == (True, True)
    assert (o["20_LeakyReLU"]["turn1_correct"], o["20_LeakyReLU"]["turn2_correct"]) == (False, True)
    assert o["20_LeakyReLU"]["speedup_vs_eager"] == 1.1 and o["20_LeakyReLU"]["solving_turn"] == 2
    assert o["23_Softmax"]["turn2_correct"] is False and o["23_Softmax"]["runtime_ms"] is None
    assert o["19_ReLU"]["reward"] == 2.5


def test_group_counts_and_fast_p():
    o = results.outcomes(RECORDS)
    counts = results.group_counts(o, GROUPS)
    assert counts["train"] == {"tasks": 2, "first": 1, "correct": 2}
    assert counts["overall"] == {"tasks": 4, "first": 2, "correct": 3}
    assert results.fast_p(o, 0.0) == pytest.approx(3 / 4)  # every correct task
    assert results.fast_p(o, 1.0) == pytest.approx(2 / 4)  # untimed correct tasks are not fast
    assert results.fast_p(o, 1.2) == pytest.approx(1 / 4)


def test_task_metrics_name_every_number():
    m = results.task_metrics(results.task_outcome(RECORDS[2]), prefix="trained_eval/")
    assert set(m) == {f"trained_eval/23_Softmax/{k}" for k in results.OUTCOME_KEYS}
    assert m["trained_eval/23_Softmax/turn1_correct"] == 0.0 and m["trained_eval/23_Softmax/runtime_ms"] is None


def test_report_from_stored_results(tmp_path):
    config = to_experiment_config(compose_config(f"tracking.runs_root={tmp_path}"))
    run = RunDir.for_config(config)
    before = [record(t, turn(1, "no_code"), turn(2, "no_code")) for t in config.tasks.all]
    after = RECORDS + [record(t, turn(1, "no_code"), turn(2, "no_code")) for t in config.tasks.all
                       if t not in {r["task_id"] for r in RECORDS}]
    write_json(run.stage_dir("baseline_eval") / "results.json", before)
    write_json(run.stage_dir("trained_eval") / "results.json", after)
    write_json(run.stage_dir("epoch-1") / "updates.json",
               [{"epoch": 1, "update": u, "reward_mean": 0.1 * u, "reward_std": 0.05} for u in range(1, 5)])
    write_json(run.stage_dir("seed_validation") / "validation.json",
               {"seeds": [1000, 1001], "shape": "small", "solved": 3, "validated": 2,
                "tasks": {"19_ReLU": {"correct": 2, "passed": True}, "20_LeakyReLU": {"correct": 1, "passed": False},
                          "25_Swish": {"correct": 2, "passed": True}}})
    rendered = write_report(run, config)
    text = rendered.path.read_text()
    assert TINY_WARNING in text
    assert "| train | 4 | 0 | 2 |" in text and "| **overall, first turn** | 10 | 0 | 2 |" in text
    assert "| 19_ReLU | train | no_code / no_code | ok | 0.000 | 2.500 | 1.0000 | — | 1.50 | 2/2 |" in text
    assert "| 1.2 | 0.00 | 0.10 |" in text
    assert "2 of 3 solved task(s)" in text
    for png in ("reward_per_update.png", "per_task_before_after.png"):
        assert (run.report_dir / png).stat().st_size > 1000
    assert rendered.metrics["report/fast_0/after"] == pytest.approx(0.3)


def test_artifact_keys_are_prefect_safe():
    assert artifact_key("kernelflow-report-Smoke_1.2-abc") == "kernelflow-report-smoke-1-2-abc"
