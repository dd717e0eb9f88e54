"""`python -m flows.rejudge RUN [KEY=VALUE ...]`: re-judge a run's stored kernels into a new stage of that run.

Every submission a run stored (`<stage>/submissions.jsonl`: both evaluations, every training epoch,
the seed validation) is submitted again, with its original task and seed, to an environment server
judging with the run's settings plus the given overrides, for example on another GPU
(`env.url=http://gpu2:8000`) or after an evaluator change. The results become stage `rejudge-<k>`:

    <run>/rejudge-<k>/rejudged.jsonl   per submission: where it came from, the old verdict's status and
                                       reward, the new verdict
    <run>/rejudge-<k>/summary.json     agreement per stage; per-task outcomes of the evaluation stages
    <run>/rejudge-<k>/report.md        the same as tables; also submissions/transcripts of the re-judging

and a nested MLflow run `rejudge-<k>` under the run's parent (agreement and per-task metrics, the
server's provenance, the files), plus a Prefect markdown artifact. The parent run's status is left
as it was. Overrides are `key=value` pairs on the run's resolved config (config.yaml), checked by the
same schema as the experiment's; the shape comes from the (possibly overridden) `eval.shape`.

Exit status: 0 done; 1 the rejudge stage failed (the cause on stderr); 2 a usage or config error.
This command lived in the base package's CLI as `kernelflow rejudge` until the layers were enforced:
`kernelflow` never imports `flows`, so `kernelflow rejudge` now only says where the command went.

This module does not train or evaluate a policy; it only re-submits stored answers.
"""

from __future__ import annotations

if __name__ == "__main__":  # the entry point only: Prefect's defaults before Prefect is imported (not on import)
    from flows import prefect_settings

    prefect_settings.apply()

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from prefect import flow

from flows.analysis import results
from flows.artifacts import artifact_key
from flows.config import ExperimentConfig, ExperimentSchema, from_parameters, to_container
from flows.endpoint import open_endpoint
from flows.run_dir import RunDir, read_json, write_json
from flows.schema import ConfigError
from flows.stage_names import GREEDY_EVALS
from flows.tracking import Tracker, describe
from flows.transcripts import Recorder, read_submissions

EVAL_STAGES = GREEDY_EVALS


def load_config(run: RunDir, overrides: list[str]) -> ExperimentConfig:
    """The run's resolved config with `key=value` overrides, through the experiment schema."""
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ConfigError(f"overrides must be key=value (e.g. eval.backend=cuda), got {bad}")
    try:
        merged = OmegaConf.merge(
            OmegaConf.structured(ExperimentSchema), OmegaConf.load(run.path / "config.yaml"),
            OmegaConf.from_dotlist(overrides),
        )
        container = OmegaConf.to_container(merged, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"cannot apply {overrides} to {run.path / 'config.yaml'}: {exc}") from None
    return from_parameters(container)


def stored_stages(run: RunDir, only: list[str] | None = None) -> list[str]:
    """Stages of the run with stored submissions (not earlier rejudgings), in run order."""
    stages = run.state()["stages"]
    order = sorted(stages, key=lambda s: stages[s].get("started", ""))
    names = [s for s in order if not s.startswith("rejudge-") and (run.path / s / "submissions.jsonl").is_file()]
    if only:
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise ConfigError(f"no stored submissions for stage(s) {unknown} in {run.path}; stages with some: {names}")
        names = [s for s in names if s in only]
    return names


def next_stage(run: RunDir) -> str:
    taken = [s for s in run.state()["stages"] if s.startswith("rejudge-")]
    return f"rejudge-{len(taken) + 1}"


def rejudge_all(recorder: Recorder, url: str, token: str | None, subs: list[dict], shape: str, workers: int,
                timeout_s: float) -> list[dict]:
    make = recorder.factory(url, token, timeout_s)

    def judge(sub: dict) -> dict:
        session = make()
        try:
            session.reset(sub["task_id"], seed=sub["seed"], shape=shape)
            obs = session.step(sub["answer"])
        finally:
            session.close()
        old = {"status": sub["status"], "correct": sub["correct"], "reward": sub["reward"]}
        new = {"status": obs.status, "correct": bool(obs.correct), "reward": obs.reward, "verdict": obs.verdict}
        keep = ("stage", "episode", "task_id", "seed", "turn", "answer")
        return {**{k: sub[k] for k in keep}, "shape": shape, "old": old, "new": new,
                "agree": old["status"] == new["status"] and old["correct"] == new["correct"]}

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(subs) or 1)), thread_name_prefix="rejudge") as pool:
        return list(pool.map(judge, subs))


