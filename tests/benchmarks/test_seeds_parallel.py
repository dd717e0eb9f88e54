"""benchmarks/seeds_parallel.py: what can be checked without running flows (the end-to-end run is in
docs/learnability.md: two smoke seeds on the CPU, three learnability seeds on the H200)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load():
    spec = importlib.util.spec_from_file_location("seeds_parallel", ROOT / "benchmarks" / "seeds_parallel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("override", ["seed=3", "env=embedded", "env.url=http://x:1"])
def test_per_seed_settings_are_refused_in_the_overrides(tmp_path, capsys, override):
    with pytest.raises(SystemExit) as exc:
        load().main([str(tmp_path), "--seeds", "1,2", "--", "experiment=smoke", override])
    assert exc.value.code == 2
    assert "set per seed by this script" in capsys.readouterr().err
    assert not (tmp_path / "env_server.json").exists()  # refused before anything started


def test_stop_all_kills_a_flow_that_ignores_sigterm(tmp_path):
    """A flow's group gets SIGTERM, then SIGKILL after the grace: the limit is a limit."""
    ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    stubborn = subprocess.Popen([sys.executable, "-c", ignore], stdout=subprocess.PIPE, start_new_session=True)
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    assert stubborn.stdout.readline().strip() == b"up"  # its handler is installed
    load().stop_all([stubborn, polite], grace_s=1.0)
    assert polite.returncode == -15 and stubborn.returncode == -9
