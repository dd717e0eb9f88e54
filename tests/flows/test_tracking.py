"""What the MLflow store holds for a run, read back from a real SQLite store under tmp_path.

Covers `Tracker` (experiment kind, metrics without NaN, per-task values on the stage run and not on
the parent, no empty tags, failure tags dropped on a good finish, a finished parent never re-ended)
and the run content that stages.py adds (dense status metrics, the run description, MLflow's git
source tags). The whole flow is covered by test_experiment.py.
"""

from __future__ import annotations

import math

import pytest
from mlflow.tracking import MlflowClient

from flows import provenance
from flows.analysis.results import outcomes, summary_metrics, task_metrics
from flows.config import to_experiment_config
from flows.run_dir import RunDir
from flows.stages import dense_statuses, headline
from flows.tracking import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, NOTE_TAG, Tracker
from kernelflow.train.evaluation import TaskEvalResult
from tests.flows.conftest import compose_config


@pytest.fixture
def config(tmp_path):
    return to_experiment_config(compose_config(f"tracking.runs_root={tmp_path}"))


@pytest.fixture
def tracker(config):
    return Tracker(config, RunDir.for_config(config))


def _run(tracker):
    return MlflowClient(tracker.uri).get_run(tracker.parent_id)


def test_the_experiment_is_a_model_training_experiment(tracker):
    exp = MlflowClient(tracker.uri).get_experiment(tracker.experiment_id)
    assert exp.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND == "custom_model_development"
    assert "workflowType=machine_learning" in tracker.ui_url("http://h:5000")
    assert tracker.ui_url("http://h:5000/").startswith(f"http://h:5000/#/experiments/{tracker.experiment_id}/runs/")


def test_an_experiment_made_before_gets_the_kind_tag(config):
    client = MlflowClient(f"sqlite:///{config.tracking.runs_root}/mlflow.db")
    exp_id = client.create_experiment(config.tracking.experiment)
    Tracker(config, RunDir.for_config(config))
    assert client.get_experiment(exp_id).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND


def test_undefined_numbers_are_not_logged(tracker):
    tracker.log_metrics(tracker.parent_id, {"a": 1.0, "none": None, "nan": math.nan, "inf": math.inf, "zero": 0.0})
    assert _run(tracker).data.metrics == {"a": 1.0, "zero": 0.0}


def _section(key: str) -> str:
    """The model-metrics section MLflow 3.17.2's UI puts a metric in: its name up to the last '/'
    (`extractChartSectionName` in the bundled UI); sections are sorted by that name."""
    return key.rsplit("/", 1)[0] if "/" in key else ""


def test_per_task_values_stay_off_the_parent_so_training_curves_are_not_buried(config, tracker):
    ok = {"turn": 1, "status": "ok", "correct": True, "reward": 1.0, "runtime_ms": 0.1, "roofline_fraction": None,
          "completion_tokens": 10, "truncated": False, "answer": "x", "feedback": "", "verdict": {"runtime_ms": 0.1}}
    outs = outcomes([TaskEvalResult.from_dict({"task_id": t, "seed": 0, "turns": [ok]}) for t in config.tasks.all])
    metrics = {k: v for o in outs.values() for k, v in task_metrics(o).items()}
    metrics.update(summary_metrics(outs, config.tasks.groups))
    stage_run = tracker.stage_run("baseline_eval")
    tracker.log_stage_metrics(stage_run, "baseline_eval", metrics, config.tasks.all)
    tracker.log_metrics(tracker.parent_id, {"train/reward_mean": 0.5}, step=1)
    parent = _run(tracker).data.metrics
    stage = MlflowClient(tracker.uri).get_run(stage_run).data.metrics
    assert stage == {k: v for k, v in metrics.items() if v is not None}  # the stage run keeps every value
    assert "baseline_eval/group/overall/first_correct" in parent and "baseline_eval/fast_1" in parent
    assert not any(k.split("/")[1] in config.tasks.all for k in parent if k.count("/") >= 2), sorted(parent)
    # one section per stage summary and group, not one per task: 10 tasks made 10 more sections before
    sections = sorted({_section(k) for k in parent})
    assert len(sections) == 6 and "train" in sections, sections


def test_empty_tags_are_not_set(tracker):
    tracker.set_tags(tracker.parent_id, {"kept": "x", "empty": "", "none": None})
    tags = _run(tracker).data.tags
    assert tags["kept"] == "x" and "empty" not in tags and "none" not in tags


def test_a_good_finish_drops_an_earlier_failure_and_leaves_no_empty_tags(config, tracker):
    tracker.fail("trained_eval", RuntimeError("boom"))
    assert _run(tracker).data.tags["kernelflow.failed_stage"] == "trained_eval"
    again = Tracker(config, RunDir.for_config(config))  # the resumed attempt
    assert again.parent_id == tracker.parent_id and _run(again).info.status == "RUNNING"
    again.finish()
    run = _run(again)
    assert run.info.status == "FINISHED" and run.data.tags["kernelflow.status"] == "completed"
    assert "kernelflow.failed_stage" not in run.data.tags and "kernelflow.failure" not in run.data.tags
    assert all(v != "" for v in run.data.tags.values())


def test_a_finished_parent_is_never_reopened_or_re_ended(config, tracker):
    tracker.finish()
    ended = _run(tracker).info.end_time
    again = Tracker(config, RunDir.for_config(config))  # a rerun of a complete run
    assert _run(again).info.status == "FINISHED"
    again.finish()
    assert _run(again).info.end_time == ended


def test_status_metrics_are_dense():
    dense = dense_statuses({"status_ok": 2.0, "loss": 0.5})
    assert dense["status_ok"] == 2.0 and dense["status_no_code"] == 0.0 and dense["status_compile_error"] == 0.0
    assert dense["loss"] == 0.5 and len([k for k in dense if k.startswith("status_")]) == 11


def test_the_description_and_git_source_tags(config, tracker):
    tags = {"config.hash": "c0ffee", "git.sha": "a" * 40, "git.dirty": "false", "git.branch": "main",
            "model.id": "sft"}
    source = provenance.mlflow_source_tags(tags)
    assert source["mlflow.source.git.commit"] == "a" * 40 and source["mlflow.source.git.branch"] == "main"
    assert "mlflow.source.git.commit" not in provenance.mlflow_source_tags({"git.sha": "unknown"})
    assert "mlflow.source.git.branch" not in provenance.mlflow_source_tags({"git.sha": "b", "git.branch": "HEAD"})
    note = provenance.run_note(config, "smoke-x", tags, "overall 1/10 -> 3/10")
    assert "`smoke`" in note and "c0ffee" in note and "a" * 40 in note and note.endswith("overall 1/10 -> 3/10")
    tracker.set_tags(tracker.parent_id, {NOTE_TAG: note, **source})
    assert _run(tracker).data.tags[NOTE_TAG] == note


def test_the_headline_counts_correct_tasks_before_and_after(config):
    run = RunDir.for_config(config)
    for stage, correct in (("baseline_eval", 1), ("trained_eval", 3)):
        run.start_stage(stage)
        run.finish_stage(stage, summary={"groups": {"overall": {"tasks": 10, "first": 0, "correct": correct}}})
    assert headline(run) == "tasks correct by the 2nd attempt, before -> after training: overall 1/10 -> 3/10"