def rejudged_records(run: RunDir, stage: str, rows: list[dict]) -> list[dict]:
    """The stage's results.json with each turn's outcome replaced by its re-judged verdict."""
    new = {(r["task_id"], r["turn"], r["answer"]): r["new"] for r in rows if r["stage"] == stage}
    records = read_json(run.path / stage / "results.json")
    for rec in records:
        for turn in rec["turns"]:
            v = new.get((rec["task_id"], turn["turn"], turn["answer"]))
            if v is not None:
                turn.update(status=v["status"], correct=v["correct"], reward=v["reward"], verdict=v["verdict"] or {})
    return records


@flow(name="kernelflow-rejudge", log_prints=True, validate_parameters=False)
def rejudge_flow(run_dir: str, config: dict[str, Any], stages: list[str] | None = None) -> dict[str, Any]:
    """Re-judge the stored submissions of `run_dir` (see the module docstring)."""
    from prefect.artifacts import create_markdown_artifact

    cfg = from_parameters(config)
    run = RunDir(run_dir)
    with run.locked():
        names = stored_stages(run, stages)
        stage = next_stage(run)
        subs = [s for name in names for s in read_submissions(run.path / name)]
        print(f"{stage}: re-judging {len(subs)} stored submission(s) of {', '.join(names)} in {run.path}")
        tracker = Tracker(cfg, run, reopen=False)
        run.start_stage(stage)
        try:
            endpoint = open_endpoint(cfg.env, run.path / f"{stage}.env_server.log", run.path / "env_server.pid")
            with tracker.stage(stage) as run_id, endpoint as ep:
                recorder = Recorder(stage)
                rows = rejudge_all(recorder, ep.url, ep.token, subs, cfg.eval.shape, cfg.env.server.max_sessions,
                                   cfg.trainer.message_timeout_s)
                d = run.stage_dir(stage)
                with open(d / "rejudged.jsonl", "w") as f:
                    for r in rows:
                        f.write(json.dumps(r, sort_keys=True, default=str) + "\n")
                recorder.write(d)
                summary, metrics, markdown = summarize(run, cfg, stage, names, rows, ep.info)
                write_json(d / "summary.json", summary)
                (d / "report.md").write_text(markdown)
                tracker.set_tags(run_id, {"evaluator.version": ep.info.get("evaluator_version"),
                                          "env.backend": ep.info.get("backend"), "env.device": ep.info.get("device"),
                                          "env.config_hash": ep.info.get("config_hash"), "env.url": cfg.env.url or "embedded"})
                tracker.log_metrics(run_id, metrics)
                tracker.log_artifacts(run_id, d, stage)
                if cfg.tracking.prefect_artifacts:
                    create_markdown_artifact(markdown=markdown, key=artifact_key(f"kernelflow-{stage}-{run.path.name}"),
                                             description=f"{stage} of {run.path.name}")
        except BaseException as exc:
            run.fail_stage(stage, describe(exc), run_failed=False)
            raise
        run.finish_stage(stage, summary={k: summary[k] for k in ("submissions", "agree", "stages")})
        print(f"{stage}: {summary['agree']}/{summary['submissions']} verdict(s) agree with the stored ones")
        return {"stage": stage, "dir": str(d), "report": str(d / "report.md"), "summary": summary,
                "mlflow_run_id": run_id, "tracking_uri": tracker.uri}


