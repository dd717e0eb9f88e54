"""The parts of scripts/screenshots.sh that are not shell: which pages to shoot, waiting, shooting, shrinking.

    python scripts/screenshots.py wait URL [--timeout S]            exit 0 once URL answers 200
    python scripts/screenshots.py pages --prefect-ui URL --mlflow-ui URL --tracking-uri URI --run NAME
                                                                     prints `<file> <url>` per screenshot
    python scripts/screenshots.py shoot BROWSER OUT_DIR < pages      one headless-Chromium screenshot per line
    python scripts/screenshots.py shrink FILE... [--max-kb N]        re-encode PNGs over N KB (palette, then size)

`pages` finds the run's ids (the Prefect flow run named NAME, its report artifact, the MLflow parent run
named NAME) through the servers' own APIs: Prefect's REST API, MLflow's client. The page addresses are
the UIs' routes in Prefect 3.x (`/runs/flow-run/<id>`, `/artifacts/artifact/<id>`) and MLflow 3.x
(`#/experiments/<e>/runs/<r>` and its `model-metrics` and `artifacts/<path>` tabs); another version's
routes may differ. Chromium's `--virtual-time-budget` lets the single-page apps finish loading before
the shot; a page that loads slower than that is captured half drawn (rerun, or raise SHOT_BUDGET_MS).
Not covered: logging in to a secured server, pages beyond the six below.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

# Chromium's command line shoots the window, not the page: the report pages get a window tall enough to
# reach their plots at the bottom (the MLflow preview is an iframe that grows with the window).
WINDOW = {"prefect-flow-run.png": (1440, 1000), "prefect-report-artifact.png": (1440, 3300),
          "mlflow-run-overview.png": (1440, 1000), "mlflow-run-charts.png": (1440, 1400),
          "mlflow-run-report.png": (1440, 3600)}


def wait(url: str, timeout: float) -> bool:
    """True once `url` answers 200 within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)
    return False


def _post(url: str, body: dict) -> list[dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def prefect_pages(ui: str, flow_runs: list[dict], artifacts: list[dict], run: str) -> list[tuple[str, str]]:
    """The flow run's page and its report artifact's page: the latest flow run of run directory `run`, whose
    Prefect name is `<run>-attempt-<n>` (flows/experiment_flow.py; a bare `<run>` is accepted too)."""
    ours = sorted((r for r in flow_runs if r["name"] == run or re.fullmatch(re.escape(run) + r"-attempt-\d+", r["name"])),
                  key=lambda r: r.get("start_time") or "")
    if not ours:
        raise LookupError(f"no Prefect flow run named {run!r} (found {sorted({r['name'] for r in flow_runs})})")
    flow_run = ours[-1]
    report = [a for a in artifacts if (a.get("key") or "").startswith("kernelflow-report-") and a.get("type") == "markdown"
              and a.get("flow_run_id") == flow_run["id"]]
    pages = [("prefect-flow-run.png", f"{ui}/runs/flow-run/{flow_run['id']}")]
    if report:
        pages.append(("prefect-report-artifact.png", f"{ui}/artifacts/artifact/{report[-1]['id']}"))
    return pages


def mlflow_pages(ui: str, experiment_id: str, run_id: str) -> list[tuple[str, str]]:
    """The MLflow parent run's overview, its charts and its report.html in the artifact view."""
    # The query the flow's own links carry: without it MLflow 3.17 opens its GenAI view, not model training.
    from flows.tracking import UI_QUERY

    base = f"{ui}/#/experiments/{experiment_id}/runs/{run_id}"
    return [("mlflow-run-overview.png", base + UI_QUERY), ("mlflow-run-charts.png", f"{base}/model-metrics{UI_QUERY}"),
            ("mlflow-run-report.png", f"{base}/artifacts/report/report.html{UI_QUERY}")]


def find_mlflow_run(tracking_uri: str, run: str) -> tuple[str, str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    experiments = client.search_experiments()
    found = client.search_runs([e.experiment_id for e in experiments], filter_string=f"attributes.run_name = '{run}'")
    parents = [r for r in found if "mlflow.parentRunId" not in r.data.tags]
    if not parents:
        raise LookupError(f"no MLflow parent run named {run!r} in {tracking_uri}")
    return parents[0].info.experiment_id, parents[0].info.run_id


def chromium_command(browser: str, url: str, path: Path, size: tuple[int, int], profile: Path) -> list[str]:
    budget = os.environ.get("SHOT_BUDGET_MS", "20000")
    return [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--disable-extensions", f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}",
            f"--virtual-time-budget={budget}", f"--screenshot={path}", url]


def shrink(path: Path, max_kb: int) -> int:
    """Re-encode `path` until it is at most `max_kb` KB: a 256-colour palette first, then smaller sizes."""
    from PIL import Image

    if path.stat().st_size <= max_kb * 1024:
        return path.stat().st_size
    original = Image.open(path).convert("RGB")
    scale = 1.0
    while True:
        img = original if scale == 1.0 else original.resize((int(original.width * scale), int(original.height * scale)),
                                                           Image.LANCZOS)
        img.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
        if path.stat().st_size <= max_kb * 1024 or scale < 0.3:
            return path.stat().st_size
        scale *= 0.85


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/screenshots.py", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wait")
    w.add_argument("url")
    w.add_argument("--timeout", type=float, default=120)
    p = sub.add_parser("pages")
    for flag in ("--prefect-ui", "--mlflow-ui", "--tracking-uri", "--run"):
        p.add_argument(flag, required=True)
    s = sub.add_parser("shoot")
    s.add_argument("browser")
    s.add_argument("out", type=Path)
    k = sub.add_parser("shrink")
    k.add_argument("files", nargs="+", type=Path)
    k.add_argument("--max-kb", type=int, default=300)
    args = ap.parse_args(argv)
    if args.cmd == "wait":
        return 0 if wait(args.url, args.timeout) else 1
    if args.cmd == "pages":
        ui = args.prefect_ui.rstrip("/")
        pages = prefect_pages(ui, _post(f"{ui}/api/flow_runs/filter", {}), _post(f"{ui}/api/artifacts/filter", {}),
                              args.run)
        pages += mlflow_pages(args.mlflow_ui.rstrip("/"), *find_mlflow_run(args.tracking_uri, args.run))
        for name, url in pages:
            print(name, url)
        return 0
    if args.cmd == "shoot":
        args.out.mkdir(parents=True, exist_ok=True)
        for line in sys.stdin.read().splitlines():
            name, url = line.split(maxsplit=1)
            profile = args.out / ".chromium-profile"
            cmd = chromium_command(args.browser, url, args.out / name, WINDOW.get(name, (1440, 1000)), profile)
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
            ok = (args.out / name).is_file()
            print(f"{'shot' if ok else 'FAILED'} {name} <- {url}" + ("" if ok else f": {done.stderr[-500:]}"))
        return 0
    for f in args.files:
        print(f"{f}: {shrink(f, args.max_kb) // 1024} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
