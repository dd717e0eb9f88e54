"""The experiment's stage names: one constant per stage, used by every module that names a stage.

A stage's name is its directory under the run (`<run>/<stage>/`), its key in `state.json`, its nested
MLflow run's name, its Prefect task run's name and the prefix of the metrics it logs on the parent
run, so renaming one here renames it everywhere. The order and the condition each stage runs under
live in the stage table (`flows/stage_table.py`); this module holds only names, so modules that read
a run's files (report, compare, rejudge) need not import Prefect.

It also holds the two MLflow tags that carry those names (`RUN_TAG`, `STAGE_TAG`): `flows/tracking.py`
writes them and the seed comparison (`flows/analysis/seed_runs.py`) reads runs back by them, without
importing the tracker.
"""

from __future__ import annotations

PROVENANCE = "provenance"
POLICY = "policy"  # builds the policy's base model when it is built here (tiny, sft); cheap otherwise
BASELINE_EVAL = "baseline_eval"
BASELINE_SAMPLED = "baseline_sampled"
TRAINED_EVAL = "trained_eval"
TRAINED_SAMPLED = "trained_sampled"
SEED_VALIDATION = "seed_validation"
REPORT = "report"
EPOCH_PREFIX = "epoch-"

RUN_TAG = "kernelflow.run"  # the run directory's name, on the parent and every stage run
STAGE_TAG = "kernelflow.stage"  # the stage's name, on its nested run

# The greedy evaluations, before and after training, and the sampled evaluation after each of them
# (when evaluation.samples > 0).
GREEDY_EVALS = (BASELINE_EVAL, TRAINED_EVAL)
SAMPLED_STAGES = {BASELINE_EVAL: BASELINE_SAMPLED, TRAINED_EVAL: TRAINED_SAMPLED}


def epoch_stage(epoch: int) -> str:
    """The stage of training epoch `epoch` (1-based): `epoch-<n>`."""
    return f"{EPOCH_PREFIX}{epoch}"
