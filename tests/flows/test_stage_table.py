"""The stage table is the one place the stage order lives: the dry-run plan and the flow both follow it.

The table is changed (a stage removed, one added, a condition flipped) and the test reads the plan
(`experiment_plan`, `render_plan`) and runs the flow's body (`experiment_flow.fn`: no Prefect server)
with every row's task replaced by a stand-in that records its call through the real `run_stage`
(state.json, a nested MLflow run in the run's own SQLite store). No model is loaded and no
environment server starts (`open_endpoint` is replaced). What each real stage does is covered by
test_experiment.py (end to end) and the stage-specific tests.
"""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext

import pytest

from flows import experiment_flow, stage_table
from flows.config import to_container, to_experiment_config
from flows.plan import experiment_plan, render_plan, stages
from flows.run_dir import RunDir
from flows.stages import run_stage
from tests.flows.conftest import compose_config

pytestmark = pytest.mark.timeout(300)


def test_the_table_names_every_stage_once_in_protocol_order():
    config = to_experiment_config(compose_config("experiment=pilot", "evaluation.samples=2"))
    names = stages(config)
    assert names == ["provenance", "policy", "baseline_eval", "baseline_sampled", "epoch-1", "epoch-2", "epoch-3",
                     "epoch-4", "trained_eval", "trained_sampled", "seed_validation", "report"]
    assert names == [r.name for r in stage_table.stage_runs(config)]
    assert len(set(names)) == len(names)


def _changed_table(calls: list[str]):
    """The real table without seed_validation, with an `extra` stage after the policy, every task a recorder."""

    def stand_in(row):
        def task(ctx, *args):
            name = row.name if row.repeat is None else f"{row.name}-{args[-1]}"
            calls.append(name)
            return run_stage(ctx, name, lambda run_id: {"args": list(args)})

        return task

    rows = []
    for row in stage_table.STAGES:
        if row.name == "seed_validation":
            continue
        rows.append(dataclasses.replace(row, task=stand_in(row)))
        if row.name == "policy":
            extra = stage_table.Stage("extra", print, args=("x",))
            rows.append(dataclasses.replace(extra, task=stand_in(extra)))
    return tuple(rows)


def test_the_plan_and_the_flow_follow_a_changed_table(tmp_path, monkeypatch):
    config = to_experiment_config(compose_config(f"tracking.runs_root={tmp_path / 'runs'}",
                                                 "tracking.prefect_artifacts=false"))
    before = stages(config)
    assert "seed_validation" in before and "extra" not in before
    calls: list[str] = []
    monkeypatch.setattr(stage_table, "STAGES", _changed_table(calls))
    expected = [s for s in before if s != "seed_validation"]
    expected.insert(expected.index("policy") + 1, "extra")
    assert stages(config) == experiment_plan(config)["stages"] == expected
    assert f"stages          {' -> '.join(expected)}" in render_plan(config)

    monkeypatch.setattr(experiment_flow, "open_endpoint", lambda *a, **k: nullcontext(None))
    experiment_flow.experiment_flow.fn(to_container(config), [])
    assert calls == expected  # the flow ran the changed table, in its order
    state = RunDir.for_config(config).state()
    assert state["status"] == "completed"
    assert sorted(s for s, v in state["stages"].items() if v["status"] == "completed") == sorted(expected)
    assert state["stages"]["extra"]["summary"] == {"args": ["x"]}

    # run again: the run is complete by the changed table, so every stage is skipped and none is called
    calls.clear()
    experiment_flow.experiment_flow.fn(to_container(config), [])
    assert calls == expected and RunDir.for_config(config).state()["attempts"] == 2
    assert all(v.get("run_attempt") == 1 for v in RunDir.for_config(config).state()["stages"].values())
