"""The experiment pipeline: Hydra configs -> one Prefect flow -> MLflow tracking -> a report.

Entry points: `python -m flows.experiment [overrides]` (flows/experiment.py), `python -m flows.rejudge
RUN` (flows/rejudge.py) and `python -m flows.compare` (flows/compare.py). This is the only layer that
knows Hydra and Prefect; the library layers get their own dataclasses from `flows.config`, and no
module of `kernelflow` imports this package.

Two sides: the top-level modules orchestrate (the flow and its stages, tracking, the run directory,
the command lines), and `flows/analysis/` reads results and renders them (outcomes, statistics, the
run's report, the seed comparison, the shared renderer). The orchestration imports the analysis,
never the reverse (an import-linter contract in pyproject.toml).

Importing this package (or any module of it) has no side effects: the Prefect defaults the entry
points need are set by those entry points, before Prefect is imported (flows/prefect_settings.py).
"""
