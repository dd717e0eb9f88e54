"""The smoke experiment end to end through the real entry points, with a failure, a resume and a rejudge.

One module fixture runs `python -m flows.experiment` (the default smoke preset, its runs and MLflow
store under tmp, against a private Prefect server with its own PREFECT_HOME) twice: first with
KERNELFLOW_FAIL_STAGE=trained_eval so the run fails after training, then plainly, which must resume
(skip the completed stages, restore the trainer from the epoch checkpoint) and finish. The tests then
read what a user would: the state file, the MLflow store, the Prefect API, the report, the last line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from flows.analysis.results import OUTCOME_KEYS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

TASKS = ("19_ReLU", "20_LeakyReLU", "21_Sigmoid", "22_Tanh", "25_Swish", "28_HardSigmoid", "32_HardTanh",
         "23_Softmax", "24_LogSoftmax", "88_MinGPTNewGelu")
UNTIMED = {"runtime_ms", "roofline_fraction", "speedup_vs_eager"}  # CPU interpreter: no timing
STAGES = {"provenance", "policy", "baseline_eval", "epoch-1", "trained_eval", "seed_validation", "report"}


def _run(args, cwd, env, timeout=900):
    start = time.monotonic()
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return SimpleNamespace(rc=out.returncode, out=out.stdout, err=out.stderr, seconds=time.monotonic() - start)


def _client(runs):
    return MlflowClient(f"sqlite:///{runs / 'mlflow.db'}")


def _runs(client, name):
    exp = client.get_experiment_by_name("kernelflow")
    return client.search_runs([exp.experiment_id], filter_string=f"tags.`kernelflow.run` = '{name}'")


@pytest.fixture(scope="module")
def smoke(prefect_api, tmp_path_factory, model_cache):
    _, env = prefect_api
    root = tmp_path_factory.mktemp("smoke")
    runs = root / "runs"
    args = [sys.executable, "-m", "flows.experiment", f"tracking.runs_root={runs}", f"model.cache_dir={model_cache}"]
    failed = _run(args, root, {**env, "KERNELFLOW_FAIL_STAGE": "trained_eval"})
    assert failed.rc == 1, failed.out[-3000:] + failed.err[-3000:]
    [run_dir] = [p for p in runs.iterdir() if p.is_dir() and p.name.startswith("smoke-")]
    client = _client(runs)
    after_failure = {
        "state": json.loads((run_dir / "state.json").read_text()),
        "runs": {r.info.run_name: (r.info.status, dict(r.data.tags)) for r in _runs(client, run_dir.name)},
    }
    done = _run(args, root, env)
    assert done.rc == 0, done.out[-3000:] + done.err[-3000:]
    return SimpleNamespace(root=root, runs=runs, run_dir=run_dir, failed=failed, done=done,
                           after_failure=after_failure, env=env, client=client)


def test_a_failing_stage_marks_the_run_failed_with_its_cause(smoke):
    assert "the run failed at stage trained_eval: InjectedFailure" in smoke.failed.err
    assert "run the same command again to resume" in smoke.failed.err
    state = smoke.after_failure["state"]
    assert state["status"] == "failed" and state["failure"]["stage"] == "trained_eval"
    assert "InjectedFailure" in state["failure"]["error"]
    parent_status, tags = smoke.after_failure["runs"][smoke.run_dir.name]
    assert parent_status == "FAILED" and tags["kernelflow.failed_stage"] == "trained_eval"
    assert "InjectedFailure" in tags["kernelflow.failure"]
    assert smoke.after_failure["runs"]["trained_eval"][0] == "FAILED"


def test_the_rerun_resumes_without_redoing_work(smoke):
    out = smoke.done.out
    for stage in ("provenance", "policy", "baseline_eval", "epoch-1"):
        assert f"stage {stage}: already completed" in out
    assert "resumed the trainer from epoch 1" in out
    state = json.loads((smoke.run_dir / "state.json").read_text())
    assert state["status"] == "completed" and state["failure"] is None and state["attempts"] == 2
    attempts = {s: v["attempts"] for s, v in state["stages"].items()}
    assert attempts == {"provenance": 1, "policy": 1, "baseline_eval": 1, "epoch-1": 1, "trained_eval": 2,
                        "seed_validation": 1, "report": 1}
    assert (smoke.run_dir / "checkpoints" / "epoch-1" / "adapter" / "adapter_model.safetensors").is_file()


def test_mlflow_holds_one_run_with_a_nested_run_per_stage(smoke):
    runs = _runs(smoke.client, smoke.run_dir.name)
    names = sorted(r.info.run_name for r in runs)
    assert names == sorted(STAGES | {smoke.run_dir.name})  # resuming duplicated nothing
    parent = next(r for r in runs if r.info.run_name == smoke.run_dir.name)
    assert all(r.info.status == "FINISHED" for r in runs)
    assert all(r.data.tags.get("mlflow.parentRunId") == parent.info.run_id for r in runs if r is not parent)
    # the resumed attempt's success dropped the first attempt's failure tags; no tag is empty
    assert "kernelflow.failed_stage" not in parent.data.tags and "kernelflow.failure" not in parent.data.tags
    assert all(v != "" for r in runs for v in r.data.tags.values())
    assert parent.data.tags["mlflow.source.git.commit"] == parent.data.tags["git.sha"]
    assert "Result:** tasks correct by the 2nd attempt" in parent.data.tags["mlflow.note.content"]
    exp = smoke.client.get_experiment(parent.info.experiment_id)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"


def test_per_task_metrics_for_all_ten_tasks_in_both_evaluations(smoke):
    runs = {r.info.run_name: r for r in _runs(smoke.client, smoke.run_dir.name)}
    parent = runs[smoke.run_dir.name].data.metrics
    for stage in ("baseline_eval", "trained_eval"):
        nested = runs[stage].data.metrics
        for task in TASKS:
            for key in OUTCOME_KEYS:
                # per-task values are on the stage's run only, so the parent's charts open on the curves
                assert f"{stage}/{task}/{key}" not in parent, (stage, task, key)
                if key in UNTIMED:  # the interpreter times nothing: no value, so no metric (never NaN)
                    assert f"{task}/{key}" not in nested, (stage, task, key)
                    continue
                assert f"{task}/{key}" in nested, (stage, task, key)
        # the smoke policy (the reduced SFT policy) writes real kernels: some tasks are solved
        assert parent[f"{stage}/group/overall/first_correct"] > 0.0
    history = smoke.client.get_metric_history(runs[smoke.run_dir.name].info.run_id, "train/reward_mean")
    assert sorted(m.step for m in history) == [1, 2, 3, 4]  # one per update, logged once
    statuses = smoke.client.get_metric_history(runs[smoke.run_dir.name].info.run_id, "train/status_timeout")
    assert sorted(m.step for m in statuses) == [1, 2, 3, 4]  # dense: zeros are logged too
    assert not any(v != v for r in runs.values() for v in r.data.metrics.values())  # no NaN metric


def test_provenance_tags_and_params(smoke):
    [parent] = [r for r in _runs(smoke.client, smoke.run_dir.name) if r.info.run_name == smoke.run_dir.name]
    tags = parent.data.tags
    for key in ("git.sha", "git.dirty", "config.hash", "tasks.suite_hash", "tasks.kernelbench_revision",
                "version.torch", "version.transformers", "version.prefect", "version.mlflow", "python", "gpu.name",
                "gpu.driver", "gpu.cuda", "model.id", "model.revision", "seed.trainer", "seed.env", "seed.eval_inputs",
                "evaluator.version", "env.backend", "env.device", "env.config_hash"):
        assert tags.get(key), key
    assert tags["tasks.kernelbench_revision"] == "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"
    assert tags["policy.built_here"] == "true" and tags["policy.is_tiny_random"] == "false"
    assert tags["model.source"] == "sft" and tags["config.hash"].startswith(smoke.run_dir.name[-12:])
    assert parent.data.metrics["seed_validation/validated"] >= 1  # a solved task was re-judged on extra seeds
    assert any(k.startswith("adapter.sha256.") and len(v) == 64 for k, v in tags.items())
    params = parent.data.params
    assert params["trainer.estimator"] == "dr_grpo" and params["eval.reward.speed_weight"] == "2.7"
    assert "tracking.runs_root" not in params and tags["config.tracking.runs_root"] == str(smoke.runs)


def test_artifacts_hold_kernels_transcripts_adapter_and_report(smoke):
    runs = {r.info.run_name: r.info.run_id for r in _runs(smoke.client, smoke.run_dir.name)}

    def files(run_id, path):
        return {a.path for a in smoke.client.list_artifacts(run_id, path)}

    parent = runs[smoke.run_dir.name]
    assert {"report/report.md", "report/report.html", "report/reward_per_update.png",
            "report/per_task_before_after.png"} <= files(parent, "report")
    assert "adapter/adapter_model.safetensors" in files(parent, "adapter")
    for stage in ("baseline_eval", "epoch-1", "trained_eval"):
        got = files(runs[stage], stage)
        assert {f"{stage}/submissions.jsonl", f"{stage}/transcripts.jsonl", f"{stage}/kernels"} <= got, got
    subs = [json.loads(line) for line in (smoke.run_dir / "trained_eval" / "submissions.jsonl").read_text().splitlines()]
    assert {s["task_id"] for s in subs} == set(TASKS) and all("status" in s["verdict"] for s in subs)
    episode = json.loads((smoke.run_dir / "baseline_eval" / "transcripts.jsonl").read_text().splitlines()[0])
    assert episode["messages"][0]["role"] == "system" and episode["turns"][0]["answer"] is not None


def test_the_report_and_the_final_line(smoke):
    report = smoke.run_dir / "report" / "report.md"
    text = report.read_text()
    assert "pre-trained here on a synthetic corpus" in text
    row = next(line for line in text.splitlines() if line.startswith("| **overall** | **its first attempt"))
    assert int(row.split("|")[4]) > 0, row  # non-zero rows: the baseline solves something
    assert "fast_p" in text
    last = smoke.done.out.strip().splitlines()[-1]
    assert last.startswith(f"kernelflow: run complete: {smoke.run_dir} ; report: {report} ; MLflow: run ")
    assert "pre-trained here on a synthetic corpus" in smoke.done.out


def test_prefect_shows_both_attempts_and_the_report_artifact(smoke, prefect_api):
    api, _ = prefect_api

    def post(path, body):
        req = urllib.request.Request(f"{api}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    flow_runs = {r["name"]: r for r in post("/flow_runs/filter", {}) if r["name"].startswith(smoke.run_dir.name)}
    first, second = flow_runs[f"{smoke.run_dir.name}-attempt-1"], flow_runs[f"{smoke.run_dir.name}-attempt-2"]
    assert (first["state_type"], second["state_type"]) == ("FAILED", "COMPLETED")
    resumed = post("/task_runs/filter", {"flow_runs": {"id": {"any_": [second["id"]]}}})
    skipped = {t["name"] for t in resumed if t["state"]["name"] == "Skipped"}
    assert skipped == {"provenance", "policy", "baseline_eval", "epoch-1"}  # done in attempt 1, shown as skipped
    artifacts = {a["key"]: a for a in post("/artifacts/filter", {})}
    assert f"kernelflow-report-{smoke.run_dir.name}" in artifacts and f"kernelflow-tasks-{smoke.run_dir.name}" in artifacts
    assert artifacts[f"kernelflow-report-{smoke.run_dir.name}"]["data"].count("](data:image/png;base64,") == 2
    task_runs = {r["name"] for r in post("/task_runs/filter", {})}
    assert STAGES <= task_runs  # each stage is a task run named after it


def test_nothing_is_written_outside_the_run_root(smoke):
    # the policy is built in the session's model cache; the run writes only its runs root (no ./mlflow.db,
    # outputs/, mlruns/ in the working directory)
    assert sorted(p.name for p in smoke.root.iterdir()) == ["runs"]


def test_rejudge_adds_a_stage_to_the_run(smoke):
    out = _run([sys.executable, "-m", "flows.rejudge", str(smoke.run_dir)], smoke.root, smoke.env)
    assert out.rc == 0, out.out[-3000:] + out.err[-3000:]
    assert f"rejudge: rejudge-1 of {smoke.run_dir} done" in out.out
    summary = json.loads((smoke.run_dir / "rejudge-1" / "summary.json").read_text())
    stored = sum(len((smoke.run_dir / s / "submissions.jsonl").read_text().splitlines())
                 for s in ("baseline_eval", "epoch-1", "trained_eval", "seed_validation"))
    assert summary["submissions"] == stored == summary["agree"]  # the same evaluator agrees with itself
    assert set(summary["tasks"]) == {"baseline_eval", "trained_eval"}
    runs = {r.info.run_name: r for r in _runs(smoke.client, smoke.run_dir.name)}
    assert runs["rejudge-1"].info.status == "FINISHED"
    assert runs["rejudge-1"].data.tags["mlflow.parentRunId"] == runs[smoke.run_dir.name].info.run_id
    assert runs[smoke.run_dir.name].info.status == "FINISHED"  # the run itself is unchanged
    assert "trained_eval/19_ReLU/turn1_correct" in runs["rejudge-1"].data.metrics
    state = json.loads((smoke.run_dir / "state.json").read_text())
    assert state["stages"]["rejudge-1"]["status"] == "completed" and state["status"] == "completed"


def test_rejudge_of_an_unknown_run_says_what_exists(smoke):
    out = _run([sys.executable, "-m", "flows.rejudge", "nope", "--runs-root", str(smoke.runs)],
               smoke.root, smoke.env, timeout=120)
    assert out.rc == 2 and smoke.run_dir.name in out.err


