#!/usr/bin/env bash
# scripts/screenshots.sh OUT [experiment overrides...]
#
# What a user sees, as PNGs in OUT: starts a Prefect server and the MLflow UI on 127.0.0.1 (free ports,
# state in a temporary directory), runs the smoke experiment against them (CPU, interpreter backend),
# and shoots with headless Chromium: the Prefect flow run, its report artifact, and the MLflow parent
# run's overview, charts and report (report.html in the artifact view). Each PNG is kept under
# MAX_KB (300) KB. The servers are stopped by their PIDs on exit; the run's directory stays in
# OUT/work for a look afterwards (delete it when done).
#
# Needs: the project's venv (PYTHON, default .venv/bin/python), Chromium (BROWSER, default the first of
# chromium, chromium-browser, google-chrome on PATH; `apt-get install chromium` on Debian). The page
# logic (which URLs, waiting, shrinking) is scripts/screenshots.py.
set -euo pipefail

OUT=${1:?usage: scripts/screenshots.sh OUT [experiment overrides...]}
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
BIN=$(dirname "$PYTHON")
MAX_KB=${MAX_KB:-300}
BROWSER=${BROWSER:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
if [[ -z "$BROWSER" ]]; then
    echo "screenshots: no Chromium found (set BROWSER, or apt-get install chromium)" >&2
    exit 2
fi

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$OUT/work
mkdir -p "$WORK"
free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PREFECT_PORT=${PREFECT_PORT:-$(free_port)}
MLFLOW_PORT=${MLFLOW_PORT:-$(free_port)}
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    done
}
trap cleanup EXIT

export PREFECT_HOME=$WORK/prefect-home
export PREFECT_SERVER_ANALYTICS_ENABLED=false      # no telemetry from a loopback server
export PREFECT_API_URL=http://127.0.0.1:$PREFECT_PORT/api
export HF_HUB_OFFLINE=1
echo "screenshots: Prefect server on 127.0.0.1:$PREFECT_PORT (log $WORK/prefect.log)"
setsid "$BIN/prefect" server start --host 127.0.0.1 --port "$PREFECT_PORT" >"$WORK/prefect.log" 2>&1 &
PIDS+=($!)
"$PYTHON" "$ROOT/scripts/screenshots.py" wait "$PREFECT_API_URL/health" --timeout 120 \
    || { echo "screenshots: the Prefect server did not start; see $WORK/prefect.log" >&2; exit 1; }

RUNS=$WORK/runs
echo "screenshots: smoke experiment (runs root $RUNS, log $WORK/experiment.log)"
(cd "$ROOT" && "$PYTHON" -m flows.experiment "tracking.runs_root=$RUNS" "$@") >"$WORK/experiment.log" 2>&1 \
    || { echo "screenshots: the experiment failed; see $WORK/experiment.log" >&2; tail -5 "$WORK/experiment.log" >&2; exit 1; }
LAST=$(tail -1 "$WORK/experiment.log")
echo "screenshots: $LAST"
RUN_DIR=$(sed -n 's/^kernelflow: run complete: \([^ ]*\) ;.*/\1/p' <<<"$LAST")
RUN=$(basename "$RUN_DIR")

TRACKING_URI=sqlite:///$RUNS/mlflow.db
echo "screenshots: MLflow UI on 127.0.0.1:$MLFLOW_PORT (log $WORK/mlflow.log)"
setsid "$BIN/mlflow" ui --backend-store-uri "$TRACKING_URI" --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1 \
    >"$WORK/mlflow.log" 2>&1 &
PIDS+=($!)
"$PYTHON" "$ROOT/scripts/screenshots.py" wait "http://127.0.0.1:$MLFLOW_PORT/health" --timeout 120 \
    || { echo "screenshots: the MLflow UI did not start; see $WORK/mlflow.log" >&2; exit 1; }

"$PYTHON" "$ROOT/scripts/screenshots.py" pages --prefect-ui "http://127.0.0.1:$PREFECT_PORT" \
    --mlflow-ui "http://127.0.0.1:$MLFLOW_PORT" --tracking-uri "$TRACKING_URI" --run "$RUN" >"$WORK/pages.txt"
"$PYTHON" "$ROOT/scripts/screenshots.py" shoot "$BROWSER" "$OUT" <"$WORK/pages.txt"
"$PYTHON" "$ROOT/scripts/screenshots.py" shrink "$OUT"/*.png --max-kb "$MAX_KB"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "browser: $("$BROWSER" --version 2>/dev/null | tail -1)"
    "$PYTHON" -c 'import importlib.metadata as m; print(*(f"{p}: {m.version(p)}" for p in ("prefect", "mlflow")), sep="\n")'
    echo "run: $RUN"
} >"$OUT/versions.txt"
cat "$OUT/versions.txt"