def summarize(run: RunDir, cfg: ExperimentConfig, stage: str, names: list[str], rows: list[dict],
              info: dict) -> tuple[dict, dict, str]:
    per_stage = {}
    for name in names:
        mine = [r for r in rows if r["stage"] == name]
        per_stage[name] = {"submissions": len(mine), "agree": sum(r["agree"] for r in mine),
                           "correct_before": sum(bool(r["old"]["correct"]) for r in mine),
                           "correct_after": sum(r["new"]["correct"] for r in mine)}
    metrics: dict[str, float | None] = {"agree": float(sum(r["agree"] for r in rows)), "submissions": float(len(rows))}
    lines = [f"# {stage} of {run.path.name}", "",
             f"Re-judged {len(rows)} stored submission(s) on {info.get('backend')} ({info.get('device')}), "
             f"evaluator {info.get('evaluator_version')}, config hash {str(info.get('config_hash'))[:12]}, "
             f"shape {cfg.eval.shape!r}.", "",
             "| stage | submissions | same verdict | correct (stored) | correct (re-judged) |", "|---|---:|---:|---:|---:|"]
    for name, s in per_stage.items():
        metrics[f"{name}/agree"] = float(s["agree"])
        lines.append(f"| {name} | {s['submissions']} | {s['agree']} | {s['correct_before']} | {s['correct_after']} |")
    from kernelflow.train.evaluation import TaskEvalResult

    tasks: dict[str, Any] = {}
    for name in names:
        if name not in EVAL_STAGES:
            continue
        outs = results.outcomes([TaskEvalResult.from_dict(r) for r in rejudged_records(run, name, rows)],
                                cfg.trainer.eval_attempts)
        tasks[name] = outs
        for o in outs.values():
            metrics.update(results.task_metrics(o, prefix=f"{name}/"))
        metrics.update(results.summary_metrics(outs, cfg.tasks.groups, prefix=f"{name}/"))
        counts = results.group_counts(outs, cfg.tasks.groups)
        lines += ["", f"## {name}, re-judged", "", "| group | tasks | first turn | two attempts |", "|---|---:|---:|---:|"]
        lines += [f"| {g} | {c['tasks']} | {c['first']} | {c['correct']} |" for g, c in counts.items()]
    changed = [r for r in rows if not r["agree"]]
    if changed:
        lines += ["", "## Changed verdicts", "", "| stage | task | episode | turn | stored | re-judged |",
                  "|---|---|---:|---:|---|---|"]
        lines += [f"| {r['stage']} | {r['task_id']} | {r['episode']} | {r['turn']} | {r['old']['status']} | "
                  f"{r['new']['status']} |" for r in changed]
    summary = {"stage": stage, "stages": per_stage, "submissions": len(rows), "agree": sum(r["agree"] for r in rows),
               "server": info, "config": to_container(cfg), "tasks": tasks}
    return summary, metrics, "\n".join(lines) + "\n"


def rejudge_command(run: str, overrides: list[str], stages: list[str] | None = None, runs_root: str = "runs") -> int:
    """The `python -m flows.rejudge` handler: exit 0 when done, 2 on a usage/config error, 1 on a failure."""
    import logging
    import os

    from kernelflow.env.models import TOKEN_ENV_VAR

    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        run_dir = RunDir.find(run, runs_root)
        cfg = load_config(run_dir, overrides)
        stored_stages(run_dir, stages)
    except (ConfigError, FileNotFoundError) as exc:
        print(f"rejudge: {exc}", file=sys.stderr)
        return 2
    if cfg.env.token:
        os.environ[TOKEN_ENV_VAR] = cfg.env.token
    try:
        out = rejudge_flow.with_options(flow_run_name=f"rejudge {run_dir.path.name}")(
            str(run_dir.path), to_container(cfg), stages)
    except Exception as exc:  # noqa: BLE001 - reported with its cause
        print(f"rejudge: failed: {describe(exc)} (run {run_dir.path})", file=sys.stderr)
        return 1
    print(f"rejudge: {out['stage']} of {run_dir.path} done: {out['dir']} ; report: {out['report']} ; "
          f"MLflow run {out['mlflow_run_id']} in {out['tracking_uri']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m flows.rejudge", description=__doc__.split("\n")[0],
                                     epilog="exit status: 0 done; 1 the rejudge stage failed; 2 usage or config error")
    parser.add_argument("run", help="a run directory, or its name under --runs-root")
    parser.add_argument("overrides", nargs="*",
                        help="KEY=VALUE changes to the run's config, e.g. env.url=http://host:8000")
    parser.add_argument("--stages", default=None, help="comma-separated stages to re-judge (default: every stored one)")
    parser.add_argument("--runs-root", default="runs", help="where run directories are looked up by name (default: runs)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stages = [s for s in (args.stages or "").split(",") if s] or None
    return rejudge_command(args.run, args.overrides, stages=stages, runs_root=args.runs_root)


if __name__ == "__main__":
    sys.exit(main())
