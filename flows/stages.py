"""The experiment's stages as Prefect tasks: provenance, policy, greedy and sampled evaluation, a training
epoch, validation, report.

Each task runs one stage of one run (`RunContext`): it is skipped when the run's state says it is
complete (its task run then ends in a Completed state named "Skipped", saying which attempt did it),
and otherwise runs inside its nested MLflow run, writes its files to `<run>/<stage>/`,
logs its metrics and artifacts, and marks itself complete last, so a kill at any point leaves the
stage to be redone, never half-counted. Every submission goes through the environment endpoint and is
recorded (`transcripts.py`).

The policy is loaded once, when a stage first needs it, and restored from the last completed epoch's
checkpoint, so a resumed run continues exactly where the saved one stopped.

Testing hook: with KERNELFLOW_FAIL_STAGE=<stage> in the environment, that stage raises at its start
(the resume tests use it to fail a run at a chosen point). This module does not order the stages
(the table in `stage_table.py` does), run an epoch's training (`epoch.py`) or render the report
(`report.py`). Evaluation results are handled as `TaskEvalResult` / `SampledTaskResult`, stored with
their `to_dict()` and read back with `from_dict()`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.states import Completed, State

from flows import provenance
from flows.analysis import results
from flows.config import ExperimentConfig
from flows.endpoint import Endpoint, server_config_json
from flows.epoch import run_epoch
from flows.run_dir import RunDir, config_hash, read_json, split_settings, write_json
from flows.stage_names import (
    BASELINE_EVAL,
    BASELINE_SAMPLED,
    EPOCH_PREFIX,
    POLICY,
    PROVENANCE,
    REPORT,
    SEED_VALIDATION,
    TRAINED_EVAL,
)
from flows.stage_names import epoch_stage as epoch_name
from flows.tracking import NOTE_TAG, Tracker
from flows.transcripts import Recorder
from kernelflow.eval import Status

FAIL_ENV_VAR = "KERNELFLOW_FAIL_STAGE"
SKIPPED = "Skipped"  # the state name of a stage's task run when an earlier attempt completed it


class InjectedFailure(RuntimeError):
    """Raised by the KERNELFLOW_FAIL_STAGE testing hook."""


class RunContext:
    """What every stage of one run shares: config, run directory, tracker, endpoint and the trainer loop."""

    def __init__(self, config: ExperimentConfig, run: RunDir, tracker: Tracker, endpoint: Endpoint | None = None):
        self.config = config
        self.run = run
        self.tracker = tracker
        self.endpoint = endpoint
        self.stage: str | None = None  # the stage running now (named in a failure)
        self.recorder: Recorder | None = None
        self._loop = None

    def sessions(self) -> Callable[[], Any]:
        """A session factory that records into the current stage's recorder."""
        timeout = self.config.trainer.message_timeout_s

        def make():
            assert self.endpoint is not None and self.recorder is not None, "no endpoint or stage recorder"
            return self.recorder.factory(self.endpoint.url, self.endpoint.token, timeout)()

        return make

    def loop(self):
        """The trainer loop, built on first use and restored from the last completed epoch's checkpoint."""
        if self._loop is None:
            from kernelflow.train import load_policy, plan
            from kernelflow.train.trainer import GRPOLoop

            t = self.config.trainer
            print(f"loading the policy ({t.policy.source}: {t.policy.model})")
            policy = load_policy(t.policy, t.lora, seed=t.seed)
            total = plan(t, len(self.config.tasks.train))["updates"]
            self._loop = GRPOLoop(t, policy, session_factory=self.sessions(), total_updates=total)
            done = self.run.last_completed_epoch(t.epochs)
            if done:
                info = self._loop.load_checkpoint(self.run.checkpoint_dir(done))
                print(f"resumed the trainer from epoch {done} ({info.updates} updates) at {info.path}")
        return self._loop


