"""tests/helpers/gpu_record.py: GPU tests keep their verdicts only when the run names a folder."""

from __future__ import annotations

import json

from kernelflow.eval.verdict import Verdict
from tests.helpers.gpu_record import ENV_VAR, record_verdict


def _verdict() -> Verdict:
    return Verdict(task_id="19_ReLU", status="ok", correct=True, reward=2.9, feedback="", code_sha256="ab",
                   evaluator_version="v", backend="cuda", device="H200", shape="full", seeds=[1, 2],
                   runtime_ms=3.05)


def test_nothing_is_written_without_the_variable(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert record_verdict("19_ReLU", _verdict(), 1.0) is None
    assert list(tmp_path.iterdir()) == []


def test_the_verdict_round_trips_through_the_file(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "verdicts"))
    path = record_verdict("tests/x.py::t[19_ReLU]", _verdict(), 12.5)
    assert path is not None and path.parent == tmp_path / "verdicts"
    assert "/" not in path.name and "[" not in path.name  # one flat, portable file name per test
    data = json.loads(path.read_text())
    assert data.pop("verdict_wall_s") == 12.5
    assert Verdict.from_dict(data) == _verdict()
