"""The adapter's model card: README.md in the Hugging Face format (YAML metadata, then Markdown).

It states the base model and revision, the training protocol and its configuration, the evaluation
results handed in (e.g. {"baseline": [...], "trained": [...]} from greedy evaluation), the sha256 of
the weight files, and how to load the adapter with PEFT. Rendering only: checkpoint.py writes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from kernelflow.train.config import TrainerConfig
from kernelflow.train.evaluation import TaskEvalResult


def _yaml_list(items: Sequence[str]) -> str:
    return "\n".join(f"- {i}" for i in items)


def _eval_table(label: str, results: Sequence[TaskEvalResult]) -> str:
    lines = [
        f"### {label}",
        "",
        "| task | attempt 1 | attempt 2 | reward (best) | roofline fraction (best) |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        cells = [f"{t.status}{' ✔' if t.correct else ''}" for t in r.turns] + ["—"] * (2 - len(r.turns))
        best = r.best
        frac = "—" if best is None or best.roofline_fraction is None else f"{best.roofline_fraction:.3f}"
        reward = "—" if best is None else f"{best.reward:.3f}"
        lines.append(f"| {r.task_id} | {cells[0]} | {cells[1]} | {reward} | {frac} |")
    n = len(results)
    first = sum(r.first_correct for r in results)
    anyc = sum(r.correct for r in results)
    lines += ["", f"Correct at the first attempt: {first}/{n}; after feedback: {anyc}/{n}.", ""]
    return "\n".join(lines)


def model_card(
    config: TrainerConfig,
    base_id: str,
    base_revision: str | None,
    weight_sha256: Mapping[str, str],
    *,
    updates: int,
    epochs_completed: int,
    train_tasks: Sequence[str] = (),
    eval_results: Mapping[str, Sequence[TaskEvalResult]] | None = None,
    versions: Mapping[str, str] | None = None,
) -> str:
    hub = config.policy.source == "hub"
    front = ["---"]
    if hub:
        front.append(f"base_model: {base_id}")
        front.append("base_model_relation: adapter")
    front += [
        "library_name: peft",
        "pipeline_tag: text-generation",
        "tags:",
        _yaml_list(["peft", "lora", "reinforcement-learning", config.estimator.replace("_", "-"), "triton"]),
        "---",
        "",
    ]
    rev = f"@{base_revision}" if base_revision else ""
    rev_arg = f', revision="{base_revision}"' if base_revision else ""
    body = [
        f"# LoRA adapter for {base_id}: Triton kernels from execution feedback",
        "",
        f"A LoRA adapter (rank {config.lora.r}, alpha {config.lora.alpha}) trained by kernelflow with "
        f"multi-turn {'Dr. GRPO' if config.estimator == 'dr_grpo' else 'TRLOO'} against kernelflow's kernel "
        "environment: the model writes a Triton module, the environment judges it (correctness, then time "
        "against the roofline floor) and returns feedback for a second attempt.",
        "",
        "## Base model",
        "",
        f"- model: `{base_id}`" + ("" if hub else " (a local directory)"),
        f"- revision: `{base_revision or 'n/a (local)'}`",
        "",
        "## Training",
        "",
        f"- updates: {updates} over {epochs_completed} epoch(s); one update per task group of "
        f"{config.group_size} episodes, up to {config.max_turns} turns each",
        f"- training tasks: {', '.join(train_tasks) or 'n/a'}",
        f"- advantage estimator: `{config.estimator}`; loss: token sum over the model's own tokens "
        f"(prompt and feedback masked), divided by {config.normalizer} per episode and averaged over the "
        f"group; KL weight {config.kl_weight}",
        f"- sampling: temperature {config.temperature}, top_p {config.top_p}, "
        f"{config.max_new_tokens} new tokens per turn",
        f"- optimiser: AdamW, learning rate {config.learning_rate} ({config.lr_scheduler}), "
        f"gradient clipping {config.max_grad_norm}; seed {config.seed}",
        f"- LoRA target modules: {', '.join(config.lora.target_modules)}; dropout {config.lora.dropout}",
        "",
        "<details><summary>Full trainer configuration</summary>",
        "",
        "```json",
        json.dumps(config.to_dict(), indent=2, sort_keys=True),
        "```",
        "",
        "</details>",
        "",
        "## Evaluation",
        "",
    ]
    if eval_results:
        body.append("Greedy decoding, up to two attempts (the second sees the first's feedback).")
        body.append("")
        for label, results in eval_results.items():
            body.append(_eval_table(label, results))
    else:
        body += ["No evaluation results were attached to this checkpoint.", ""]
    body += ["## Weight files (sha256)", "", "| file | sha256 |", "|---|---|"]
    body += [f"| {name.rsplit('/', 1)[-1]} | `{digest}` |" for name, digest in sorted(weight_sha256.items())]
    body += [
        "",
        "## How to load",
        "",
        "```python",
        "from peft import PeftModel",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f'base = AutoModelForCausalLM.from_pretrained("{base_id}"{rev_arg}, dtype="auto")',
        f'tokenizer = AutoTokenizer.from_pretrained("{base_id}"{rev_arg})',
        'model = PeftModel.from_pretrained(base, "path/to/this/adapter")',
        "```",
        "",
    ]
    if versions:
        body += ["## Framework versions", ""] + [f"- {k} {v}" for k, v in sorted(versions.items())] + [""]
    body.append(f"Base: `{base_id}{rev}`.")
    return "\n".join(front + body) + "\n"
