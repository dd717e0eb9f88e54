"""benchmarks/first_call_profile.py under the interpreter: the split it reports adds up and names every call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelflow.eval import EvalConfig
from kernelflow.eval.session import build_plan
from kernelflow.tasks import TASKS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_profile_splits_the_first_call(tmp_path):
    subprocess.run([sys.executable, "benchmarks/first_call_profile.py", "--backend", "interpret", "--shape", "small",
                    "--verdicts", "1", "--out", str(tmp_path)], cwd=ROOT, check=True, timeout=300,
                   env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True)
    result = json.loads((tmp_path / "first_call_profile.json").read_text())
    (row,) = result["verdicts"]
    assert row["status"] == "ok"
    config = EvalConfig(backend="interpret", shape="small")
    assert row["calls"] == len(build_plan(TASKS["19_ReLU"], config, list(range(config.seeds)), "interpret"))
    first = row["first"]
    # The worker's own phases happen inside the judge's wait for its reply, so they cannot exceed it.
    assert 0 < first["forward_s"] <= first["judge_s"]
    assert first["worker_setup_s"] >= 0 and first["rest_s"] >= -1e-3
    assert row["later_median"]["forward_s"] > 0
    assert "| 1 | ok |" in (tmp_path / "first_call_profile.md").read_text()
