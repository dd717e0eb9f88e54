"""An experiment run's Prefect artifacts: the report (markdown with its plots, per-task table) and the MLflow link.

The Prefect UI shows a flow run's artifacts beside its task runs, so a reader of the flow run finds
there what MLflow holds: `publish_report` sends the rendered report as a markdown artifact with its
plots inlined as data URIs (a Prefect artifact is a string in Prefect's database, with no directory
beside it: `flows/analysis/render.py` does the inlining) and the per-task rows as a table artifact;
`publish_mlflow_link` adds a link artifact to the run's MLflow parent run. `artifact_key` makes the
keys (Prefect accepts lowercase letters, digits and dashes); re-judging names its artifacts with it too.

Rendering is flows/analysis's: this module only publishes what it is given, inside a flow run, and it
is where the report meets Prefect, so the analysis package never imports Prefect. Whether to publish
is `tracking.prefect_artifacts`, checked by the callers (the report stage) or here (the link).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from flows.analysis.render import artifact_markdown, fmt

if TYPE_CHECKING:
    from flows.analysis.report import RenderedReport
    from flows.config import ExperimentConfig
    from flows.tracking import Tracker


def artifact_key(name: str) -> str:
    """A Prefect artifact key (lowercase letters, digits and dashes) from a run name."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")


def publish_report(rendered: RenderedReport, run_name: str) -> None:
    """The report as Prefect artifacts of the current flow run (markdown with its plots, and the per-task table)."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    key = artifact_key(f"kernelflow-report-{run_name}")
    create_markdown_artifact(markdown=artifact_markdown(rendered), key=key,
                             description=f"kernelflow report of {run_name}")
    table = [{k: fmt(v) for k, v in row.items()} for row in rendered.rows]
    create_table_artifact(table=table, key=artifact_key(f"kernelflow-tasks-{run_name}"),
                          description=f"per-task results of {run_name}")


def publish_mlflow_link(config: ExperimentConfig, tracker: Tracker) -> None:
    """A Prefect link artifact of the flow run pointing at the MLflow parent run (model-training view)."""
    if not config.tracking.prefect_artifacts:
        return
    from prefect.artifacts import create_link_artifact

    server = tracker.uri if tracker.uri.startswith("http") else "http://127.0.0.1:5000"
    how = "" if tracker.uri.startswith("http") else f" (start it with: mlflow ui --backend-store-uri {tracker.uri})"
    create_link_artifact(link=tracker.ui_url(server), link_text=f"MLflow run {tracker.parent_id}",
                         key=artifact_key(f"kernelflow-mlflow-{tracker.run.path.name}"),
                         description=f"The MLflow parent run of {tracker.run.path.name}{how}")
