"""The seed comparison (flows/compare.py, flows/analysis/) on small synthetic parent runs in a temporary MLflow store.

Running three smoke experiments would take minutes, so each "seed" here is a parent run made the way
the flow makes it: `Tracker` creates it, the config is logged as params the way the provenance stage
does (`split_settings`), and both evaluations' metrics are computed by `flows.analysis.results` from records
shaped like `results.json` and logged as `stages.eval_stage` does (`Tracker.log_stage_metrics`: per
task on the stage's nested run, summaries on the parent); the compile speedups are on the parent,
as runs logged before that carried per-task values. The numbers the report must show are worked
out by hand in the comments.
"""

from __future__ import annotations

import json

import pytest

from flows.analysis.comparison import compare, render
from flows.analysis.render import artifact_markdown, data_uri
from flows.analysis.results import outcomes, sample_task_metrics, summary_metrics, task_metrics
from flows.analysis.seed_runs import SeedRun, load_runs, task_groups
from flows.compare import main
from flows.config import to_experiment_config
from flows.run_dir import RunDir, run_name, split_settings
from flows.tracking import Tracker
from kernelflow.train.evaluation import TaskEvalResult
from tests.flows.conftest import compose_config

EXPERIMENT = "seeds-test"

# seed -> stage -> task -> (turn1_correct, turn2_correct, speedup_vs_eager, roofline_fraction); other tasks fail
CORRECT = {
    42: {"baseline_eval": {"19_ReLU": (False, True, 0.5, 0.1)},
         "trained_eval": {"19_ReLU": (True, True, 1.5, 0.5), "20_LeakyReLU": (True, True, 0.9, 0.3)}},
    43: {"baseline_eval": {},
         "trained_eval": {"19_ReLU": (False, True, 1.3, 0.4)}},
    44: {"baseline_eval": {},
         "trained_eval": {"19_ReLU": (True, True, 1.1, 0.2), "23_Softmax": (True, True, 2.0, 0.6)}},
}
COMPILE = {44: {"19_ReLU": 0.8, "23_Softmax": 1.5}}  # only seed 44's trained evaluation timed torch.compile
# (n, c first attempt, c by the 2nd attempt); every other task: (4, 0, 0); seed 44 made no sampled evaluation
SAMPLES = {42: {"19_ReLU": (4, 2, 3)}, 43: {"19_ReLU": (4, 2, 3)}}


def _turn(turn: int, correct: bool, speedup: float | None = None, roofline: float | None = None) -> dict:
    verdict = {"speedup_vs_eager": speedup, "roofline_fraction": roofline, "runtime_ms": 0.01} if correct else {}
    return {"turn": turn, "status": "ok" if correct else "wrong_output", "correct": correct,
            "reward": 1.0 if correct else 0.0, "runtime_ms": None, "roofline_fraction": None, "completion_tokens": 1,
            "truncated": False, "answer": "", "feedback": "", "verdict": verdict}


def _records(cfg, table: dict) -> list[TaskEvalResult]:
    recs = []
    for tid in cfg.tasks.all:
        if tid in table:
            first, _, s, r = table[tid]
            turns = [_turn(1, True, s, r)] if first else [_turn(1, False), _turn(2, True, s, r)]
        else:
            turns = [_turn(1, False), _turn(2, False)]
        recs.append(TaskEvalResult.from_dict({"task_id": tid, "turns": turns}))
    return recs


def _log_seed(tmp_path, seed: int) -> str:
    cfg = to_experiment_config(compose_config(
        f"trainer.seed={seed}", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.runs_root={tmp_path}/runs",
        f"tracking.experiment={EXPERIMENT}"))
    tracker = Tracker(cfg, RunDir.for_config(cfg))
    tracker.log_params(tracker.parent_id, split_settings(cfg)[0])           # as the provenance stage
    for stage in ("baseline_eval", "trained_eval"):
        outs = outcomes(_records(cfg, CORRECT[seed][stage]))
        metrics: dict = {}
        for o in outs.values():
            metrics.update(task_metrics(o))
        metrics.update(summary_metrics(outs, cfg.tasks.groups))
        # as eval_stage: per-task values on the stage's nested run, the summaries also on the parent
        tracker.log_stage_metrics(tracker.stage_run(stage), stage, metrics, cfg.tasks.all)
    # as runs logged before that: per-task values on the parent (compare reads both)
    extra = {f"trained_eval/{t}/speedup_vs_compile": s for t, s in COMPILE.get(seed, {}).items()}
    if seed in SAMPLES:
        sampled = {}
        for tid in cfg.tasks.all:
            n, c, c2 = SAMPLES[seed].get(tid, (4, 0, 0))
            outcome = {"task_id": tid, "samples": n, "samples_correct": c, "samples_turn2_correct": c2,
                       "samples_reward_mean": 0.1}
            sampled.update(sample_task_metrics(outcome))
        tracker.log_stage_metrics(tracker.stage_run("trained_sampled"), "trained_sampled", sampled,
                                  cfg.tasks.all)  # as sampled_eval_stage
    tracker.log_metrics(tracker.parent_id, extra)
    tracker.finish()
    return tracker.parent_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    ids = [_log_seed(tmp, s) for s in CORRECT]
    return tmp, f"sqlite:///{tmp}/mlflow.db", ids


