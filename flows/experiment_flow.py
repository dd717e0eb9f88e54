"""The experiment as one Prefect flow; `python -m flows.experiment` (experiment.py) composes its config and runs it.

    provenance -> policy -> baseline_eval [-> baseline_sampled] -> epoch-1 .. epoch-N -> trained_eval
        [-> trained_sampled] -> seed_validation -> report      ([..]: with evaluation.samples > 0)

The flow runs the stage table (stage_table.py: name, task, when it runs), the same table the dry-run
plan prints. Each arrow is a Prefect task (stages.py), so the Prefect UI shows the stages as they run;
each stage is also a nested MLflow run under the run's parent (tracking.py). The flow starts an embedded
environment server unless `env.url` names one (endpoint.py) and stops it at the end.

Running the same command again continues the same run (its directory is `<runs_root>/<name>-<config
hash>`): completed stages and epochs are skipped (each still a task run, in a Completed state named
"Skipped" that says which attempt did it), the trainer resumes from the last checkpoint, and MLflow
runs are reused (a parent run that already FINISHED keeps its end time). The flow run is named
`<run>-attempt-<n>`, tagged with the experiment, config hash and seed, and holds a link artifact to
the MLflow parent run (flows/artifacts.py). A failing stage marks the run failed with its cause (run
state, MLflow tags, the Prefect flow run) and the command exits 1 saying how to resume.
`dry_run=true` prints the plan and exits without loading a model or starting anything.

This module runs the table's stages and reports a failure; the stages' work lives in stages.py, the command
line (Hydra, exit status) in experiment.py.
"""

from __future__ import annotations

import json
import os
from contextlib import nullcontext
from typing import Any

from omegaconf import OmegaConf
from prefect import flow, tags

from flows.artifacts import publish_mlflow_link
from flows.config import REDACTED, ExperimentConfig, from_parameters, to_container
from flows.endpoint import open_endpoint
from flows.run_dir import COMPLETED, RUNNING, RunDir, config_hash, run_name, runs_root
from flows.stage_names import REPORT
from flows.stage_table import stage_runs
from flows.stages import RunContext
from flows.tracking import Tracker, describe
from kernelflow.env.models import TOKEN_ENV_VAR


def redact_overrides(overrides: list[str]) -> list[str]:
    return [f"{o.split('=', 1)[0]}={REDACTED}" if o.lstrip("+~").startswith("env.token=") else o for o in overrides]


@flow(name="kernelflow-experiment", log_prints=True, validate_parameters=False)
def experiment_flow(config: dict[str, Any], overrides: list[str] | None = None) -> dict[str, Any]:
    """One experiment run (see the module docstring). `config` is the resolved config, token redacted."""
    cfg = from_parameters(config)
    run = RunDir.for_config(cfg)
    with run.locked():
        state = run.update(status=RUNNING, attempts=run.state().get("attempts", 0) + 1)
        (run.path / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(config)))
        (run.path / "overrides.json").write_text(json.dumps(list(overrides or [])) + "\n")
        print(f"run {run.path} (attempt {state['attempts']})" + ("; resuming" if state["stages"] else ""))
        if cfg.policy_note:
            print(f"note: this experiment's policy is {cfg.policy_note}")
        try:
            tracker = Tracker(cfg, run)
        except Exception as exc:
            run.fail_run("tracking", describe(exc))
            raise
        publish_mlflow_link(cfg, tracker)
        ctx = RunContext(cfg, run, tracker)
        plan = stage_runs(cfg)
        done = all(run.completed(s.name) for s in plan)
        if done:  # every stage still gets its (skipped) task run, so the flow run shows what the run holds
            print(f"every stage of {run.path.name} is already complete; nothing to do")
        try:
            # a complete run needs no environment server: every stage is skipped before it would use one
            endpoint_cm = nullcontext(None) if done else open_endpoint(cfg.env, run.path / "env_server.log",
                                                                       run.path / "env_server.pid")
            with endpoint_cm as endpoint:
                ctx.endpoint = endpoint
                for stage in plan:
                    stage.run(ctx)
        except BaseException as exc:
            if ctx.stage is None:  # before any stage started, e.g. the environment server did not come up
                run.fail_run("setup", describe(exc))
            else:
                run.fail_stage(ctx.stage, describe(exc))
            tracker.fail(ctx.stage or "setup", exc)
            raise
        run.update(status=COMPLETED, failure=None)
        tracker.finish()
        return _summary(run, tracker)


def _summary(run: RunDir, tracker: Tracker) -> dict[str, Any]:
    entry = run.state()["stages"].get(REPORT, {})
    report = entry.get("summary", {}).get("report", str(run.report_dir / "report.md"))
    return {"run_dir": str(run.path), "report": report, "mlflow": tracker.run_url(), "tracking_uri": tracker.uri,
            "parent_run_id": tracker.parent_id}


def flow_run_name(config: ExperimentConfig) -> str:
    """`<run>-attempt-<n>`: the run directory's name and the attempt this flow run will be."""
    path = runs_root(config) / run_name(config)
    attempts = RunDir(path).state().get("attempts", 0) if (path / "state.json").is_file() else 0
    return f"{run_name(config)}-attempt-{attempts + 1}"


def flow_run_tags(config: ExperimentConfig) -> list[str]:
    """The flow run's Prefect tags: experiment, config hash (12 digits, as in the run's name) and seed."""
    return [f"experiment:{config.name}", f"config:{config_hash(config)[:12]}", f"seed:{config.trainer.seed}",
            "kernelflow"]


def run_experiment(config: ExperimentConfig, overrides: list[str] | None = None) -> dict[str, Any]:
    """Run the flow for a typed config (the token travels in $KERNELFLOW_ENV_TOKEN, never as a parameter)."""
    if config.env.token:
        os.environ[TOKEN_ENV_VAR] = config.env.token
    named = experiment_flow.with_options(flow_run_name=flow_run_name(config))
    with tags(*flow_run_tags(config)):
        return named(to_container(config), redact_overrides(list(overrides or [])))


def failure_message(config: ExperimentConfig, exc: BaseException) -> str:
    path = runs_root(config) / run_name(config)
    failure = {}
    if (path / "state.json").exists():
        failure = RunDir(path).state().get("failure") or {}
    # The state names the stage only if it recorded this very exception (not an earlier attempt's).
    stage = failure.get("stage", "setup") if failure.get("error") == describe(exc) else "setup"
    return (
        f"kernelflow: the run failed at stage {stage}: {describe(exc)}\n"
        f"  run directory: {path} (state.json holds the cause; the MLflow run is marked FAILED)\n"
        "  run the same command again to resume from the last completed stage or epoch"
    )
