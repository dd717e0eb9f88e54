"""Per-task outcomes, the pilot's table, fast_p and the report, from stored stage results (no model, no server).

Records are written as the stages write them (`TaskEvalResult.to_dict()` / `SampledTaskResult.to_dict()`)
and read back as the typed results; episodes of three attempts flow through to the report's tables.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from flows.analysis import results
from flows.analysis.render import artifact_markdown, data_uri, policy_note
from flows.analysis.report import write_report
from flows.artifacts import artifact_key, publish_report
from flows.config import to_experiment_config
from flows.run_dir import RunDir, write_json
from kernelflow.train.evaluation import SampledTaskResult, TaskEvalResult
from kernelflow.train.metrics import UpdateMetrics
from tests.flows.conftest import compose_config


def turn(n, status, reward=0.0, speedup=None, runtime=None, answer="x"):
    verdict = {"status": status, "speedup_vs_eager": speedup, "runtime_ms": runtime, "roofline_fraction": None}
    return {"turn": n, "status": status, "correct": status == "ok", "reward": reward, "runtime_ms": runtime,
            "roofline_fraction": None, "completion_tokens": 10, "truncated": False, "answer": answer,
            "feedback": "", "verdict": verdict}


def update(epoch, n, mean, std):
    """An `UpdateMetrics.to_dict()` record with the numbers the report reads, zeros elsewhere."""
    record = {f.name: 0 for f in dataclasses.fields(UpdateMetrics)}
    record.update(correct_rate_per_turn=[], group_size_per_turn=[], status_counts={}, samples=[], estimator="dr_grpo",
                  credit="episode", task_id="19_ReLU", epoch=epoch, update=n, reward_mean=mean, reward_std=std)
    return record


def record(task_id, *turns):
    return {"task_id": task_id, "seed": 0, "turns": list(turns)}


RECORDS = [
    record("19_ReLU", turn(1, "ok", 2.5, speedup=1.5, runtime=1.0)),               # first try, fast
    record("20_LeakyReLU", turn(1, "incorrect"), turn(2, "ok", 0.9, speedup=1.1)),  # after feedback, a bit fast
    record("23_Softmax", turn(1, "no_code"), turn(2, "compile_error")),             # never
    record("25_Swish", turn(1, "ok", 0.3)),                                          # correct, untimed
]
GROUPS = {"train": ("19_ReLU", "20_LeakyReLU"), "reserved": ("25_Swish",), "heldout": ("23_Softmax",)}
TYPED = [TaskEvalResult.from_dict(r) for r in RECORDS]


def test_results_round_trip_through_their_records():
    for r in TYPED:
        assert TaskEvalResult.from_dict(r.to_dict()) == r
        assert r.to_dict()["correct"] == r.correct and r.to_dict()["first_correct"] == r.first_correct
    s = SampledTaskResult.from_dict(SAMPLED[0])
    assert SampledTaskResult.from_dict(s.to_dict()) == s and (s.samples, s.first_correct, s.correct) == (4, 1, 2)


def test_task_outcome():
    o = results.outcomes(TYPED)
    assert (o["19_ReLU"]["turn1_correct"], o["19_ReLU"]["turn2_correct"]) == (True, True)
    assert (o["20_LeakyReLU"]["turn1_correct"], o["20_LeakyReLU"]["turn2_correct"]) == (False, True)
    assert o["20_LeakyReLU"]["speedup_vs_eager"] == 1.1 and o["20_LeakyReLU"]["solving_turn"] == 2
    assert o["23_Softmax"]["turn2_correct"] is False and o["23_Softmax"]["runtime_ms"] is None
    assert o["19_ReLU"]["reward"] == 2.5


def test_group_counts_and_fast_p():
    o = results.outcomes(TYPED)
    counts = results.group_counts(o, GROUPS)
    assert counts["train"] == {"tasks": 2, "first": 1, "correct": 2}
    assert counts["overall"] == {"tasks": 4, "first": 2, "correct": 3}
    assert results.fast_p(o, 0.0) == pytest.approx(3 / 4)  # every correct task
    assert results.fast_p(o, 1.0) == pytest.approx(2 / 4)  # untimed correct tasks are not fast
    assert results.fast_p(o, 1.2) == pytest.approx(1 / 4)


def test_task_metrics_name_every_number():
    m = results.task_metrics(results.task_outcome(TYPED[2]), prefix="trained_eval/")
    assert set(m) == {f"trained_eval/23_Softmax/{k}" for k in results.OUTCOME_KEYS}
    assert m["trained_eval/23_Softmax/turn1_correct"] == 0.0 and m["trained_eval/23_Softmax/runtime_ms"] is None


def test_report_from_stored_results(tmp_path):
    config = to_experiment_config(compose_config(f"tracking.runs_root={tmp_path}"))
    run = RunDir.for_config(config)
    before = [record(t, turn(1, "no_code"), turn(2, "no_code")) for t in config.tasks.all]
    after = RECORDS + [record(t, turn(1, "no_code"), turn(2, "no_code")) for t in config.tasks.all
                       if t not in {r["task_id"] for r in RECORDS}]
    write_json(run.stage_dir("baseline_eval") / "results.json", before)
    write_json(run.stage_dir("trained_eval") / "results.json", after)
    write_json(run.stage_dir("epoch-1") / "updates.json",
               [update(1, u, 0.1 * u, 0.05) for u in range(1, 5)])
    write_json(run.stage_dir("seed_validation") / "validation.json",
               {"seeds": [1000, 1001], "shape": "small", "solved": 3, "validated": 2,
                "tasks": {"19_ReLU": {"correct": 2, "passed": True}, "20_LeakyReLU": {"correct": 1, "passed": False},
                          "25_Swish": {"correct": 2, "passed": True}}})
    rendered = write_report(run, config)
    text = rendered.path.read_text()
    # the smoke policy is the reduced SFT policy: the report says so in the note's one wording
    assert f"> **Note on the policy:** this run's policy is {policy_note('sft')}." in text and policy_note("tiny") not in text
    # each group row says which attempts it counts, and the change after - before
    assert "| train | its first or second attempt is correct | 4 | 0 | 2 | +2 |" in text
    assert "| held-out | its first or second attempt is correct | 3 | 0 | 0 | 0 |" in text
    assert "| **overall** | **its first attempt is correct** | 10 | 0 | 2 | +2 |" in text
    assert "| overall | its first or second attempt is correct | 10 | 0 | 3 | +3 |" in text
    assert "| 19_ReLU | train | no_code / no_code | ok | 0.000 | 2.500 | +2.500 | 1.0000 | — | 1.50 | 2/2 |" in text
    assert "| 21_Sigmoid | train | no_code / no_code | no_code / no_code | 0.000 | 0.000 | 0 |" in text
    # the line under the per-task table reads `a / b` and the statuses shown, and only those
    legend = next(line for line in text.splitlines() if line.startswith("Statuses read"))
    assert "*first attempt / second attempt*" in legend and "`incorrect / compile_error`" in legend
    for status in ("ok", "incorrect", "compile_error", "no_code"):
        assert f"`{status}`: " in legend
    assert "`timeout`: " not in legend
    assert text.index("| 88_MinGPTNewGelu |") < text.index("Statuses read") < text.index("## fast_p")
    assert "| 1.2 | 0.00 | 0.10 |" in text
    assert "2 of 3 solved task(s)" in text
    for png in ("reward_per_update.png", "per_task_before_after.png"):
        assert (run.report_dir / png).stat().st_size > 1000
    assert rendered.metrics["report/fast_0/after"] == pytest.approx(0.3)
    assert_plots_embedded(rendered, ("reward_per_update.png", "per_task_before_after.png"))


def assert_plots_embedded(rendered, pngs):
    """report.md links the plots; the Prefect artifact's markdown and report.html carry each one's bytes."""
    base = rendered.path.parent
    html = (base / "report.html").read_text(encoding="utf-8")
    artifact = artifact_markdown(rendered)
    for png in pngs:
        assert f"]({png})" in rendered.path.read_text()  # on disk the relative link is right
        uri = data_uri(base / png)
        assert f"]({uri})" in artifact and f'src="{uri}"' in html
    assert "data:image/png;base64," not in rendered.markdown


def test_publish_report_sends_the_markdown_with_its_plots(tmp_path, monkeypatch):
    import prefect.artifacts

    sent = {}
    monkeypatch.setattr(prefect.artifacts, "create_markdown_artifact", lambda **kw: sent.setdefault("markdown", kw))
    monkeypatch.setattr(prefect.artifacts, "create_table_artifact", lambda **kw: sent.setdefault("table", kw))
    config = to_experiment_config(compose_config(f"tracking.runs_root={tmp_path}"))
    run = RunDir.for_config(config)
    for stage in ("baseline_eval", "trained_eval"):
        write_json(run.stage_dir(stage) / "results.json", [record(t, turn(1, "no_code")) for t in config.tasks.all])
    rendered = write_report(run, config)
    publish_report(rendered, "Smoke-1")
    assert sent["markdown"]["key"] == "kernelflow-report-smoke-1"
    assert sent["markdown"]["markdown"] == artifact_markdown(rendered)
    assert data_uri(run.report_dir / "per_task_before_after.png") in sent["markdown"]["markdown"]
    assert len(sent["table"]["table"]) == len(config.tasks.all)


def test_artifact_keys_are_prefect_safe():
    assert artifact_key("kernelflow-report-Smoke_1.2-abc") == "kernelflow-report-smoke-1-2-abc"


def sampled(task_id, *episodes):
    """A sampled evaluation's record: each episode given as its turns' statuses."""
    return {"task_id": task_id, "seed": 0, "samples": len(episodes),
            "episodes": [record(task_id, *(turn(i + 1, st, 0.3 if st == "ok" else 0.0) for i, st in enumerate(ep)))
                         for ep in episodes]}


# 19_ReLU: 4 episodes, 1 correct first, 2 by the 2nd attempt; 23_Softmax: 4 episodes, none correct
SAMPLED = [
    sampled("19_ReLU", ["ok"], ["incorrect", "ok"], ["no_code", "no_code"], ["incorrect", "compile_error"]),
    sampled("23_Softmax", *[["no_code", "no_code"]] * 4),
]


def test_sample_outcomes_count_the_episodes():
    o = results.sample_outcomes([SampledTaskResult.from_dict(r) for r in SAMPLED])
    assert o["19_ReLU"] == {"task_id": "19_ReLU", "samples": 4, "samples_correct": 1, "samples_turn2_correct": 2,
                            "samples_reward_mean": pytest.approx(0.6 / 4)}
    assert (o["23_Softmax"]["samples_correct"], o["23_Softmax"]["samples_turn2_correct"]) == (0, 0)
    m = results.sample_task_metrics(o["19_ReLU"], "trained_sampled/")
    assert set(m) == {f"trained_sampled/19_ReLU/{k}" for k in results.SAMPLE_KEYS}


def test_sampled_rates_per_group_by_hand():
    assert results.pass_ks(4) == [1, 2, 4] and results.pass_ks(6) == [1, 2, 4, 6] and results.pass_ks(1) == [1]
    o = results.sample_outcomes([SampledTaskResult.from_dict(r) for r in SAMPLED])
    # 19_ReLU first attempt (4, 1): pass@1 = 1/4, pass@2 = 1 - C(3,2)/C(4,2) = 1/2, pass@4 = 1
    # by 2nd (4, 2): pass@1 = 1/2, pass@2 = 1 - C(2,2)/C(4,2) = 5/6; 23_Softmax: 0 everywhere
    r = results.sampled_rates(o, ["19_ReLU", "23_Softmax"])
    assert r["pass_at_1"] == pytest.approx(1 / 8) and r["pass_at_2"] == pytest.approx(1 / 4)
    assert r["pass_at_4"] == pytest.approx(1 / 2) and r["avg_at_n"] == pytest.approx(1 / 8)
    assert r["pass_at_1/by_2nd"] == pytest.approx(1 / 4) and r["pass_at_2/by_2nd"] == pytest.approx(5 / 12)
    assert results.sampled_rates(o, ["25_Swish"]) == {}  # no samples: no numbers, not zeros
    metrics = results.sample_summary_metrics(o, GROUPS, "trained_sampled/")
    assert metrics["trained_sampled/group/train/pass_at_2"] == pytest.approx(1 / 2)
    assert metrics["trained_sampled/group/heldout/pass_at_4"] == 0.0
    assert metrics["trained_sampled/group/overall/pass_at_4"] == pytest.approx(1 / 2)
    assert "trained_sampled/group/reserved/pass_at_1" not in metrics
    assert all(re.fullmatch(r"[/\w.\- :]+", k) for k in metrics)  # MLflow's allowed metric-name characters


def test_report_shows_the_sampled_evaluation(tmp_path):
    config = to_experiment_config(compose_config(f"tracking.runs_root={tmp_path}", "evaluation.samples=4"))
    run = RunDir.for_config(config)
    for stage in ("baseline_eval", "trained_eval"):
        write_json(run.stage_dir(stage) / "results.json", [record(t, turn(1, "no_code")) for t in config.tasks.all])
    write_json(run.stage_dir("baseline_sampled") / "results.json", [sampled(t, *[["no_code"]] * 4) for t in config.tasks.all])
    write_json(run.stage_dir("trained_sampled") / "results.json",
               SAMPLED + [sampled(t, *[["no_code"]] * 4) for t in config.tasks.all if t not in ("19_ReLU", "23_Softmax")])
    rendered = write_report(run, config)
    text = rendered.markdown
    assert "## Sampled evaluation (4 episode(s) per task at T 0.8, top_p 1.0)" in text
    # train: 19_ReLU and three tasks without success: pass@1 after = (1/4)/4, pass@4 after = 1/4
    assert "| train | 0.00 | 0.06 | 0.00 | 0.25 | 0.00 | 0.06 | 0.00 | 0.12 |" in text
    assert "| 19_ReLU | train | 0/4 | 1/4 | 0/4 | 2/4 |" in text
    assert rendered.metrics["report/sampled/overall/pass_at_1/after"] == pytest.approx(0.25 / 10)
    assert "Roles: **train**: trained on" in text
    without = to_experiment_config(compose_config(f"tracking.runs_root={tmp_path / 'b'}"))
    run_b = RunDir.for_config(without)
    for stage in ("baseline_eval", "trained_eval"):
        write_json(run_b.stage_dir(stage) / "results.json", [record(t, turn(1, "no_code")) for t in without.tasks.all])
    assert "Sampled evaluation" not in write_report(run_b, without).markdown


UPDATES = [UpdateMetrics.from_dict(update(1, 1, 0.1, 0.4)),   # mean - std < 0: clipped
           UpdateMetrics.from_dict(update(1, 2, 0.5, 0.2)),
           UpdateMetrics.from_dict(update(2, 3, 0.2, 0.6))]


def test_reward_band_stays_at_or_above_zero_and_the_title_promises_what_is_drawn():
    import matplotlib.pyplot as plt

    from flows.analysis.report import reward_figure

    fig = reward_figure(UPDATES)
    ax = fig.axes[0]
    (band,) = ax.collections  # the fill_between
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == 0.0 and ys.max() == pytest.approx(0.8)
    assert ax.get_ylim()[0] == 0.0
    assert "epoch" not in ax.get_title()
    labels = ax.get_legend_handles_labels()[1]
    assert labels.count("epoch boundary") == 1  # two epochs: one boundary, drawn and named
    assert [line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == "--"] == [2.5]
    plt.close(fig)
    one_epoch = reward_figure([u for u in UPDATES if u.epoch == 1])
    assert "epoch boundary" not in one_epoch.axes[0].get_legend_handles_labels()[1]
    assert not [line for line in one_epoch.axes[0].lines if line.get_linestyle() == "--"]
    plt.close(one_epoch)


def test_tasks_without_reward_show_their_status_instead_of_an_empty_slot():
    import matplotlib.pyplot as plt

    from flows.analysis.report import before_after_figure

    rows = [{"task": "19_ReLU", "before": "incorrect / compile_error", "after": "ok", "reward_before": 0.0,
             "reward_after": 2.5},
            {"task": "23_Softmax", "before": "—", "after": "no_code / timeout", "reward_before": None,
             "reward_after": 0.0}]
    fig = before_after_figure(rows)
    ax = fig.axes[0]
    texts = sorted((round(t.get_position()[0], 1), t.get_text()) for t in ax.texts)
    # before bars sit at x - 0.2, after bars at x + 0.2: each side without reward names its last status
    assert texts == [(-0.2, "compile_error"), (0.8, "not run"), (1.2, "timeout")]
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert sorted(round(p.get_x() + p.get_width() / 2, 1) for p in hatched) == [-0.2, 0.8, 1.2]
    assert all(p.get_height() > 0 for p in hatched)  # a visible marker, not a zero-height bar
    assert ax.get_ylim()[1] > 2.5
    plt.close(fig)


def test_three_turn_results_flow_through_to_the_report(tmp_path):
    """env.max_turns=3, trainer.eval_attempts=3: a task solved at the third attempt counts as correct (by the
    3rd), its metrics name all three attempts, and the report's tables show the three statuses."""
    config = to_experiment_config(compose_config(f"tracking.runs_root={tmp_path}", "env.max_turns=3",
                                                 "trainer.eval_attempts=3"))
    third = record("20_LeakyReLU", turn(1, "incorrect"), turn(2, "compile_error"), turn(3, "ok", 1.2, speedup=1.3))
    second = record("19_ReLU", turn(1, "no_code"), turn(2, "ok", 0.8))
    never = record("21_Sigmoid", turn(1, "no_code"), turn(2, "no_code"), turn(3, "incorrect"))
    typed = [TaskEvalResult.from_dict(r) for r in (third, second, never)]
    o = results.outcomes(typed, attempts=3)
    assert [o["20_LeakyReLU"][f"turn{k}_correct"] for k in (1, 2, 3)] == [False, False, True]
    assert [o["19_ReLU"][f"turn{k}_correct"] for k in (1, 2, 3)] == [False, True, True]  # ended once correct
    assert o["20_LeakyReLU"]["correct"] and o["20_LeakyReLU"]["solving_turn"] == 3
    assert o["20_LeakyReLU"]["speedup_vs_eager"] == 1.3 and not o["21_Sigmoid"]["correct"]
    metrics = results.task_metrics(o["20_LeakyReLU"], prefix="trained_eval/")
    assert metrics["trained_eval/20_LeakyReLU/turn3_correct"] == 1.0 and set(metrics) == {
        f"trained_eval/20_LeakyReLU/{k}" for k in results.outcome_keys(3)}
    assert results.group_counts(o, {"train": ("19_ReLU", "20_LeakyReLU", "21_Sigmoid")})["train"] == {
        "tasks": 3, "first": 0, "correct": 2}
    run = RunDir.for_config(config)
    before = [record(t, turn(1, "no_code"), turn(2, "no_code"), turn(3, "no_code")) for t in config.tasks.all]
    after = [third, second, never] + [record(t, turn(1, "no_code"), turn(2, "no_code"), turn(3, "no_code"))
                                      for t in config.tasks.all if t not in {"19_ReLU", "20_LeakyReLU", "21_Sigmoid"}]
    write_json(run.stage_dir("baseline_eval") / "results.json", before)
    write_json(run.stage_dir("trained_eval") / "results.json", [TaskEvalResult.from_dict(r).to_dict() for r in after])
    episodes = [[{"turns": [turn(1, "incorrect"), turn(2, "incorrect"), turn(3, "ok", 0.3)]}], [{"turns": [turn(1, "no_code")]}]]
    write_json(run.stage_dir("trained_sampled") / "results.json",
               [{"task_id": t, "seed": 0, "episodes": [{"task_id": t, **e} for e in episodes[t != "20_LeakyReLU"]]}
                for t in config.tasks.all])
    text = write_report(run, config).markdown
    assert "## Correct tasks before and after training (greedy, 3 attempts)" in text
    assert "| train | one of its first 3 attempts is correct | 4 | 0 | 2 | +2 |" in text
    assert "| **overall** | **its first attempt is correct** | 10 | 0 | 0 | 0 |" in text
    assert ("| 20_LeakyReLU | train | no_code / no_code / no_code | incorrect / compile_error / ok | 0.000 | 1.200 "
            "| +1.200 |") in text
    assert "*first attempt / second attempt / ...*" in text
    assert "| 20_LeakyReLU | train | — | 0/1 | — | 1/1 |" in text  # sampled: correct at the third attempt
    assert "correct by 3rd, before" in text
