"""`python -m flows.experiment` refusing a bad command line: exit 2, one message that names the override.

Covered: what Hydra refuses while composing (unknown key, at the top or in a group, with and without
a close match; a value of the wrong type; an unknown option of a config group; an override it
cannot parse), that `HYDRA_FULL_ERROR=1` still gives Hydra's own report, that the variable set for
composition does not reach the run, and that the entry point imports none of the heavy libraries
before composing (why a refusal takes well under a second; the timings are in docs/experiment.md,
not asserted here). A bad value refused by a layer's dataclass is covered in test_plan.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HINT = "`python -m flows.experiment --cfg job` prints the composed config"


def experiment(*overrides: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"} | (env or {})
    return subprocess.run([sys.executable, "-m", "flows.experiment", *overrides, "dry_run=true"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=environ)


@pytest.mark.parametrize("override, expected", [
    ("trainer.epoch=3", "trainer.epoch: 'trainer' has no key 'epoch'; did you mean 'trainer.epochs'?"),
    ("trainer.nope=1", "trainer.nope: 'trainer' has no key 'nope'; its keys are estimator, credit, epochs,"),
    ("sed=3", "sed: the experiment config has no key 'sed'; did you mean 'seed'?"),
    ("trainer.epochs=four", "trainer.epochs: Value 'four' of type 'str' could not be converted to Integer "
                            "(trainer.epochs is int); give a value of that type"),
    ("experiment=smok", "experiment=smok: the config group 'experiment' has no option 'smok'; did you mean "
                        "experiment=smoke? choose one of learnability, pilot, smoke (the YAML files in conf/experiment/)"),
    ("trainer.epochs=[", "cannot parse the override 'trainer.epochs=[': no viable alternative at input '['"),
])
def test_a_refused_override_exits_2_with_one_message_naming_it(override, expected):
    out = experiment(override)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernelflow: config error: "), out.stderr
    assert expected in lines[0]
    if "cannot parse" not in expected and "config group" not in expected:
        assert HINT in lines[0]
    # Hydra's own report would add these; the message says what to do instead
    assert "HYDRA_FULL_ERROR" not in out.stderr and "SchemaNode" not in out.stderr


def test_hydra_full_error_keeps_hydras_own_report():
    out = experiment("trainer.epoch=3", env={"HYDRA_FULL_ERROR": "1"})
    assert out.returncode == 1
    assert "Traceback" in out.stderr and "ConfigCompositionException" in out.stderr
    assert "kernelflow: config error" not in out.stderr


def test_the_variable_set_for_composition_does_not_reach_the_run():
    # The plan printer stands in for the run: it reports the variable as the run (and its children) see it.
    code = ("import os, runpy, sys, flows.plan\n"
            "flows.plan.render_plan = lambda config: 'HYDRA_FULL_ERROR=' + repr(os.environ.get('HYDRA_FULL_ERROR'))\n"
            "sys.argv = ['flows/experiment.py', 'dry_run=true']\n"
            "runpy.run_path('flows/experiment.py', run_name='__main__')\n")
    environ = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env=environ)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "HYDRA_FULL_ERROR=None"


def test_composing_imports_no_heavy_library():
    heavy = ("torch", "triton", "prefect", "mlflow", "openenv", "gradio", "transformers", "numpy")
    code = ("import sys, flows.experiment\n"
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
