"""The experiment's sub-configs that no library layer owns: task groups, env access, validation, tracking.

`TaskGroups` holds the task ids by role (train / reserved / held-out / families) and resolves family
names into task ids; `EnvAccess` says how the flow reaches the environment server (embedded, or a
remote url checked against the same settings); `ValidationConfig` the extra-seed re-judging of solved
tasks; `TrackingConfig` where runs and their numbers live (MLflow, run directories). Each checks its
own invariants in `__post_init__`.

This module does not hold the experiment itself, the Hydra schema or the conversions to and from a
composed config (config.py), nor the layers' own settings (kernelflow.train, kernelflow.eval,
kernelflow.env). flows/config.py re-exports every name here, so `flows.config` stays the one place to
import the experiment's configs from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from flows.schema import ConfigError
from kernelflow.env.config import EnvServerConfig
from kernelflow.tasks import FAMILY_GROUPS, FAMILY_ROLES, FAMILY_TASKS, KERNELBENCH_REVISION, TASKS, family_task_ids, task_ids

# The role of each group in an experiment (the report and the plan state them).
ROLES = {
    "train": "trained on, then evaluated",
    "reserved": "never trained on; for selecting a checkpoint (near transfer)",
    "heldout": "never trained on; evaluated only (far transfer)",
    "families": "never trained on; evaluated only: operator families absent from the pilot",
}
ALL_FAMILIES = "all"  # in `tasks.families`: every task of kernelflow.tasks.families


@dataclass(frozen=True)
class TaskGroups:
    """Task ids by role (`ROLES`). Training uses `train`; both evaluations use every group.

    `families` holds second-tier tasks (kernelflow.tasks.families). It may name task ids, family
    groups (`normalization`, ...) or `all`; names are resolved here into task ids in suite order, so a
    task added to the families suite joins `tasks=families` without a YAML edit (and, being part of
    the resolved config, gives the run a new config hash).
    """

    train: tuple[str, ...] = tuple(task_ids("train"))
    reserved: tuple[str, ...] = tuple(task_ids("reserved"))
    heldout: tuple[str, ...] = tuple(task_ids("heldout"))
    families: tuple[str, ...] = ()
    # The KernelBench commit the task ids and reference modules come from. The suite in
    # kernelflow/tasks is pinned to one; stating it here makes a run fail if that ever changes.
    kernelbench_revision: str = KERNELBENCH_REVISION

    def __post_init__(self) -> None:
        problems = []
        resolved: list[str] = []
        for name in self.families:
            if name == ALL_FAMILIES:
                resolved += family_task_ids()
            elif name in FAMILY_GROUPS:
                resolved += family_task_ids(name)
            elif name in FAMILY_TASKS:
                resolved.append(name)
            else:
                problems.append(f"families: unknown name {name!r} (give {ALL_FAMILIES!r}, a family group of "
                                f"{FAMILY_GROUPS}, or a family task id: {', '.join(FAMILY_TASKS)})")
        object.__setattr__(self, "families", tuple(dict.fromkeys(resolved)))
        for tid in self.families:  # the suite states each family's role; this group is for evaluated-only tasks
            role = FAMILY_ROLES.get(FAMILY_TASKS[tid].group)
            if role != "evaluated only":
                problems.append(f"families: {tid} has the role {role!r} in kernelflow.tasks.FAMILY_ROLES, but this "
                                "group is evaluated only; leave it out")
        if self.kernelbench_revision != KERNELBENCH_REVISION:
            problems.append(
                f"kernelbench_revision={self.kernelbench_revision!r}, but the installed task suite is KernelBench "
                f"{KERNELBENCH_REVISION} (set that, or install the suite of the revision you want)"
            )
        if not self.train:
            problems.append("train is empty (name at least one task id to train on)")
        seen: dict[str, str] = {}
        for group in ("train", "reserved", "heldout", "families"):
            for tid in getattr(self, group):
                if group != "families" and tid not in TASKS:
                    hint = " (a family task belongs in `families`: it is evaluated only)" if tid in FAMILY_TASKS else ""
                    problems.append(f"{group}: unknown task id {tid!r}{hint} (known: {', '.join(TASKS)})")
                elif tid in seen:
                    problems.append(f"{tid} is in both {seen[tid]} and {group} (a task has one role)")
                seen[tid] = group
        if problems:
            raise ValueError("invalid TaskGroups: " + "; ".join(problems))

    @property
    def groups(self) -> dict[str, tuple[str, ...]]:
        """The experiment's groups in order; `families` only when it holds tasks."""
        groups = {"train": self.train, "reserved": self.reserved, "heldout": self.heldout}
        if self.families:
            groups["families"] = self.families
        return groups

    @property
    def roles(self) -> dict[str, str]:
        """Each group's role; a families role names the families it holds (kernelflow.tasks.FAMILY_ROLES)."""
        out = {g: ROLES[g] for g in self.groups}
        if self.families:
            out["families"] += f" ({', '.join(dict.fromkeys(FAMILY_TASKS[t].group for t in self.families))})"
        return out

    @property
    def all(self) -> tuple[str, ...]:
        """Every task of the experiment, in group order (what both evaluations cover)."""
        return self.train + self.reserved + self.heldout + self.families

    def group_of(self, task_id: str) -> str:
        for group, ids in self.groups.items():
            if task_id in ids:
                return group
        raise KeyError(f"{task_id} is in no task group of this experiment")