def test_each_seed_is_its_own_run_under_one_experiment():
    # what `python -m flows.experiment -m trainer.seed=42,43,44` relies on: the seed is a result setting
    cfgs = [to_experiment_config(compose_config(f"trainer.seed={s}", "tracking.experiment=x")) for s in (42, 43)]
    assert run_name(cfgs[0]) != run_name(cfgs[1])
    assert cfgs[0].tracking.experiment == cfgs[1].tracking.experiment == "x"


def test_load_runs_reads_one_parent_per_seed(store):
    _, uri, ids = store
    runs = load_runs(EXPERIMENT, uri)
    assert [r.seed for r in runs] == [42, 43, 44]
    assert sorted(r.run_id for r in runs) == sorted(ids)
    assert all(r.status == "FINISHED" for r in runs)
    with pytest.raises(LookupError, match="no MLflow experiment"):
        load_runs("nope", uri)


def test_comparison_numbers(store):
    tmp, uri, _ = store
    out = tmp / "report"
    result = compare(load_runs(EXPERIMENT, uri), out, EXPERIMENT, resamples=2000, level=0.9, seed=0)
    m = result.numbers["metrics"]

    def est(key, side="after"):
        return m[key][side]["estimate"]

    assert result.numbers["config_differences"] == []
    assert [r["seed"] for r in result.numbers["runs"]] == [42, 43, 44]
    # 19_ReLU by the 2nd attempt: before [1, 0, 0], after [1, 1, 1]; paired differences [0, 1, 1]
    relu = m["task/19_ReLU/turn2_correct"]
    assert relu["before"]["estimate"] == pytest.approx(1 / 3)
    assert (relu["after"]["estimate"], relu["after"]["low"], relu["after"]["high"]) == (1.0, 1.0, 1.0)
    assert relu["difference"]["estimate"] == pytest.approx(2 / 3)
    # resampled means of [0, 1, 1]: 0 w.p. 1/27 (< 5%), 1 w.p. 8/27 (> 5%), so the 90% interval is [1/3, 1]
    assert relu["difference"]["low"] == pytest.approx(1 / 3) and relu["difference"]["high"] == 1.0
    assert est("task/19_ReLU/turn1_correct") == pytest.approx(2 / 3)           # first attempt: seeds 42 and 44
    # train group (4 tasks): after [2/4, 1/4, 1/4], before [1/4, 0, 0]
    assert est("group/train/turn2_correct") == pytest.approx(1 / 3)
    assert est("group/train/turn2_correct", "before") == pytest.approx(1 / 12)
    assert est("group/heldout/turn2_correct") == pytest.approx(1 / 9)           # 23_Softmax in seed 44 only
    assert est("group/overall/turn2_correct") == pytest.approx((0.2 + 0.1 + 0.2) / 3)
    # fast_p over all ten tasks: fast_0 = correct fraction; fast_1 after [1, 1, 2]/10; fast_1.2 after [1, 1, 1]/10
    assert est("fast_0/eager") == pytest.approx(est("group/overall/turn2_correct"))
    assert est("fast_1/eager") == pytest.approx(4 / 30)
    assert est("fast_1.2/eager") == pytest.approx(0.1)
    assert (m["fast_1.2/eager"]["after"]["low"], m["fast_1.2/eager"]["after"]["high"]) == (0.1, 0.1)
    assert est("fast_0/eager", "before") == pytest.approx(1 / 30)
    assert est("fast_1/eager", "before") == 0.0
    # against torch.compile: only seed 44 measured it (0.8 and 1.5): fast_1 = 1/10 from one seed
    assert m["fast_1/compile"]["per_seed"]["after"] == [None, None, 0.1]
    assert est("fast_1/compile") == pytest.approx(0.1) and m["fast_1/compile"]["after"]["n"] == 1
    # seed 44 counts as timing compile in both stages; before training nothing was correct there: 0
    assert m["fast_1/compile"]["per_seed"]["before"] == [None, None, 0.0]
    # mean roofline fraction of correct kernels: after [0.4, 0.4, 0.4] (exact), before 0.1 from seed 42 only
    assert (m["roofline_fraction"]["after"]["low"], m["roofline_fraction"]["after"]["high"]) == pytest.approx((0.4, 0.4))
    assert est("roofline_fraction", "before") == pytest.approx(0.1)
    # sampled: 19_ReLU (4, 2), nine tasks (4, 0), seeds 42 and 43: pass@1 = 0.5/10, pass@2 = (5/6)/10, pass@4 = 1/10
    assert est("sampled/overall/pass_at_1") == pytest.approx(0.05)
    assert est("sampled/overall/pass_at_2") == pytest.approx(5 / 60)
    assert est("sampled/overall/pass_at_4") == pytest.approx(0.1)
    assert m["sampled/overall/pass_at_4"]["per_seed"]["after"] == pytest.approx([0.1, 0.1, None])
    assert est("sampled/overall/avg_at_n") == pytest.approx(0.05)
    # by the 2nd attempt 19_ReLU has (4, 3): pass@1 = 0.75/10, pass@2 = 1 - C(1,2)/C(4,2) = 1, so 1/10
    assert est("sampled/overall/pass_at_1/by_2nd") == pytest.approx(0.075)
    assert est("sampled/overall/pass_at_2/by_2nd") == pytest.approx(0.1)
    # per group: train holds 19_ReLU among 4 tasks, held-out none
    assert est("sampled/train/pass_at_1") == pytest.approx(0.5 / 4)
    assert est("sampled/heldout/pass_at_4") == 0.0
    assert m["sampled/overall/pass_at_1"]["before"]["n"] == 0  # no run sampled before training

    # files: markdown with the same numbers, the json, three plots
    assert json.loads((out / "comparison.json").read_text())["metrics"]["fast_1/eager"]["after"]["estimate"] == \
        pytest.approx(4 / 30)
    for png in ("group_success.png", "task_success.png", "fast_p.png"):
        assert (out / png).stat().st_size > 1000
    md = (out / "compare.md").read_text()
    assert "over 3 seed(s)" in md
    # the Prefect artifact's markdown and compare.html carry every plot; compare.md links them
    html, artifact = (out / "compare.html").read_text(encoding="utf-8"), artifact_markdown(result)
    for png in ("group_success.png", "task_success.png", "fast_p.png"):
        uri = data_uri(out / png)
        assert f"]({png})" in md and f"]({uri})" in artifact and f'src="{uri}"' in html
    # the smoke preset's policy is the reduced SFT policy (conf/model/sft_small.yaml)
    assert result.numbers["policy_sources"] == ["sft"] and "pre-trained here on a synthetic corpus" in md
    assert not result.numbers["tiny"] and "tiny random model" not in md
    assert ("| 19_ReLU | train | 0.00 [0.00, 0.00] | 0.67 [0.33, 1.00] | 0.33 [0.00, 0.67] | 1.00 [1.00, 1.00] "
            "| 0.67 [0.33, 1.00] |") in md
    assert "| fast_1.2 vs eager | 0.00 [0.00, 0.00] | 0.10 [0.10, 0.10] | 0.10 [0.10, 0.10] |" in md
    assert "| fast_1 vs torch.compile | 0.00 (1 of 3 seeds) | 0.10 (1 of 3 seeds) | 0.10 (1 of 3 seeds) |" in md
    assert "| mean roofline fraction | 0.10 (1 of 3 seeds) | 0.40 [0.40, 0.40] | 0.30 (1 of 3 seeds) |" in md
    assert "| pass@2 | — | 0.08 [0.08, 0.08] (2 of 3 seeds) | — |" in md
    assert "| pass@1 by 2nd | — | 0.07 [0.07, 0.07] (2 of 3 seeds) | — |" in md
    assert "| train: pass@1 | — | 0.12 [0.12, 0.12] (2 of 3 seeds) | — |" in md
    # the note follows the runs' policy source
    tiny = render({**result.numbers, "tiny": True, "policy_sources": ["tiny"]})
    assert "synthetic corpus" not in tiny and "tiny random model" in tiny


