"""Importing `flows` (any module of it) changes nothing in os.environ; the entry points set Prefect's
defaults themselves, before Prefect is imported (flows/prefect_settings.py); `python -m flows.rejudge`
is the rejudge command (it moved out of `kernelflow`'s CLI)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows import prefect_settings

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(f"flows.{p.stem}" for p in (ROOT / "flows").glob("*.py") if p.stem != "__init__")

IMPORT_ALL = f"""
import json, os, sys
before = dict(os.environ)
import flows
for name in {MODULES!r}:
    __import__(name)
after = dict(os.environ)
print(json.dumps({{"added": sorted(set(after) - set(before)),
                   "changed": sorted(k for k in before if after.get(k) != before[k])}}))
"""


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in prefect_settings.DEFAULTS}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.slow  # imports Prefect, Hydra, MLflow and torch in a fresh Python (~10 s)
def test_importing_flows_leaves_os_environ_unchanged():
    out = subprocess.run([sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True, timeout=300,
                         env=_clean_env(), cwd=ROOT, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"added": [], "changed": []}


def test_apply_sets_only_what_is_unset():
    env = {"PREFECT_LOGGING_EXTRA_LOGGERS": "mine"}
    added = prefect_settings.apply(env)
    assert env["PREFECT_LOGGING_EXTRA_LOGGERS"] == "mine"
    assert added == {k: v for k, v in prefect_settings.DEFAULTS.items() if k != "PREFECT_LOGGING_EXTRA_LOGGERS"}
    assert env == {**prefect_settings.DEFAULTS, "PREFECT_LOGGING_EXTRA_LOGGERS": "mine"}
    assert prefect_settings.apply(env) == {}


@pytest.mark.slow  # a fresh Python that imports Prefect
def test_the_entry_point_sets_prefect_defaults_before_prefect_reads_them(tmp_path):
    # `python -m flows.rejudge` on a run that does not exist: a usage error (2) naming the runs root, after the
    # defaults went in before Prefect was imported (Prefect's own settings object shows them).
    code = ("import runpy, sys\n"
            "sys.argv = ['flows.rejudge', 'nope', '--runs-root', sys.argv[1]]\n"
            "try:\n    runpy.run_module('flows.rejudge', run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    from prefect.settings import get_current_settings\n"
            "    s = get_current_settings()\n"
            "    print('exit', e.code, s.server.analytics_enabled, s.logging.extra_loggers)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300,
                         env=_clean_env(), cwd=ROOT)
    assert "rejudge:" in out.stderr and str(tmp_path) in out.stderr, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] in ("exit 2 False kernelflow", "exit 2 False ['kernelflow']")
