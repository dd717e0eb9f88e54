#!/usr/bin/env bash
# The project's one test command: install, lint (ruff), the layer contracts (import-linter), then the
# whole pytest suite including `slow` tests (but not `gpu`), printing the slowest durations.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
.venv/bin/ruff check .
.venv/bin/lint-imports
set +e
.venv/bin/python -m pytest -m "not gpu" --durations=25 "$@"
rc=$?
set -e
# pytest exits 5 when no test was collected (e.g. a -k filter matching nothing): not a failure of the code.
if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests"
    exit 0
fi
exit "$rc"
