#!/usr/bin/env bash
# Create .venv (if missing) and install kernelflow with every extra at the versions in constraints.txt.
# On a machine with the local CPU torch wheel this takes the CPU build, not several GB of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
# torch first and alone, pinned: a CPU-only machine then keeps the local +cpu wheel, and the rest of the
# resolve sees torch already satisfied instead of pulling a CUDA build.
.venv/bin/pip install -q --disable-pip-version-check -c constraints.txt "torch==2.13.0"
.venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e ".[all,dev]"
echo "kernelflow installed in .venv ($(.venv/bin/python -c 'import torch, triton; print(f"torch {torch.__version__}, triton {triton.__version__}")'))"