def run_stage(ctx: RunContext, stage: str, body: Callable[[str], dict]) -> dict | State:
    """Skip a completed stage; else run `body(mlflow_run_id)` in its nested run and mark it complete.

    A skipped stage returns a Prefect state, Completed named "Skipped" with the message "skipped: done
    in attempt N" and the stage's summary as its result, so its task run shows what happened (Prefect 3
    has no Skipped or Cached state of its own; a returned state is the task run's final state). Its
    MLflow run is left untouched.
    """
    entry = ctx.run.state()["stages"].get(stage, {})
    if ctx.run.completed(stage):
        n = entry.get("run_attempt")
        message = f"skipped: done in attempt {n}" if n else "skipped: done in an earlier attempt"
        print(f"stage {stage}: already completed in {ctx.run.path}; {message}")
        return Completed(name=SKIPPED, message=message, data=entry.get("summary", {}))
    ctx.stage = stage
    ctx.run.start_stage(stage)
    with ctx.tracker.stage(stage) as run_id:
        if os.environ.get(FAIL_ENV_VAR) == stage:
            raise InjectedFailure(f"injected failure at stage {stage} ({FAIL_ENV_VAR}={stage})")
        summary = body(run_id)
    ctx.run.finish_stage(stage, summary=summary, run_attempt=ctx.run.state().get("attempts"))
    ctx.stage = None
    return summary


@task(name=PROVENANCE, task_run_name=PROVENANCE, cache_policy=NO_CACHE)
def provenance_stage(ctx: RunContext) -> dict:
    """Tag the parent run with provenance, log the config as params, save config and server settings."""

    def body(run_id: str) -> dict:
        cfg, run, tracker = ctx.config, ctx.run, ctx.tracker
        h = config_hash(cfg)
        tags = provenance.collect(cfg, h, ctx.endpoint.info if ctx.endpoint else {})
        result_keys, placement = split_settings(cfg)
        placement = {f"config.{k}": v for k, v in placement.items()}
        for rid in (tracker.parent_id, run_id):
            tracker.set_tags(rid, tags)
        tracker.set_tags(tracker.parent_id, {**provenance.mlflow_source_tags(tags),
                                             NOTE_TAG: provenance.run_note(cfg, run.path.name, tags)})
        tracker.set_tags(tracker.parent_id, placement)  # where it ran may change between attempts: tags, not params
        tracker.log_params(tracker.parent_id, result_keys)
        d = run.stage_dir(PROVENANCE)
        write_json(d / "provenance.json", tags)
        (run.path / "env_server.json").write_text(server_config_json(cfg.env) + "\n")
        tracker.log_artifacts(run_id, d)
        tracker.log_artifacts(tracker.parent_id, run.path / "config.yaml", "config")
        tracker.log_artifacts(tracker.parent_id, run.path / "env_server.json", "config")
        print(f"provenance: git {tags['git.sha'][:12]} (dirty {tags['git.dirty']}), config {h[:12]}, "
              f"suite {tags['tasks.suite_hash'][:12]}, evaluator {tags['evaluator.version']}, gpu {tags['gpu.name']}")
        return {"git_sha": tags["git.sha"], "config_hash": h}

    return run_stage(ctx, PROVENANCE, body)


@task(name=POLICY, task_run_name=POLICY, cache_policy=NO_CACHE)
def policy_stage(ctx: RunContext) -> dict:
    """Make the policy's base model ready: build it where it is built here (the tiny or SFT model, once
    per machine and cache directory, then cached), so the build is a stage of its own instead of part
    of baseline_eval's duration. A hub or local model is only named here; it loads in the first stage
    that needs it. A later stage still builds the model if its cache was removed after this stage."""

    def body(run_id: str) -> dict:
        import time

        from kernelflow.train.policy import model_location

        policy = ctx.config.trainer.policy
        start = time.perf_counter()
        location, revision = model_location(policy)
        seconds = time.perf_counter() - start
        ctx.tracker.set_tags(run_id, {"policy.source": policy.source, "policy.location": location,
                                      "policy.revision": revision or "n/a"})
        print(f"policy: {policy.source} model at {location}{f'@{revision}' if revision else ''} "
              f"(ready in {seconds:.1f} s)")
        return {"source": policy.source, "location": location, "revision": revision, "seconds": round(seconds, 1)}

    return run_stage(ctx, POLICY, body)


