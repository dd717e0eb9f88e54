"""What Prefect and MLflow show when a complete run is run again: skipped stages, attempt, tags, link.

The run directory is made complete by hand (every stage marked done in attempt 1, the MLflow parent
FINISHED), so `python -m flows.experiment` loads no model and starts no environment server; it runs
against the session's private Prefect server (conftest.prefect_api). The test reads the Prefect API and
the MLflow store as a user would. A partial resume after a real failure is covered by test_experiment.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest
from mlflow.tracking import MlflowClient

from flows.config import to_experiment_config
from flows.experiment_flow import flow_run_name, flow_run_tags
from flows.plan import stages
from flows.run_dir import RunDir, config_hash
from flows.stages import SKIPPED
from flows.tracking import Tracker
from tests.flows.conftest import compose_config

pytestmark = pytest.mark.timeout(300)


def _post(api, path, body):
    req = urllib.request.Request(f"{api}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_names_and_tags(tmp_path):
    config = to_experiment_config(compose_config(f"tracking.runs_root={tmp_path}"))
    run = RunDir.for_config(config)
    assert flow_run_name(config) == f"{run.path.name}-attempt-1"
    run.update(attempts=2)
    assert flow_run_name(config) == f"{run.path.name}-attempt-3"
    assert set(flow_run_tags(config)) >= {f"config:{config_hash(config)[:12]}", f"seed:{config.trainer.seed}",
                                          f"experiment:{config.name}"}


def test_a_rerun_of_a_complete_run_shows_skipped_stages_and_keeps_the_mlflow_run(tmp_path, prefect_api):
    api, env = prefect_api
    override = f"tracking.runs_root={tmp_path / 'runs'}"
    config = to_experiment_config(compose_config(override))
    run = RunDir.for_config(config)
    for stage in stages(config):
        run.start_stage(stage)
        run.finish_stage(stage, summary={"report": "r.md"} if stage == "report" else {}, run_attempt=1)
    run.update(attempts=1, status="completed")
    tracker = Tracker(config, run)
    tracker.finish()
    client = MlflowClient(tracker.uri)
    ended = client.get_run(tracker.parent_id).info.end_time

    # The Prefect server is the session's: test_experiment.py's smoke run has the same name (the name
    # holds the config hash, which leaves out where runs live), so only the flow run made here counts.
    before = {r["id"] for r in _post(api, "/flow_runs/filter", {})}
    out = subprocess.run([sys.executable, "-m", "flows.experiment", override], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "already complete; nothing to do" in out.stdout

    parent = client.get_run(tracker.parent_id)
    assert parent.info.status == "FINISHED" and parent.info.end_time == ended  # not re-ended
    [flow_run] = [r for r in _post(api, "/flow_runs/filter", {}) if r["id"] not in before]
    assert flow_run["name"] == f"{run.path.name}-attempt-2"
    assert flow_run["state_type"] == "COMPLETED"
    assert set(flow_run_tags(config)) <= set(flow_run["tags"])
    task_runs = _post(api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run["id"]]}}})
    assert sorted(t["name"] for t in task_runs) == sorted(stages(config))
    for t in task_runs:
        assert t["state"]["type"] == "COMPLETED" and t["state"]["name"] == SKIPPED, t["state"]
        assert t["state"]["message"] == "skipped: done in attempt 1"
    # a link artifact is stored as markdown (Prefect's LinkArtifact), keyed by the run's name
    links = [a for a in _post(api, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [flow_run["id"]]}}})
             if a["key"] == f"kernelflow-mlflow-{run.path.name}"]
    assert len(links) == 1
    assert tracker.parent_id in links[0]["data"] and "workflowType=machine_learning" in links[0]["data"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # nothing written outside the runs root
