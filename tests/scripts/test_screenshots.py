"""scripts/screenshots.{sh,py} without servers: the pages chosen, the browser's command line, shrinking.

The script itself (servers, the smoke experiment, Chromium) is run by hand: docs/experiment.md shows
its output. The one browser test here skips where no Chromium is installed.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("screenshots", ROOT / "scripts" / "screenshots.py")
screenshots = importlib.util.module_from_spec(spec)
spec.loader.exec_module(screenshots)

# The flow names its Prefect runs `<run>-attempt-<n>` (flows/experiment_flow.py); the prefix of another
# run's name is not a match.
FLOW_RUNS = [{"id": "old", "name": "smoke-abc-attempt-1", "start_time": "2026-12-01T10:00:00Z"},
             {"id": "new", "name": "smoke-abc-attempt-2", "start_time": "2026-12-01T11:00:00Z"},
             {"id": "longer", "name": "smoke-abcd-attempt-1", "start_time": "2026-12-01T11:30:00Z"},
             {"id": "other", "name": "pilot-def", "start_time": "2026-12-01T12:00:00Z"}]
ARTIFACTS = [{"id": "a1", "key": "kernelflow-report-smoke-abc", "type": "markdown", "flow_run_id": "new"},
             {"id": "a2", "key": "kernelflow-tasks-smoke-abc", "type": "table", "flow_run_id": "new"},
             {"id": "a0", "key": "kernelflow-report-smoke-abc", "type": "markdown", "flow_run_id": "old"}]


def test_pages_are_the_latest_flow_run_its_report_and_the_mlflow_run():
    pages = screenshots.prefect_pages("http://127.0.0.1:1", FLOW_RUNS, ARTIFACTS, "smoke-abc")
    assert pages == [("prefect-flow-run.png", "http://127.0.0.1:1/runs/flow-run/new"),
                     ("prefect-report-artifact.png", "http://127.0.0.1:1/artifacts/artifact/a1")]
    with pytest.raises(LookupError, match="no Prefect flow run named 'nope'"):
        screenshots.prefect_pages("u", FLOW_RUNS, ARTIFACTS, "nope")
    assert dict(screenshots.mlflow_pages("http://m", "3", "r1")) == {
        "mlflow-run-overview.png": "http://m/#/experiments/3/runs/r1?workflowType=machine_learning",
        "mlflow-run-charts.png": "http://m/#/experiments/3/runs/r1/model-metrics?workflowType=machine_learning",
        "mlflow-run-report.png":
            "http://m/#/experiments/3/runs/r1/artifacts/report/report.html?workflowType=machine_learning"}
    assert set(screenshots.WINDOW) == {n for n, _ in pages} | set(dict(screenshots.mlflow_pages("m", "3", "r")))


def test_chromium_runs_headless_with_a_private_profile(tmp_path, monkeypatch):
    monkeypatch.setenv("SHOT_BUDGET_MS", "5000")
    cmd = screenshots.chromium_command("chromium", "http://x", tmp_path / "a.png", (800, 600), tmp_path / "p")
    assert cmd[0] == "chromium" and cmd[-1] == "http://x"
    assert {"--headless=new", f"--screenshot={tmp_path / 'a.png'}", "--window-size=800,600",
            f"--user-data-dir={tmp_path / 'p'}", "--virtual-time-budget=5000"} <= set(cmd)


def test_shrink_keeps_a_screenshot_under_the_limit(tmp_path):
    np = pytest.importorskip("numpy")
    image = pytest.importorskip("PIL.Image")
    noisy = np.random.default_rng(0).integers(0, 255, (600, 800, 3), dtype=np.uint8)  # incompressible as RGB
    path = tmp_path / "shot.png"
    image.fromarray(noisy).save(path)
    assert path.stat().st_size > 300 * 1024
    assert screenshots.shrink(path, 300) <= 300 * 1024 and path.stat().st_size <= 300 * 1024
    small = tmp_path / "small.png"
    image.fromarray(noisy[:10, :10]).save(small)
    before = small.read_bytes()
    screenshots.shrink(small, 300)
    assert small.read_bytes() == before  # already small: left alone


def test_wait_gives_up_on_a_closed_port():
    assert screenshots.wait("http://127.0.0.1:9/health", timeout=0.5) is False


def test_the_shell_script_parses_and_asks_for_its_output_directory():
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / "screenshots.sh")]).returncode == 0
    done = subprocess.run(["bash", str(ROOT / "scripts" / "screenshots.sh")], capture_output=True, text=True)
    assert done.returncode != 0 and "usage: scripts/screenshots.sh OUT" in done.stderr


@pytest.mark.skipif(not any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")),
                    reason="no Chromium on this machine")
def test_a_report_page_renders_in_headless_chromium(tmp_path):
    browser = next(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b))
    page = tmp_path / "report.html"
    page.write_text("<!DOCTYPE html><html><body><h1>report</h1></body></html>")
    shot = tmp_path / "shot.png"
    cmd = screenshots.chromium_command(browser, page.as_uri(), shot, (400, 300), tmp_path / "profile")
    subprocess.run(cmd, capture_output=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 1000
