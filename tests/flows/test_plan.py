"""`dry_run=true` prints the plan without loading anything; the pilot's numbers are the published ones."""

from __future__ import annotations

import subprocess
import sys

from flows.config import to_experiment_config
from flows.plan import experiment_plan, stages
from tests.flows.conftest import ROOT, compose_config


def test_pilot_plan_counts():
    plan = experiment_plan(to_experiment_config(compose_config("experiment=pilot")))
    assert (plan["episodes"], plan["training_submissions"], plan["updates"]) == (64, 128, 16)
    assert plan["evaluation_submissions_max"] == 40  # 10 tasks x 2 attempts, before and after
    assert plan["validation_submissions_max"] == 50  # 10 tasks x 5 extra seeds at most
    assert plan["training_tokens_max"] == 128 * 2048
    assert {g: len(ids) for g, ids in plan["tasks"].items()} == {"train": 4, "reserved": 3, "heldout": 3}


def test_stages_follow_the_protocol():
    config = to_experiment_config(compose_config("experiment=pilot"))
    assert stages(config) == ["provenance", "policy", "baseline_eval", "epoch-1", "epoch-2", "epoch-3", "epoch-4",
                              "trained_eval", "seed_validation", "report"]
    no_validation = to_experiment_config(compose_config("experiment=pilot", "validation=none"))
    assert "seed_validation" not in stages(no_validation)


def test_sampled_evaluation_and_families_in_the_plan():
    config = to_experiment_config(compose_config("experiment=pilot", "tasks=families", "evaluation.samples=8",
                                                 "evaluation.attempts=1"))
    names = stages(config)
    assert names[:4] == ["provenance", "policy", "baseline_eval", "baseline_sampled"]
    assert names[names.index("trained_eval") + 1] == "trained_sampled"
    plan = experiment_plan(config)
    n = len(config.tasks.all)
    assert n == 10 + len(config.tasks.families) and "families" in plan["tasks"]
    assert plan["sampled_episodes"] == 2 * n * 8 and plan["sampled_submissions_max"] == 2 * n * 8
    assert plan["sampled_tokens_max"] == 2 * n * 8 * 2048
    assert plan["updates"] == 16  # the families are evaluated only: training is the pilot's
    off = experiment_plan(to_experiment_config(compose_config("experiment=pilot")))
    assert off["sampled_episodes"] == 0 and "baseline_sampled" not in off["stages"]


def test_dry_run_prints_the_plan_through_the_real_entry_point(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "flows.experiment", "experiment=pilot", "dry_run=true",
         f"tracking.runs_root={tmp_path / 'runs'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for line in ("episodes               64", "training submissions   128", "updates                16",
                 "evaluation submissions <= 40", "train      4", "reserved   3", "heldout    3", "total                  344064"):
        assert line in text, line
    assert "Qwen/Qwen2.5-Coder-7B-Instruct@c03e6d358207e414f1eca0bb1891e29f1db0e242" in text
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing


def test_a_config_error_exits_2_with_the_cause(tmp_path):
    out = subprocess.run([sys.executable, "-m", "flows.experiment", "lora.r=0", "dry_run=true"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "config error: lora: invalid LoraSettings: r=0" in out.stderr
