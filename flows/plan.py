"""The experiment's plan: its stages and what each costs, counted from the config without loading a model.

`experiment_plan(config)` returns the stages (read from the stage table the flow runs, stage_table.py)
and the numbers (training counts come from `kernelflow.train.plan`, the
trainer's own arithmetic); `render_plan(config)` is the text `dry_run=true` prints. Submission and
token counts for evaluation (greedy and sampled) and validation are upper bounds: a correct first
attempt gets no second one, and only tasks solved after training are re-judged on extra seeds.
"""

from __future__ import annotations

from flows.config import ExperimentConfig
from flows.endpoint import server_config_json
from flows.run_dir import config_hash, run_name, runs_root
from flows.stage_table import stage_names
from kernelflow.train import plan as trainer_plan


def stages(config: ExperimentConfig) -> list[str]:
    """The stages the experiment runs, in order: the stage table's (stage_table.py), as the flow runs them."""
    return stage_names(config)


def experiment_plan(config: ExperimentConfig) -> dict:
    t = config.trainer
    n_eval = len(config.tasks.all)
    train = trainer_plan(t, len(config.tasks.train), n_eval)
    eval_subs = 2 * train["eval_submissions_max"]  # before and after training
    validation_subs = n_eval * config.validation.extra_seeds
    s = config.evaluation
    sampled_episodes = n_eval * s.samples  # per sampled evaluation; there is one before and one after training
    sampled_subs = 2 * sampled_episodes * (s.attempts or t.eval_attempts)
    return {
        "run": run_name(config),
        "config_hash": config_hash(config),
        "stages": stages(config),
        "tasks": {g: list(ids) for g, ids in config.tasks.groups.items()},
        "episodes": train["episodes"],
        "training_submissions": train["submissions"],
        "updates": train["updates"],
        "updates_per_epoch": train["updates_per_epoch"],
        "evaluation_submissions_max": eval_subs,
        "validation_submissions_max": validation_subs,
        "training_tokens_max": train["generated_tokens_max"],
        "evaluation_tokens_max": 2 * train["eval_generated_tokens_max"],
        "sampled_episodes": 2 * sampled_episodes,
        "sampled_submissions_max": sampled_subs,
        "sampled_tokens_max": sampled_subs * t.eval_tokens,
        "tokens_per_turn": t.max_new_tokens,
        "loss_normalizer": train["loss_normalizer"],
    }


def render_plan(config: ExperimentConfig) -> str:
    p = experiment_plan(config)
    t, e, env, s = config.trainer, config.eval, config.env, config.evaluation
    model = f"{config.model.model}@{config.model.revision}" if config.model.source == "hub" else config.model.source
    note = [f"                  note: the policy is {config.policy_note}"] if config.policy_note else []
    lines = [
        f"plan of experiment {config.name!r} (dry run: nothing is loaded, started or written)",
        f"  run directory   {runs_root(config) / p['run']}",
        f"  policy          {model} + LoRA r{config.lora.r} alpha {config.lora.alpha}",
        *note,
        f"  environment     {'embedded server' if not env.url else env.url}; {env.server.max_turns} turns, "
        f"gamma {env.server.gamma}; evaluator {e.backend} at shape {e.shape!r}, {e.seeds} seed(s) per judgement",
        f"  stages          {' -> '.join(p['stages'])}",
        "  tasks",
    ]
    roles = config.tasks.roles
    for group, ids in p["tasks"].items():
        lines.append(f"    {group:<9} {len(ids):>2}  {roles[group]}")
        lines.append(f"              {' '.join(ids)}")
    lines += [
        f"  training        {t.epochs} epoch(s) x {len(config.tasks.train)} task(s) = {p['updates']} updates "
        f"({t.estimator}, group {t.group_size}, T {t.temperature})",
        f"    episodes               {p['episodes']}",
        f"    training submissions   {p['training_submissions']}  ({t.group_size} x {env.server.max_turns} per update)",
        f"    updates                {p['updates']}",
        f"  evaluation      greedy, {t.eval_attempts} attempt(s), all {len(config.tasks.all)} tasks, before and after",
        f"    evaluation submissions <= {p['evaluation_submissions_max']}",
        "  sampled eval    " + (
            f"{s.samples} episode(s) per task at T {s.temperature}, top_p {s.top_p}, "
            f"{s.attempts or t.eval_attempts} attempt(s), before and after: {p['sampled_episodes']} episodes, "
            f"<= {p['sampled_submissions_max']} submissions" if s.enabled else "off (evaluation.samples=0)"),
        f"  validation      {config.validation.extra_seeds} extra seed(s) per solved task: "
        f"<= {p['validation_submissions_max']} submissions",
        "  token budget (generated, upper bound)",
        f"    per turn               {p['tokens_per_turn']}",
        f"    training               {p['training_tokens_max']}",
        f"    evaluation             {p['evaluation_tokens_max']}",
        f"    sampled evaluation     {p['sampled_tokens_max']}",
        f"    total                  {p['training_tokens_max'] + p['evaluation_tokens_max'] + p['sampled_tokens_max']}",
        f"  config hash     {p['config_hash']}",
        "  environment server settings (`kernelflow serve --config FILE` with this JSON reproduces the embedded one):",
    ]
    lines += ["    " + line for line in server_config_json(env).splitlines()]
    return "\n".join(lines)