@dataclass(frozen=True)
class ValidationConfig:
    """Extra-seed validation: every task solved after training is re-judged on fresh input seeds."""

    extra_seeds: int = 5  # episodes per solved task, each reset with its own seed; 0 skips the stage
    # Reset seeds are seed_start + k * eval.seeds (k = 0..extra_seeds-1), so each re-judging draws
    # eval.seeds inputs of its own, disjoint from the evaluation seeds (which start at trainer.env_seed).
    seed_start: int = 1000

    def __post_init__(self) -> None:
        if self.extra_seeds < 0:
            raise ValueError(f"invalid ValidationConfig: extra_seeds={self.extra_seeds} (must be >= 0)")
        if self.seed_start < 0:
            raise ValueError(f"invalid ValidationConfig: seed_start={self.seed_start} (must be >= 0)")


@dataclass(frozen=True)
class TrackingConfig:
    """Where runs and their numbers live."""

    # MLflow tracking URI (e.g. http://127.0.0.1:5000). None: the embedded store, one SQLite
    # database shared by every run of this project directory: <runs_root>/mlflow.db, with artifacts
    # in <runs_root>/mlartifacts.
    uri: Optional[str] = None  # noqa: UP045 - kept parallel with the schema node
    experiment: str = "kernelflow"  # MLflow experiment that holds the runs
    runs_root: str = "runs"  # run directories: <runs_root>/<name>-<config hash>
    log_artifacts: bool = True  # kernels, transcripts, adapter and report into MLflow
    prefect_artifacts: bool = True  # the report as Prefect markdown/table artifacts

    def __post_init__(self) -> None:
        if not self.experiment:
            raise ValueError("invalid TrackingConfig: experiment is empty (name the MLflow experiment)")
        if not self.runs_root:
            raise ValueError("invalid TrackingConfig: runs_root is empty (e.g. runs)")


@dataclass(frozen=True)
class EnvAccess:
    """How the flow reaches the environment server.

    With `url` unset the flow starts an embedded server with `server`'s settings and stops it at the
    end. With `url` it uses that server after checking that its eval/reward configuration hash and
    episode settings equal `server`'s (the token is `server.token`).
    """

    server: EnvServerConfig
    url: Optional[str] = None  # noqa: UP045
    startup_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        p = []
        if not isinstance(self.server, EnvServerConfig):
            p.append(f"env.server={self.server!r} (must be an EnvServerConfig)")
        if self.url is not None and not str(self.url).startswith(("http://", "https://", "ws://", "wss://")):
            p.append(f"env.url={self.url!r} is not a URL; give e.g. http://gpu-host:8000, or null for an embedded server")
        if not self.startup_timeout_s or self.startup_timeout_s <= 0:
            p.append(f"env.startup_timeout_s={self.startup_timeout_s} (must be > 0)")
        if p:
            raise ConfigError("; ".join(p))

    @property
    def token(self) -> str | None:
        return self.server.token
