"""The run directory's state: stage bookkeeping for resume, one process per run, lookups with clear errors."""

from __future__ import annotations

import pytest
import yaml

from flows.config import to_experiment_config
from flows.run_dir import COMPLETED, FAILED, RunDir, RunLockedError
from tests.flows.conftest import compose_config


@pytest.fixture
def run(tmp_path):
    return RunDir.for_config(to_experiment_config(compose_config(f"tracking.runs_root={tmp_path}", "trainer.epochs=3")))


def test_the_same_config_finds_the_same_directory(run, tmp_path):
    again = RunDir.for_config(to_experiment_config(compose_config(f"tracking.runs_root={tmp_path}", "trainer.epochs=3")))
    assert again.path == run.path and run.path.parent == tmp_path and run.path.name.startswith("smoke-")


def test_stage_bookkeeping(run):
    run.start_stage("epoch-1")
    run.finish_stage("epoch-1", summary={"updates": 4})
    run.start_stage("epoch-2")
    run.fail_stage("epoch-2", "RuntimeError: boom")
    state = run.state()
    assert state["status"] == FAILED and state["failure"]["stage"] == "epoch-2"
    assert run.completed("epoch-1") and run.stage_status("epoch-2") == FAILED
    assert run.last_completed_epoch(3) == 1
    run.start_stage("epoch-2")
    run.finish_stage("epoch-2")
    assert run.last_completed_epoch(3) == 2 and run.state()["stages"]["epoch-2"]["attempts"] == 2
    assert run.stage_status("epoch-2") == COMPLETED


def test_a_side_stage_failure_does_not_fail_the_run(run):
    run.start_stage("rejudge-1")
    run.fail_stage("rejudge-1", "boom", run_failed=False)
    assert run.state()["failure"] is None


def test_one_process_per_run(run):
    with run.locked():
        with pytest.raises(RunLockedError, match="in use by another process"):
            with RunDir(run.path).locked():
                pass


def test_find_by_path_or_name_and_a_clear_error(run, tmp_path):
    assert RunDir.find(str(run.path)).path == run.path
    assert RunDir.find(run.path.name, tmp_path).path == run.path
    with pytest.raises(FileNotFoundError, match=run.path.name):
        RunDir.find("nope", tmp_path)


def test_rejudge_reads_the_runs_config_with_checked_overrides(run):
    from flows.config import to_container
    from flows.rejudge import load_config
    from flows.schema import ConfigError

    config = to_experiment_config(compose_config(f"tracking.runs_root={run.path.parent}", "trainer.epochs=3"))
    (run.path / "config.yaml").write_text(yaml.safe_dump(to_container(config)))
    assert load_config(run, []) == config
    assert load_config(run, ["eval.timed_runs=50", "env.url=http://gpu2:8000"]).eval.timed_runs == 50
    with pytest.raises(ConfigError, match="timed_runz"):
        load_config(run, ["eval.timed_runz=50"])
    with pytest.raises(ConfigError, match="key=value"):
        load_config(run, ["eval"])
