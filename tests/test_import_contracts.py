"""The import-linter contracts in pyproject.toml: they cover every module, they pass, and they break on an
upward import.

The last point is tested for real: the packages are copied to a temporary directory, one upward import is
written into a module there, and `lint-imports` is run on the copy; it must exit non-zero and name the
contract that the import breaks (the unmodified copy must pass, so the failure is the import's doing).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                "sys.argv[0] = 'lint-imports'; sys.exit(lint_imports_command())"]


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def _modules(package: str) -> list[str]:
    base = ROOT / package
    out = []
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def _names(layer: str) -> list[str]:
    """The modules of one layer entry: "a | b" (independent siblings) or "a : b" (siblings) name several."""
    return [n.strip() for n in layer.replace(":", "|").split("|")]


def _covered(module: str, prefixes: set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_every_module_of_kernelflow_and_flows_is_inside_a_contract():
    prefixes: set[str] = set()
    for c in _contracts():
        if c["type"] == "layers":
            for container in c.get("containers", [""]):
                prefixes |= {f"{container}.{name}".lstrip(".") for layer in c["layers"] for name in _names(layer)}
        prefixes |= set(c.get("source_modules", []))
    outside = [m for m in _modules("kernelflow") + _modules("flows") if not _covered(m, prefixes)]
    assert outside == [], f"modules in no import-linter contract: {outside}"


def test_every_part_of_kernelflow_is_a_layer():
    # a new top-level module or subpackage of kernelflow must be placed in the layers contract
    (layered,) = [c for c in _contracts() if c["type"] == "layers" and c.get("containers") == ["kernelflow"]]
    parts = {p.stem for p in (ROOT / "kernelflow").iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").is_file())}
    names = {n for layer in layered["layers"] for n in _names(layer)}
    assert parts - names == set(), "kernelflow modules missing from the layers contract"


def _boundary() -> tuple[dict, dict]:
    (worker,) = [c for c in _contracts() if c["name"].startswith("the worker folder imports only")]
    (judge,) = [c for c in _contracts() if c["name"].startswith("nothing on the judge's side imports")]
    return worker, judge


def test_every_module_of_the_evaluator_is_on_one_side_of_the_trust_boundary():
    # A new module of kernelflow.eval must be placed: worker side (the worker folder, the wire, the sandbox's
    # worker side and the two mechanisms it applies) or judge side (listed in both boundary contracts).
    worker, judge = _boundary()
    worker_side = {"kernelflow.eval.worker", "kernelflow.eval.protocol", "kernelflow.eval.sandbox.confine",
                   "kernelflow.eval.sandbox.landlock", "kernelflow.eval.sandbox.seccomp_policy"}
    judge_side = set(judge["source_modules"])
    assert judge["forbidden_modules"] == ["kernelflow.eval.worker", "kernelflow.eval.sandbox.confine"]
    assert set(worker["forbidden_modules"]) >= judge_side - {"kernelflow.eval.protocol"}
    packages = {"kernelflow.eval", "kernelflow.eval.sandbox"}  # containers of both sides
    unplaced = [m for m in _modules("kernelflow/eval")
                if m not in packages and not _covered(m, worker_side) and not _covered(m, judge_side)]
    assert unplaced == [], f"modules of kernelflow.eval on neither side of the trust boundary: {unplaced}"


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*LINT_IMPORTS, "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "COLUMNS": "400"},
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("layers")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("kernelflow", "flows"):
        shutil.copytree(ROOT / package, root / package, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_lint_imports_passes():
    out = subprocess.run([*LINT_IMPORTS, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert " broken" in out.stdout and "0 broken" in out.stdout


UPWARD = [
    ("kernelflow/cli.py", "import flows.rejudge", "flows is the top layer"),
    ("kernelflow/tasks/spec.py", "import kernelflow.eval", "kernelflow's layers import only downward"),
    ("kernelflow/eval/reward.py", "import kernelflow.env.models", "kernelflow's layers import only downward"),
    ("kernelflow/env/returns.py", "from kernelflow.eval.cluster.ray_config import RayConfig",
     "env uses only the evaluator's public API"),
    ("kernelflow/tasks/families.py", "from kernelflow.tasks.suite import TASKS", "the task suite imports the families"),
    ("kernelflow/cache_dir.py", "import kernelflow.tasks", "kernelflow's layers import only downward"),
    ("kernelflow/config_dicts.py", "import kernelflow.cache_dir", "kernelflow's layers import only downward"),
    ("flows/analysis/render.py", "from flows.tracking import Tracker", "flows.analysis reads and renders results"),
    ("flows/analysis/report.py", "import prefect.artifacts", "flows.analysis reads and renders results"),
    # the trust boundary inside the evaluator: the judge never imports the worker's code, and the worker
    # reads nothing of the judge but the wire and the sandbox's worker side
    ("kernelflow/eval/session/judge.py", "import kernelflow.eval.worker.main",
     "nothing on the judge's side imports the worker folder"),
    ("kernelflow/eval/evaluator.py", "from kernelflow.eval.sandbox.confine import confine_late",
     "nothing on the judge's side imports the worker folder"),
    ("kernelflow/eval/worker/submission.py", "from kernelflow.eval.verdict import Status",
     "the worker folder imports only the protocol"),
    ("kernelflow/eval/worker/controls.py", "from kernelflow.eval.sandbox.policy import resolve",
     "the worker folder imports only the protocol"),
]


def test_an_upward_import_breaks_lint_imports(copy):
    clean = _lint(copy)
    assert clean.returncode == 0, clean.stdout[-3000:] + clean.stderr[-3000:]
    for path, line, contract in UPWARD:
        target = copy / path
        original = target.read_text()
        target.write_text(original + f"\n{line}  # an upward import written by the test\n")
        try:
            out = _lint(copy)
        finally:
            target.write_text(original)
        assert out.returncode != 0, f"{line!r} in {path} passed lint-imports"
        broken = [ln for ln in out.stdout.splitlines() if ln.endswith("BROKEN")]
        assert any(contract in ln for ln in broken), (path, line, out.stdout[-2000:])