def _evaluation_loop(ctx: RunContext, stage: str, before_training: bool):
    """The trainer loop with the policy an evaluation stage needs (untrained, or after every epoch)."""
    loop = ctx.loop()
    expected = 0 if before_training else ctx.config.trainer.epochs
    if loop.epochs_completed != expected:
        raise RuntimeError(f"{stage} needs the policy after {expected} epoch(s), but it has {loop.epochs_completed}")
    ctx.recorder = Recorder(stage)
    return loop


def _store_evaluation(ctx: RunContext, run_id: str, stage: str, records: list,
                      metrics: dict[str, float | None]) -> dict:
    """Write an evaluation's records (tagged with their task group) and submissions, log its metrics to
    its own run and its summaries (not the per-task values: `Tracker.log_stage_metrics`), prefixed with
    the stage, to the parent, and upload the stage's files; returns the recorder's counts."""
    d = ctx.run.stage_dir(stage)
    write_json(d / "results.json", [{**r.to_dict(), "group": ctx.config.tasks.group_of(r.task_id)} for r in records])
    counts = ctx.recorder.write(d)
    ctx.tracker.log_stage_metrics(run_id, stage, metrics, ctx.config.tasks.all)
    ctx.tracker.log_artifacts(run_id, d, stage)
    return counts


@task(name="greedy-evaluation", task_run_name="{stage}", cache_policy=NO_CACHE)
def eval_stage(ctx: RunContext, stage: str) -> dict:
    """Greedy evaluation of every task (`trainer.eval_attempts` attempts): the base model before training,
    the adapter after."""

    def body(run_id: str) -> dict:
        cfg = ctx.config
        loop = _evaluation_loop(ctx, stage, before_training=stage == BASELINE_EVAL)
        records = loop.greedy_evaluate(list(cfg.tasks.all), seed=cfg.trainer.env_seed)
        outs = results.outcomes(records, cfg.trainer.eval_attempts)
        metrics: dict[str, float | None] = {}
        for o in outs.values():
            metrics.update(results.task_metrics(o))
        metrics.update(results.summary_metrics(outs, cfg.tasks.groups))
        counts = _store_evaluation(ctx, run_id, stage, records, metrics)
        table = results.group_counts(outs, cfg.tasks.groups)
        by = f"by {results.ordinal(cfg.trainer.eval_attempts)}"
        print(f"{stage}: " + ", ".join(f"{g} {c['first']}/{c['tasks']} first, {c['correct']}/{c['tasks']} {by}"
                                       for g, c in table.items()))
        return {"groups": table, **counts}

    return run_stage(ctx, stage, body)


@task(name="sampled-evaluation", task_run_name="{stage}", cache_policy=NO_CACHE)
def sampled_eval_stage(ctx: RunContext, stage: str) -> dict:
    """`evaluation.samples` sampled episodes of every task (pass@k, avg@n): before training, then after.

    Its own stage, after the greedy one, so a failure here never redoes the greedy numbers. It logs
    per task `<stage>/<task>/samples` (n) and `samples_correct` (c, first attempt) etc. (results.SAMPLE_KEYS),
    which the seed comparison reads (flows/analysis/seed_runs.py), and per group `group/<g>/pass_at_<k>`
    and `avg_at_n`.
    """

    def body(run_id: str) -> dict:
        cfg = ctx.config
        loop = _evaluation_loop(ctx, stage, before_training=stage == BASELINE_SAMPLED)
        records = loop.sample_evaluate(list(cfg.tasks.all), cfg.evaluation, seed=cfg.trainer.env_seed)
        outs = results.sample_outcomes(records)
        metrics: dict[str, float | None] = {}
        for o in outs.values():
            metrics.update(results.sample_task_metrics(o))
        metrics.update(results.sample_summary_metrics(outs, cfg.tasks.groups))
        counts = _store_evaluation(ctx, run_id, stage, records, metrics)
        table = {g: results.sampled_rates(outs, ids) for g, ids in {**cfg.tasks.groups, "overall": tuple(outs)}.items()}
        n = cfg.evaluation.samples
        print(f"{stage}: {n} sample(s) per task at T {cfg.evaluation.temperature}: " + ", ".join(
            f"{g} pass@1 {r.get('pass_at_1', 0.0):.2f}, pass@{n} {r.get(f'pass_at_{n}', 0.0):.2f}" for g, r in table.items()))
        return {"samples": n, "groups": table, **counts}

    return run_stage(ctx, stage, body)