def test_groups_include_the_families_when_a_run_names_them(tmp_path):
    cfg = to_experiment_config(compose_config("tasks=families", f"tracking.runs_root={tmp_path}"))
    params = split_settings(cfg)[0]
    run = SeedRun("r", "families-run", "FINISHED", 42, {k: str(v) for k, v in params.items()}, {})
    groups = task_groups([run])
    assert list(groups) == ["train", "reserved", "heldout", "families"]
    assert groups["families"] == cfg.tasks.families and len(groups["families"]) >= 8
    pilot = to_experiment_config(compose_config(f"tracking.runs_root={tmp_path}"))
    run.params = {k: str(v) for k, v in split_settings(pilot)[0].items()}
    assert list(task_groups([run])) == ["train", "reserved", "heldout"]  # an empty families group is left out

def test_command_writes_the_report_and_names_a_missing_experiment(store, tmp_path, capsys):
    _, uri, _ = store
    assert main(["--experiment", EXPERIMENT, "--tracking-uri", uri, "--out", str(tmp_path / "cli"), "--resamples",
                 "200", "--no-prefect"]) == 0
    assert (tmp_path / "cli" / "compare.md").is_file()
    assert main(["--experiment", "nope", "--tracking-uri", uri, "--no-prefect"]) == 1
    assert "no MLflow experiment 'nope'" in capsys.readouterr().err
