"""The analysis side of the flows: what reads a run's results and renders them; never orchestration.

    results.py      per-task outcomes of an evaluation and their summaries (the numbers metrics and reports share)
    statistics.py   pass@k, avg@n, fast_p and percentile bootstrap intervals
    report.py       one run's report from its run directory: report.md, report.html, plots, tasks.csv
    seed_runs.py    the seed comparison's input: every seed's parent run of an MLflow experiment, read back
    comparison.py   the seed comparison rendered: compare.md, compare.html, comparison.json, plots
    render.py       what the report and the comparison both render with: table cells, figures, the HTML
                    page and plots inlined for Prefect

These modules read files and MLflow and write files. They start no flow, run no stage, log nothing to
MLflow and never import Prefect or the orchestration modules (the experiment flow, its stages, the
tracker, the command lines): an import-linter contract in pyproject.toml holds that. They may import
the config (`flows.config`: a report reads the run's typed config), the run directory
(`flows.run_dir`), the stage names (`flows.stage_names`) and `flows.epoch` for `read_updates`, the
reader of updates.json that lives beside its writer. The orchestration publishes what they render:
the report stage (flows/stages.py, flows/artifacts.py) and `python -m flows.compare` (flows/compare.py).
"""