@task(name="train-epoch", task_run_name=EPOCH_PREFIX + "{epoch}", cache_policy=NO_CACHE)
def epoch_stage(ctx: RunContext, epoch: int) -> dict:
    """One training epoch (one update per training task), then a checkpoint."""
    stage = epoch_name(epoch)

    def body(run_id: str) -> dict:
        cfg, run, tracker = ctx.config, ctx.run, ctx.tracker
        ctx.recorder = Recorder(stage)
        d = run.stage_dir(stage)
        if cfg.trainer.data_parallel.num_processes > 1:
            # N training processes (train_job.py) run the same epoch function (epoch.py) and write the
            # same files. The in-process policy is let go first, so its GPU memory is free; an evaluation
            # stage rebuilds it from the last checkpoint.
            from flows import train_job

            ctx._loop = None
            result = train_job.launch(ctx, epoch)
        else:
            result = run_epoch(ctx.loop(), epoch, cfg.tasks.train, run.checkpoint_dir(epoch), d, ctx.recorder)
        assert result is not None  # the flow's process is the main one
        updates, info, counts = result.updates, result.checkpoint, result.counts
        meta = read_json(info.path / "trainer_state.json")
        adapter = provenance.adapter_tags(meta.get("weight_sha256", {}))
        for m in updates:  # logged once the epoch is complete, so a redone epoch never logs a step twice
            scalars = dense_statuses(m.scalars())
            tracker.log_metrics(run_id, scalars, step=m.update)
            tracker.log_metrics(tracker.parent_id, {f"train/{k}": v for k, v in scalars.items()}, step=m.update)
        tracker.set_tags(run_id, {**adapter, "checkpoint": str(info.path)})
        tracker.set_tags(tracker.parent_id, adapter)
        tracker.log_artifacts(run_id, d, stage)
        if epoch == cfg.trainer.epochs:
            tracker.log_artifacts(tracker.parent_id, info.adapter_path, "adapter")
        rewards = [m.reward_mean for m in updates]
        print(f"{stage}: {len(updates)} update(s), mean reward {sum(rewards) / len(rewards):.3f}; checkpoint {info.path}")
        return {"updates": result.total_updates, "checkpoint": str(info.path), "weight_sha256": meta.get("weight_sha256", {}),
                **counts}

    return run_stage(ctx, stage, body)


def dense_statuses(scalars: dict[str, float]) -> dict[str, float]:
    """An update's scalars with `status_<s>` for every verdict status, 0 where none had it, so a chart
    of a status has a point at every step instead of interpolating over the updates without it."""
    return {**{f"status_{s.value}": 0.0 for s in Status}, **scalars}


@task(name="seed-validation", task_run_name=SEED_VALIDATION, cache_policy=NO_CACHE)
def validation_stage(ctx: RunContext) -> dict:
    """Re-judge each task solved after training with its solving kernel on the extra seeds."""

    def body(run_id: str) -> dict:
        from kernelflow.train.evaluation import TaskEvalResult

        cfg, run, tracker = ctx.config, ctx.run, ctx.tracker
        records = [TaskEvalResult.from_dict(r) for r in read_json(run.stage_dir(TRAINED_EVAL) / "results.json")]
        seeds = provenance.validation_seeds(cfg)
        ctx.recorder = Recorder(SEED_VALIDATION)
        outcome = validate(ctx.recorder, ctx.endpoint, records, seeds, cfg.eval.shape, cfg.env.server.max_sessions,
                           cfg.trainer.message_timeout_s)
        d = run.stage_dir(SEED_VALIDATION)
        write_json(d / "validation.json", outcome)
        counts = ctx.recorder.write(d)
        metrics = {}
        for tid, v in outcome["tasks"].items():
            metrics[f"{tid}/extra_seeds_correct"] = v["correct"] / len(seeds)
            metrics[f"{tid}/extra_seeds_passed"] = float(v["passed"])
        metrics["validated"] = float(outcome["validated"])
        tracker.log_stage_metrics(run_id, SEED_VALIDATION, metrics, cfg.tasks.all)
        tracker.log_artifacts(run_id, d, SEED_VALIDATION)
        print(f"seed validation: {outcome['validated']}/{outcome['solved']} solved task(s) correct on all "
              f"{len(seeds)} extra seed(s) {seeds}")
        return {"solved": outcome["solved"], "validated": outcome["validated"], **counts}

    return run_stage(ctx, SEED_VALIDATION, body)


