"""scripts/gpu_session.sh, the GPU host runbook, checked without a GPU through its dry run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_session.sh"


def session(tmp_path: Path, *steps: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPU_SESSION_DRY_RUN": "1", "SITE": str(tmp_path / "site")}
    return subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), *steps], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_every_step_prints_its_command_after_a_clean_install(tmp_path):
    r = session(tmp_path, "smoke", "learnability", "2", "compare", "pilot-shaped", "throughput", "gpu-tests", "controls")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("[dry-run] install: rm -rf " + str(tmp_path / "site"))  # a warm host's old installs go
    by_step = {line.split(":", 1)[0].removeprefix("[dry-run] "): line for line in lines}
    assert "flows.experiment eval=gpu" in by_step["smoke"]
    assert "SEEDS=2" in by_step["learnability-seed2"] and "learnability.sh" in by_step["learnability-seed2"]
    assert "experiment=pilot model=random_7b eval.device_index=0" in by_step["pilot-shaped"]
    assert "--pool-sizes 2 --baseline-pools 2" in by_step["throughput"]
    assert "-m gpu" in by_step["gpu-tests"] and "controls.py --shape full" in by_step["controls"]
    assert list(by_step)[1:] == ["smoke", "learnability-seed2", "compare", "compare-summary", "pilot-shaped",
                                 "throughput", "gpu-tests", "controls"]  # in the order asked


def test_parallel_learnability_shares_one_server_and_keeps_the_gpu_for_the_evaluator(tmp_path):
    r = session(tmp_path, "learnability-parallel", "1,2,3", "compare")
    assert r.returncode == 0, r.stderr
    by_step = {line.split(":", 1)[0].removeprefix("[dry-run] "): line for line in r.stdout.splitlines()}
    line = by_step["learnability-parallel"]
    assert "seeds_parallel.py" in line and "--seeds 1,2,3" in line
    assert "experiment=learnability eval=gpu" in line and "model.device=cpu" in line
    assert f"tracking.runs_root={tmp_path / 'out' / 'learnability' / 'runs'}" in line  # where `compare` reads
    assert f"--runs-root {tmp_path / 'out' / 'learnability' / 'runs'}" in by_step["compare"]


def _wheel(folder: Path, version: str) -> None:
    """A minimal pure-Python wheel of package `kfdemo` (what pip needs: the module, METADATA, WHEEL, RECORD)."""
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    info = f"kfdemo-{version}.dist-info"
    with zipfile.ZipFile(folder / f"kfdemo-{version}-py3-none-any.whl", "w") as z:
        z.writestr("kfdemo.py", f"VERSION = {version!r}\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: kfdemo\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")


def test_a_warm_host_keeps_the_same_bundle_and_replaces_another(tmp_path):
    """The install is skipped only when the folder holds exactly this bundle; a changed bundle empties it."""
    import sys

    bundle, site = tmp_path / "bundle", tmp_path / "site"
    _wheel(bundle, "1.0")
    env = {**os.environ, "BUNDLE": str(bundle), "SITE": str(site), "PYTHON": sys.executable,
           "GPU_SESSION_INSTALL_ONLY": "1"}

    def install() -> str:
        r = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), "smoke"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout

    assert "installed in" in install() and (site / "kfdemo.py").is_file()
    (site / "stale.py").write_text("")  # stands for a file only the folder has
    assert ": kept" in install() and (site / "stale.py").exists()
    (bundle / "kfdemo-1.0-py3-none-any.whl").unlink()
    _wheel(bundle, "2.0")
    assert "installed in" in install()
    assert not (site / "stale.py").exists() and "2.0" in (site / "kfdemo.py").read_text()


def test_a_bad_step_is_refused_before_anything_runs(tmp_path):
    r = session(tmp_path, "smoke", "smok")
    assert r.returncode == 2
    assert "unknown step 'smok'" in r.stderr and "[dry-run]" not in r.stdout
    r = session(tmp_path, "learnability", "smoke")
    assert r.returncode == 2 and "learnability needs a seed number" in r.stderr
    r = session(tmp_path)
    assert r.returncode == 2 and "no step given" in r.stderr
    r = session(tmp_path, "learnability-parallel", "1;2")
    assert r.returncode == 2 and "learnability-parallel needs seeds" in r.stderr


def test_missing_wheels_name_the_folder_and_the_fix(tmp_path):
    env = {**os.environ, "BUNDLE": str(tmp_path / "empty"), "SITE": str(tmp_path / "site")}
    r = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), "smoke"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "no wheels in" in r.stderr and "build_wheelhouse.py --host-freeze" in r.stderr


def test_the_gate_runs_the_gpu_tests_the_controls_and_a_throughput_smoke_then_one_summary(tmp_path):
    r = session(tmp_path, "gate")
    assert r.returncode == 0, r.stderr
    by_step = {line.split(":", 1)[0].removeprefix("[dry-run] "): line for line in r.stdout.splitlines()}
    assert list(by_step)[1:] == ["gate/gpu-tests", "gate/gpu-alone", "gate/controls", "gate/throughput", "gate/summary"]
    assert '-m gpu and not gpu_alone' in by_step["gate/gpu-tests"] and "--dist loadgroup" in by_step["gate/gpu-tests"]
    assert "-m gpu and gpu_alone" in by_step["gate/gpu-alone"] and " -n " not in by_step["gate/gpu-alone"]
    assert "controls.py --shape full" in by_step["gate/controls"]
    assert "eval_throughput.py --defaults --pool-sizes 2" in by_step["gate/throughput"]
    assert "gpu_gate.py" in by_step["gate/summary"] and str(tmp_path / "out" / "gate") in by_step["gate/summary"]
