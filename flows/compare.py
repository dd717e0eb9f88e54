"""`python -m flows.compare --experiment NAME`: compare the seeds of one MLflow experiment, before vs after training.

The command reads every seed's parent run of the experiment from MLflow (`flows/analysis/seed_runs.py`)
and writes the comparison, `compare.md`, `compare.html`, `comparison.json` and its plots, to `--out`
(`flows/analysis/comparison.py` says what each holds; docs/compare.md how to read it).

It runs as a Prefect flow (`compare_flow`: load-runs -> write-comparison) so it shows in the Prefect
UI beside the experiments, with a markdown artifact whose plots are inlined as data URIs;
`--no-prefect` does the same work without Prefect. This module is the orchestration only: the
reading, the statistics and the rendering are flows/analysis's; it never writes to MLflow.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from flows.analysis import statistics
from flows.analysis.comparison import compare
from flows.analysis.render import artifact_markdown
from flows.analysis.seed_runs import SeedRun, load_runs


def default_tracking_uri(runs_root: str = "runs") -> str:
    """The flow's embedded store (flows.tracking.tracking_uri with tracking.uri unset)."""
    return f"sqlite:///{Path(runs_root).expanduser().resolve() / 'mlflow.db'}"


def _flow():
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE

    @task(name="load-runs", cache_policy=NO_CACHE)
    def load(experiment: str, tracking_uri: str, name: str | None) -> list[SeedRun]:
        runs = load_runs(experiment, tracking_uri, name)
        print(f"{len(runs)} parent run(s) of experiment {experiment!r}: seeds {[r.seed for r in runs]}")
        return runs

    @task(name="write-comparison", cache_policy=NO_CACHE)
    def write(runs: list[SeedRun], out: str, experiment: str, resamples: int, level: float, seed: int) -> str:
        result = compare(runs, Path(out), experiment, resamples, level, seed)
        try:
            from prefect.artifacts import create_markdown_artifact

            create_markdown_artifact(key=f"compare-{_key(experiment)}", markdown=artifact_markdown(result),
                                     description=f"seed comparison of {experiment}")
        except Exception as exc:  # noqa: BLE001 - the files are the product; the artifact is a convenience
            print(f"could not publish the Prefect artifact: {exc}")
        return str(result.path)

    @flow(name="kernelflow-compare", log_prints=True, validate_parameters=False)
    def compare_flow(experiment: str, tracking_uri: str, out: str, name: str | None = None,
                     resamples: int = statistics.DEFAULT_RESAMPLES, level: float = statistics.DEFAULT_LEVEL,
                     seed: int = 0) -> str:
        """Read every seed's parent run of `experiment` from MLflow and write the comparison to `out`."""
        return write(load(experiment, tracking_uri, name), out, experiment, resamples, level, seed)

    return compare_flow


def _key(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-") or "experiment"


def main(argv: Sequence[str] | None = None) -> int:
    from flows import prefect_settings

    prefect_settings.apply()  # the entry point's Prefect defaults, before `_flow()` imports Prefect
    ap = argparse.ArgumentParser(prog="python -m flows.compare", description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", required=True, help="the MLflow experiment holding one parent run per seed")
    ap.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: sqlite:///<runs-root>/mlflow.db)")
    ap.add_argument("--runs-root", default="runs", help="where the embedded store lives when --tracking-uri is not given")
    ap.add_argument("--out", default=None, help="output directory (default: <runs-root>/compare-<experiment>)")
    ap.add_argument("--name", default=None, help="only runs whose experiment preset name (param `name`) is this")
    ap.add_argument("--resamples", type=int, default=statistics.DEFAULT_RESAMPLES)
    ap.add_argument("--level", type=float, default=statistics.DEFAULT_LEVEL)
    ap.add_argument("--seed", type=int, default=0, help="the bootstrap's random seed")
    ap.add_argument("--no-prefect", action="store_true", help="run without a Prefect flow")
    args = ap.parse_args(argv)
    uri = args.tracking_uri or default_tracking_uri(args.runs_root)
    out = Path(args.out or Path(args.runs_root) / f"compare-{_key(args.experiment)}")
    try:
        if args.no_prefect:
            path = str(compare(load_runs(args.experiment, uri, args.name), out, args.experiment, args.resamples,
                               args.level, args.seed).path)
        else:
            path = _flow()(args.experiment, uri, str(out), args.name, args.resamples, args.level, args.seed)
    except (LookupError, ValueError) as exc:
        print(f"kernelflow compare: {exc}", file=sys.stderr)
        return 1
    print(f"kernelflow compare: report {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
