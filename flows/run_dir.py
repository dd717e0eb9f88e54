"""A run's directory and its resume state: where every stage's files live and which stages are done.

A run is named by its experiment and config hash, `<runs_root>/<name>-<hash12>`, never by a clock:
running the same experiment again finds the same directory and continues after the last completed
stage or epoch. The hash covers every setting that changes results and none that only say where
things run or are tracked (`NON_RESULT_KEYS`): pointing `env.url` at another server or `tracking.uri`
at an MLflow server continues the same run.

    <run>/state.json            stage status, attempts, failure cause, MLflow run ids (written atomically)
    <run>/config.yaml           the resolved config (token redacted); overrides.json: the Hydra overrides
    <run>/env_server.json       the environment server's settings (`kernelflow serve --config` takes it)
    <run>/<stage>/              a stage's results, submissions and transcripts
    <run>/checkpoints/epoch-N/  the trainer's checkpoint after epoch N (adapter + optimiser state)
    <run>/report/               report.md and its plots

One process at a time holds a run (a file lock); a second one is refused with a clear message.
This module writes files only; it knows nothing of MLflow or Prefect.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from flows.config import ExperimentConfig, flatten, to_container
from flows.stage_names import REPORT, epoch_stage

# Settings that do not change a run's results: where things run, how they are tracked, limits that
# only bound waiting or concurrency. Changing them continues the same run.
NON_RESULT_KEYS = (
    "dry_run", "tracking.", "env.url", "env.token", "env.startup_timeout_s", "env.max_sessions",
    "env.session_timeout_s", "eval.max_workers", "eval.cache_dir", "eval.device_index", "model.cache_dir",
    "model.device", "trainer.message_timeout_s",
    # how many processes (GPUs) share each group's rollouts: the protocol and update are the same
    "trainer.data_parallel.",
    # where evaluations run (local pool or Ray actors) never changes a verdict
    "env.eval_backend", "env.ray.",
    # evaluator speed settings change how fast a verdict comes, never what it says
    "eval.verdict_cache_size", "eval.input_cache_mb", "eval.prewarm_workers",
)
STATE_FILE = "state.json"
COMPLETED, RUNNING, FAILED = "completed", "running", "failed"


def split_settings(config: ExperimentConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """The flattened resolved config split into (result-relevant settings, NON_RESULT_KEYS settings)."""
    flat = flatten(to_container(config))

    def placement(key: str) -> bool:
        return any(key == n or (n.endswith(".") and key.startswith(n)) for n in NON_RESULT_KEYS)

    return ({k: v for k, v in flat.items() if not placement(k)}, {k: v for k, v in flat.items() if placement(k)})


def config_hash(config: ExperimentConfig) -> str:
    """sha256 over the resolved config's result-relevant settings (see NON_RESULT_KEYS)."""
    kept, _ = split_settings(config)
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


def runs_root(config: ExperimentConfig) -> Path:
    return Path(config.tracking.runs_root).expanduser().resolve()


def run_name(config: ExperimentConfig) -> str:
    return f"{config.name}-{config_hash(config)[:12]}"


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temp file + rename), so a kill never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


class RunLockedError(RuntimeError):
    """Another process is running this experiment."""


class RunDir:
    """One run's directory and its `state.json` (see the module docstring)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path).resolve()
        self.state_path = self.path / STATE_FILE
        self._lock = FileLock(str(self.path / ".lock"))

    # -- creation and lookup -----------------------------------------------------------------------

    @classmethod
    def for_config(cls, config: ExperimentConfig) -> RunDir:
        run = cls(runs_root(config) / run_name(config))
        run.path.mkdir(parents=True, exist_ok=True)
        if not run.state_path.exists():
            write_json(run.state_path, {
                "name": config.name, "config_hash": config_hash(config), "created": _now(), "status": RUNNING,
                "attempts": 0, "failure": None, "stages": {}, "mlflow": {},
            })
        return run

    @classmethod
    def find(cls, run: str, root: str | os.PathLike = "runs") -> RunDir:
        """A run from a path, or a directory name under `root`; the error lists the runs there."""
        for candidate in (Path(run), Path(root) / run):
            if (candidate / STATE_FILE).is_file():
                return cls(candidate)
        known = sorted(p.parent.name for p in Path(root).glob(f"*/{STATE_FILE}")) if Path(root).is_dir() else []
        raise FileNotFoundError(
            f"no kernelflow run at {run!r} (no {STATE_FILE}); give a run directory"
            + (f", e.g. one of: {', '.join(known)}" if known else f" (none under {Path(root).resolve()})")
        )

    @contextmanager
    def locked(self):
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise RunLockedError(
                f"{self.path} is in use by another process (lock {self.path / '.lock'}); wait for it to finish, "
                "or stop it before resuming"
            ) from None
        try:
            yield self
        finally:
            self._lock.release()

    # -- paths -------------------------------------------------------------------------------------

    def stage_dir(self, stage: str) -> Path:
        d = self.path / stage
        d.mkdir(parents=True, exist_ok=True)
        return d

    def checkpoint_dir(self, epoch: int) -> Path:
        return self.path / "checkpoints" / epoch_stage(epoch)

    @property
    def report_dir(self) -> Path:
        return self.stage_dir(REPORT)

    # -- state -------------------------------------------------------------------------------------

    def state(self) -> dict:
        return read_json(self.state_path)

    def update(self, **changes: Any) -> dict:
        state = self.state()
        state.update(changes)
        write_json(self.state_path, state)
        return state

    def stage_status(self, stage: str) -> str | None:
        return self.state()["stages"].get(stage, {}).get("status")

    def completed(self, stage: str) -> bool:
        return self.stage_status(stage) == COMPLETED

    def start_stage(self, stage: str) -> None:
        state = self.state()
        entry = state["stages"].setdefault(stage, {"attempts": 0})
        entry.update(status=RUNNING, started=_now(), attempts=entry.get("attempts", 0) + 1, error=None)
        write_json(self.state_path, state)

    def finish_stage(self, stage: str, **info: Any) -> None:
        state = self.state()
        state["stages"].setdefault(stage, {}).update(status=COMPLETED, finished=_now(), error=None, **info)
        write_json(self.state_path, state)

    def fail_stage(self, stage: str, error: str, run_failed: bool = True) -> None:
        """Mark `stage` failed with `error`; `run_failed` also marks the run (False: a side stage like rejudging)."""
        state = self.state()
        state["stages"].setdefault(stage, {}).update(status=FAILED, finished=_now(), error=error)
        if run_failed:
            state.update(status=FAILED, failure={"stage": stage, "error": error, "at": _now()})
        write_json(self.state_path, state)

    def fail_run(self, where: str, error: str) -> None:
        """Mark the run failed outside any stage (`where`: e.g. setup)."""
        self.update(status=FAILED, failure={"stage": where, "error": error, "at": _now()})

    def last_completed_epoch(self, epochs: int) -> int:
        """The highest N such that epochs 1..N are all completed (0 when none is)."""
        done = 0
        for epoch in range(1, epochs + 1):
            if not self.completed(epoch_stage(epoch)):
                break
            done = epoch
        return done

    def mlflow_ids(self) -> dict:
        return self.state().get("mlflow", {})

    def set_mlflow_ids(self, **ids: Any) -> None:
        state = self.state()
        state.setdefault("mlflow", {}).update(ids)
        write_json(self.state_path, state)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
