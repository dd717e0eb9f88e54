"""MLflow tracking of one run: a parent run per experiment run, a nested run per stage, resumable.

The tracking URI is always set explicitly (MLflow 3 would otherwise write `./mlflow.db` wherever the
process starts): `tracking.uri`, or the embedded store `sqlite:///<runs_root>/mlflow.db` with
artifacts in `<runs_root>/mlartifacts`, one database for every run of the project directory.

Run ids are kept in the run directory's state, so a resumed run logs into the same parent run and
into the same nested run of a stage that failed before: re-running after a kill never duplicates
runs. A stage run is FINISHED when its stage completes and FAILED (tags `kernelflow.error`) when it
raises; the parent is FAILED with `kernelflow.failed_stage` and `kernelflow.failure` until a later
attempt completes, which deletes both tags (a good run carries no empty failure tags). A parent that
is already FINISHED is never reopened or re-ended, so its duration stays that of the run that
finished it. Everything goes through an explicit `MlflowClient` (no fluent global state).

The experiment is created with `mlflow.experimentKind=custom_model_development` (the tag MLflow 3's
UI reads for an experiment's kind: a model-training experiment, not a GenAI one). MLflow 3.17's UI
also keeps a per-browser GenAI / model-training switch (localStorage, GenAI by default) that it does
not reconcile with the tag, so `run_url` carries `?workflowType=machine_learning` as well.

This module logs what it is given; what is logged per stage is decided in `stages.py`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flows.config import ExperimentConfig
from flows.run_dir import RunDir, runs_root
from flows.stage_names import RUN_TAG, STAGE_TAG

log = logging.getLogger("kernelflow.flows")

MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
MAX_TAG_CHARS = 5000
NOTE_TAG = "mlflow.note.content"  # the run's description in the MLflow UI (markdown)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"  # MLflow 3's name for a model-training experiment
FAILURE_TAGS = ("kernelflow.failed_stage", "kernelflow.failure")
UI_QUERY = "?workflowType=machine_learning"  # MLflow 3.17's UI: open in the model-training view


def tracking_uri(config: ExperimentConfig) -> str:
    if config.tracking.uri:
        return config.tracking.uri
    return f"sqlite:///{runs_root(config) / 'mlflow.db'}"


class Tracker:
    """The MLflow side of one run directory (see the module docstring)."""

    def __init__(self, config: ExperimentConfig, run: RunDir, reopen: bool = True):
        """`reopen`: mark the parent RUNNING again (a resumed run); False leaves its status (rejudging)."""
        from mlflow.tracking import MlflowClient

        self.config = config
        self.run = run
        self.uri = tracking_uri(config)
        self.client = MlflowClient(tracking_uri=self.uri)
        self.experiment_id = self._experiment()
        self.parent_id = self._parent(reopen)

    # -- runs --------------------------------------------------------------------------------------

    def _experiment(self) -> str:
        name = self.config.tracking.experiment
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            if EXPERIMENT_KIND_TAG not in exp.tags:  # created before the tag was set: mark it once
                self.client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            return exp.experiment_id
        location = None
        if not self.config.tracking.uri:  # embedded store: artifacts beside the database
            location = (runs_root(self.config) / "mlartifacts").as_uri()
        return self.client.create_experiment(name, artifact_location=location,
                                             tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})

    def _existing(self, run_id: str | None) -> str | None:
        if not run_id:
            return None
        try:
            return self.client.get_run(run_id).info.run_id
        except Exception:  # deleted, or another store: start a new one
            return None

    def _parent(self, reopen: bool) -> str:
        """The parent run: reused when it exists; RUNNING again if `reopen` and it did not finish."""
        ids = self.run.mlflow_ids()
        same_store = ids.get("tracking_uri") == self.uri
        parent = self._existing(ids.get("parent_run_id")) if same_store else None
        if parent is None:
            parent = self.client.create_run(
                self.experiment_id, run_name=self.run.path.name, tags={RUN_TAG: self.run.path.name},
            ).info.run_id
            self.run.set_mlflow_ids(tracking_uri=self.uri, experiment_id=self.experiment_id, parent_run_id=parent,
                                    stage_runs={})
        elif reopen and not self.parent_finished(parent):
            self.client.update_run(parent, status="RUNNING")
        return parent

    def parent_finished(self, parent: str | None = None) -> bool:
        """Whether the parent run already ended FINISHED (then it is left as it is, end time included)."""
        return self.client.get_run(parent or self.parent_id).info.status == "FINISHED"

    def stage_run(self, stage: str) -> str:
        """The nested run of `stage` (the same one on every attempt)."""
        runs = dict(self.run.mlflow_ids().get("stage_runs", {}))
        run_id = self._existing(runs.get(stage))
        if run_id is None:
            run_id = self.client.create_run(
                self.experiment_id, run_name=stage,
                tags={"mlflow.parentRunId": self.parent_id, RUN_TAG: self.run.path.name, STAGE_TAG: stage},
            ).info.run_id
            runs[stage] = run_id
            self.run.set_mlflow_ids(stage_runs=runs)
        else:
            self.client.update_run(run_id, status="RUNNING")
        return run_id

    @contextmanager
    def stage(self, stage: str) -> Iterator[str]:
        """Run a stage inside its nested run: FINISHED on success, FAILED with the cause on an exception."""
        run_id = self.stage_run(stage)
        try:
            yield run_id
        except BaseException as exc:
            self.set_tags(run_id, {"kernelflow.error": describe(exc)})
            self.client.set_terminated(run_id, status="FAILED")
            raise
        self.client.set_terminated(run_id, status="FINISHED")

    def fail(self, stage: str, exc: BaseException) -> None:
        """Mark the parent FAILED with the cause; a parent that already FINISHED is left as it is."""
        if self.parent_finished():
            log.warning("MLflow run %s already finished; %s at %s is not recorded on it", self.parent_id,
                        describe(exc), stage)
            return
        self.set_tags(self.parent_id, {"kernelflow.failed_stage": stage, "kernelflow.failure": describe(exc),
                                       "kernelflow.status": "failed"})
        self.client.set_terminated(self.parent_id, status="FAILED")

    def finish(self) -> None:
        """End the parent FINISHED, dropping an earlier attempt's failure tags; a finished parent is left alone."""
        if self.parent_finished():
            return
        tags = self.client.get_run(self.parent_id).data.tags
        for key in FAILURE_TAGS:
            if key in tags:
                self.client.delete_tag(self.parent_id, key)
        self.set_tags(self.parent_id, {"kernelflow.status": "completed"})
        self.client.set_terminated(self.parent_id, status="FINISHED")

    # -- logging -----------------------------------------------------------------------------------

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:MAX_PARAM_CHARS]) for k, v in sorted(params.items())]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(run_id, params=items[i : i + 100])

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        """Set tags; one whose value is None or empty is not set (an empty tag says nothing)."""
        from mlflow.entities import RunTag

        items = [RunTag(k, str(v)[:MAX_TAG_CHARS]) for k, v in sorted(tags.items()) if v is not None and str(v) != ""]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, tags=items[i : i + 100])

    def log_metrics(self, run_id: str, metrics: Mapping[str, float | None], step: int = 0) -> None:
        """Log the defined numbers; a value that is None, NaN or infinite is skipped, not logged.

        So a metric that has no value (an untimed kernel's runtime, the KL of a skipped update) is
        absent at that step rather than a NaN point that charts and summaries trip over; readers
        (flows/analysis/seed_runs.py) already treat a missing metric as "no value".
        """
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step) for k, v in sorted(metrics.items())
                 if v is not None and math.isfinite(float(v))]
        for i in range(0, len(items), 1000):
            self.client.log_batch(run_id, metrics=items[i : i + 1000])

    def log_stage_metrics(self, run_id: str, stage: str, metrics: Mapping[str, float | None],
                          task_ids: Iterable[str]) -> None:
        """A stage's single values: all of them on its own run; on the parent, prefixed `<stage>/`, only
        those that are not per task (group counts, fast_p, ...).

        Why: MLflow 3.17's model-metrics tab makes one chart section per metric-name prefix (the name
        up to its last '/') and sorts the sections by name, so per-task keys on the parent
        (`baseline_eval/19_ReLU/reward`, ...) made ~20 sections of one-point bars above `train/`, the
        only curves. Per-task values stay on the stage's run (`19_ReLU/reward`), where compare.py
        reads them back (`load_runs`), and in the report's table.
        """
        tasks = set(task_ids)
        self.log_metrics(run_id, metrics)
        self.log_metrics(self.parent_id, {f"{stage}/{k}": v for k, v in metrics.items() if k.split("/", 1)[0] not in tasks})

    def log_artifacts(self, run_id: str, local: Path, artifact_path: str | None = None) -> None:
        if not self.config.tracking.log_artifacts or not local.exists():
            return
        if local.is_dir():
            self.client.log_artifacts(run_id, str(local), artifact_path)
        else:
            self.client.log_artifact(run_id, str(local), artifact_path)

    def run_url(self) -> str:
        """Where to look at the parent run."""
        if self.uri.startswith("http"):
            return self.ui_url(self.uri)
        return (f"run {self.parent_id} in {self.uri} (browse: mlflow ui --backend-store-uri {self.uri}, "
                f"then {self.ui_url('http://127.0.0.1:5000')})")

    def ui_url(self, server: str) -> str:
        """The parent run's page on the MLflow UI at `server`, in the model-training view."""
        return f"{server.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.parent_id}{UI_QUERY}"


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:MAX_TAG_CHARS]
