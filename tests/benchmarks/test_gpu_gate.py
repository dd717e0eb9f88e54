"""benchmarks/gpu_gate.py, the GPU gate's summary: green only when every part is, red with the reason otherwise.

The inputs are written in the formats the gate's parts produce (pytest -v under xdist, controls.json,
eval_throughput.json), as seen in the first gate run on an H200 (2026-12-03).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_gate  # noqa: E402

EXPECTED = json.loads((ROOT / "benchmarks" / "gate_expected.json").read_text())
PASSED = ("[gw3] [ 60%] PASSED tests/eval/test_adversarial.py::test_adversarial_cuda[torch_inside_launch_global] \n"
          "[gw1] [ 64%] PASSED tests/eval/test_timing.py::test_empty_region_overhead \n")
FINAL = "======================= 2 passed, 1 skipped in 212.40s (0:03:32) =======================\n"


ALONE = "tests/eval/test_timing.py::test_empty_region_overhead_is_small_and_capped PASSED\n" + FINAL


def _folder(tmp_path: Path, log: str = PASSED + FINAL, rewards: dict | None = None, statuses: dict | None = None,
            alone: str = ALONE) -> Path:
    gate = tmp_path / "gate"
    (gate / "controls").mkdir(parents=True)
    (gate / "throughput").mkdir()
    (gate / "gpu-tests.log").write_text(log)
    (gate / "gpu-alone.log").write_text(alone)
    rows = [{"task_id": t, "status": "ok", "reward": r, "runtime_ms": 3.0}
            for t, r in (rewards or EXPECTED["rewards"]).items()]
    meta = {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "triton": "3.6.0", "evaluator_version": "x", "date": "d"}
    (gate / "controls" / "controls.json").write_text(json.dumps({"meta": meta, "rows": rows}))
    summary = {"n": 13, "p50_s": 2.5, "throughput_per_min": 54.0,
               "statuses": statuses or EXPECTED["throughput_statuses"]}
    (gate / "throughput" / "eval_throughput.json").write_text(
        json.dumps({"meta": meta, "runs": [{"judge": "kernelflow", "pool": 2, "summary": summary}]}))
    return gate


def test_a_clean_run_is_green(tmp_path, capsys):
    gate = _folder(tmp_path)
    assert gpu_gate.main([str(gate)]) == 0
    summary = json.loads((gate / "summary.json").read_text())
    assert summary["ok"] and summary["gpu_tests"]["counts"] == {"PASSED": 3}
    assert (gate / "summary.md").read_text().startswith("# GPU gate: GREEN")


def test_pytest_cut_by_its_limit_is_red_even_with_no_failure(tmp_path):
    gate = _folder(tmp_path, log=PASSED)  # no final line: the step's timeout killed pytest
    assert gpu_gate.main([str(gate)]) == 1
    assert "did not finish" in json.loads((gate / "summary.json").read_text())["gpu_tests"]["why"]


def test_a_failed_test_is_named(tmp_path):
    log = PASSED + "[gw2] [ 70%] FAILED tests/eval/test_gpu_evaluator.py::test_honest_relu_is_timed_and_rewarded \n" + FINAL
    gate = _folder(tmp_path, log=log)
    assert gpu_gate.main([str(gate)]) == 1
    assert "test_honest_relu_is_timed_and_rewarded" in (gate / "summary.md").read_text()


def test_a_control_off_its_stored_reward_is_red(tmp_path):
    rewards = dict(EXPECTED["rewards"])
    rewards["23_Softmax"] *= 1 - 2 * EXPECTED["tolerance"]  # beyond the tolerance
    gate = _folder(tmp_path, rewards=rewards)
    assert gpu_gate.main([str(gate)]) == 1
    assert "23_Softmax" in json.loads((gate / "summary.json").read_text())["controls"]["why"]


def test_a_missing_control_and_unexpected_throughput_statuses_are_red(tmp_path):
    rewards = {k: v for k, v in EXPECTED["rewards"].items() if k != "19_ReLU"}
    gate = _folder(tmp_path, rewards=rewards, statuses={"ok": 9, "evaluator_error": 1, "compile_error": 1,
                                                        "incorrect": 1, "static_rejected": 1})
    assert gpu_gate.main([str(gate)]) == 1
    summary = json.loads((gate / "summary.json").read_text())
    assert "19_ReLU: not judged" in summary["controls"]["why"]
    assert "evaluator_error" in summary["throughput"]["why"]


def test_a_part_that_left_nothing_is_red(tmp_path):
    gate = _folder(tmp_path)
    (gate / "throughput" / "eval_throughput.json").unlink()
    assert gpu_gate.main([str(gate)]) == 1
    assert "did not finish" in json.loads((gate / "summary.json").read_text())["throughput"]["why"]


def test_the_clock_tests_run_alone_count_too(tmp_path):
    gate = _folder(tmp_path, alone="tests/eval/test_timing.py::test_empty_region_overhead_is_small_and_capped FAILED\n"
                   + FINAL)
    assert gpu_gate.main([str(gate)]) == 1
    assert "test_empty_region_overhead_is_small_and_capped" in json.loads((gate / "summary.json").read_text())["gpu_tests"]["why"]


def test_failures_are_written_as_they_happen_when_the_gate_asks(tmp_path):
    # tests/conftest.py's hook: a gate run cut by its limit still leaves each failure's report behind
    import os
    import subprocess

    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_runtest_logreport  # noqa: F401\n")
    (tmp_path / "test_x.py").write_text("def test_ok():\n    pass\n\ndef test_bad():\n    assert 1 == 2, 'the reason'\n")
    log = tmp_path / "failures.log"
    env = {**os.environ, "KF_FAILURES_LOG": str(log), "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)], cwd=tmp_path,
                   env=env, capture_output=True, text=True, timeout=120)
    text = log.read_text()
    assert "test_x.py::test_bad (call)" in text and "the reason" in text and "test_ok" not in text
