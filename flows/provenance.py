"""Provenance: everything needed to say exactly what produced a run's numbers, as flat string tags.

`collect(config, run_hash, server_info)` gathers the code (git SHA and dirty flag), the config hash,
the task suite (its hash and the KernelBench revision), package versions, Python, the GPU (name,
driver, CUDA; "none" without one), the base model id and revision, the seeds, the evaluator version,
and what the environment server reported (backend, device, its configuration hash).
`adapter_tags(weight_sha256)` adds the trained adapter's weight hashes once a checkpoint exists.
`mlflow_source_tags(tags)` spells the git state in MLflow's own system tags (`mlflow.source.git.commit`,
`.branch`, `mlflow.source.name`/`type`), which the MLflow UI shows on the run page; `run_note` is the
run's description (`mlflow.note.content`).

Nothing here fails a run: a probe that cannot answer (no git, no nvidia-smi) records "unknown".
This module reads the machine; it does not log (stages.py sends the tags to MLflow).
"""

from __future__ import annotations

import importlib.metadata as md
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from flows.config import ExperimentConfig
from kernelflow.eval import EVALUATOR_VERSION
from kernelflow.tasks import KERNELBENCH_REVISION, families_hash, suite_hash

PACKAGES = (
    "kernelflow", "torch", "triton", "transformers", "peft", "trl", "openenv", "hydra-core", "omegaconf",
    "prefect", "mlflow", "numpy",
)
UNKNOWN = "unknown"


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_state(root: Path | None = None) -> dict[str, str]:
    """The commit of the code that runs, and whether the working tree differs from it."""
    root = root or Path(__file__).resolve().parent.parent
    sha = _run(["git", "rev-parse", "HEAD"], root)
    if sha is None:
        return {"git.sha": UNKNOWN, "git.dirty": UNKNOWN}
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], root)
    branch = _run(["git", "rev-parse", "--abbrev-ref", "HEAD"], root)  # "HEAD" when detached
    return {"git.sha": sha, "git.dirty": UNKNOWN if status is None else str(bool(status)).lower(),
            "git.branch": branch or UNKNOWN}


def mlflow_source_tags(tags: dict[str, str]) -> dict[str, str]:
    """MLflow's system tags for the code that ran, from `collect`'s git tags (none without git)."""
    out = {"mlflow.source.name": "flows.experiment", "mlflow.source.type": "LOCAL"}
    if tags.get("git.sha", UNKNOWN) != UNKNOWN:
        out["mlflow.source.git.commit"] = tags["git.sha"]
    if tags.get("git.branch", UNKNOWN) not in (UNKNOWN, "HEAD"):
        out["mlflow.source.git.branch"] = tags["git.branch"]
    return out


def run_note(config: ExperimentConfig, run_name: str, tags: dict[str, str], headline: str = "") -> str:
    """The parent run's description (markdown): what ran, from which code and config, and its headline."""
    t = config.trainer
    lines = [
        f"**kernelflow experiment `{config.name}`**, run `{run_name}`",
        "",
        f"- policy: {tags.get('model.id', config.model.source)} + LoRA r{config.lora.r}; {t.epochs} epoch(s) of "
        f"{t.estimator} over {len(config.tasks.train)} training task(s), {len(config.tasks.all)} task(s) evaluated",
        f"- config hash `{tags.get('config.hash', UNKNOWN)}`; git `{tags.get('git.sha', UNKNOWN)}` "
        f"(dirty {tags.get('git.dirty', UNKNOWN)}); evaluator {tags.get('evaluator.version', UNKNOWN)}, "
        f"backend {tags.get('env.backend', UNKNOWN)}, gpu {tags.get('gpu.name', UNKNOWN)}",
    ]
    if config.is_tiny:
        lines.append("- the policy was built here (tiny or synthetic SFT): its numbers say nothing about a real model")
    if headline:
        lines += ["", f"**Result:** {headline}"]
    return "\n".join(lines)


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[f"version.{name}"] = md.version(name)
        except md.PackageNotFoundError:
            out[f"version.{name}"] = "not installed"
    return out


def gpu_info() -> dict[str, str]:
    """The trainer's view of the GPUs: names, driver, CUDA; 'none' on a CPU-only machine."""
    import torch

    if not torch.cuda.is_available():
        return {"gpu.name": "none", "gpu.count": "0", "gpu.driver": "none", "gpu.cuda": "none"}
    names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return {
        "gpu.name": ", ".join(names),
        "gpu.count": str(torch.cuda.device_count()),
        "gpu.driver": (driver.splitlines()[0] if driver else UNKNOWN),
        "gpu.cuda": str(torch.version.cuda),
    }


def collect(config: ExperimentConfig, run_hash: str, server_info: dict[str, Any]) -> dict[str, str]:
    """Every provenance tag of a run (see the module docstring)."""
    model = config.model
    trainer = config.trainer
    v = config.validation
    tags = {
        "config.hash": run_hash,
        "experiment.name": config.name,
        "tasks.suite_hash": suite_hash(),
        # the second-tier suite's metadata (tolerances, shapes, references), when the run evaluates any of it
        "tasks.families_hash": families_hash() if config.tasks.families else "none",
        "tasks.kernelbench_revision": KERNELBENCH_REVISION,
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
        "platform": platform.platform(),
        "model.id": {"tiny": "tiny (random weights, built locally)",
                     "sft": "sft (pre-trained locally on the synthetic corpus, kernelflow/train/sft.py)"}.get(
                         model.source, model.model),
        "model.revision": model.revision or "n/a",
        "model.source": model.source,
        "policy.is_tiny_random": str(model.source == "tiny").lower(),
        "policy.built_here": str(config.is_tiny).lower(),  # tiny random or synthetic SFT: not a real model
        "seed.trainer": str(trainer.seed),
        "seed.env": str(trainer.env_seed),
        "seed.eval_inputs": str(config.eval.seed_list()),
        "seed.validation": str(validation_seeds(config)) if v.extra_seeds else "none",
        "evaluator.version": EVALUATOR_VERSION,
        "env.backend": str(server_info.get("backend", UNKNOWN)),
        "env.device": str(server_info.get("device", UNKNOWN)),
        "env.config_hash": str(server_info.get("config_hash", UNKNOWN)),
        "env.embedded": str(not bool(config.env.url)).lower(),
        "env.url": config.env.url or "embedded",
    }
    tags.update(git_state())
    tags.update(package_versions())
    tags.update(gpu_info())
    return tags


def validation_seeds(config: ExperimentConfig) -> list[int]:
    """The reset seeds of extra-seed validation: disjoint blocks of eval.seeds inputs each."""
    v = config.validation
    return [v.seed_start + k * config.eval.seeds for k in range(v.extra_seeds)]


def adapter_tags(weight_sha256: dict[str, str]) -> dict[str, str]:
    return {f"adapter.sha256.{name}": digest for name, digest in sorted(weight_sha256.items())}