def headline(run: RunDir, attempts: int = results.DEFAULT_ATTEMPTS) -> str:
    """The report's headline: tasks correct by the last of `attempts` attempts before and after training, per group."""
    stages = run.state()["stages"]
    before = stages.get(BASELINE_EVAL, {}).get("summary", {}).get("groups", {})
    after = stages.get(TRAINED_EVAL, {}).get("summary", {}).get("groups", {})
    parts = [f"{g} {before[g]['correct']}/{c['tasks']} -> {c['correct']}/{c['tasks']}"
             for g, c in after.items() if g in before]
    return (f"tasks correct {results.by_attempt(attempts)}, before -> after training: " + ", ".join(parts)) if parts else ""


def validate(recorder: Recorder, endpoint: Endpoint, records: list, seeds: list[int], shape: str,
             max_sessions: int, timeout_s: float) -> dict:
    """Submit each solving kernel (`TaskEvalResult.first_correct_turn`) once per seed (a fresh episode each)
    and count the correct verdicts."""
    solved = {r.task_id: r.first_correct_turn.answer for r in records if r.first_correct_turn is not None}
    make = recorder.factory(endpoint.url, endpoint.token, timeout_s)

    def judge(job: tuple[str, int]) -> tuple[str, int, dict]:
        task_id, seed = job
        session = make()
        try:
            session.reset(task_id, seed=seed, shape=shape)
            obs = session.step(solved[task_id])
        finally:
            session.close()
        return task_id, seed, {"status": obs.status, "correct": bool(obs.correct), "reward": obs.reward}

    jobs = [(t, s) for t in solved for s in seeds]
    tasks: dict[str, dict] = {t: {"seeds": {}, "correct": 0} for t in solved}
    if jobs:
        with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), max_sessions)), thread_name_prefix="validate") as pool:
            for task_id, seed, v in pool.map(judge, jobs):
                tasks[task_id]["seeds"][str(seed)] = v
                tasks[task_id]["correct"] += int(v["correct"])
    for v in tasks.values():
        v["passed"] = v["correct"] == len(seeds)
    return {"seeds": seeds, "shape": shape, "solved": len(solved), "validated": sum(v["passed"] for v in tasks.values()),
            "tasks": tasks}


@task(name=REPORT, task_run_name=REPORT, cache_policy=NO_CACHE)
def report_stage(ctx: RunContext) -> dict:
    """Render the report (markdown + PNG plots), log it to MLflow and publish it as Prefect artifacts."""
    from flows.analysis import report
    from flows.artifacts import publish_report

    def body(run_id: str) -> dict:
        cfg, run, tracker = ctx.config, ctx.run, ctx.tracker
        rendered = report.write_report(run, cfg, mlflow_run=tracker.run_url())
        tracker.log_metrics(tracker.parent_id, rendered.metrics)
        tags = read_json(run.stage_dir(PROVENANCE) / "provenance.json")
        note = provenance.run_note(cfg, run.path.name, tags, headline(run, cfg.trainer.eval_attempts))
        tracker.set_tags(tracker.parent_id, {NOTE_TAG: note})
        tracker.log_artifacts(run_id, run.report_dir, REPORT)
        tracker.log_artifacts(tracker.parent_id, run.report_dir, REPORT)
        if cfg.tracking.prefect_artifacts:
            publish_report(rendered, run.path.name)
        return {"report": str(rendered.path), "metrics": json.loads(json.dumps(rendered.metrics))}

    return run_stage(ctx, REPORT, body)
