#!/usr/bin/env bash
# The learnability check on one GPU, three seeds in one command (docs/learnability.md):
#
#   source benchmarks/probes/h200_setup.sh        # on the H200: carried wheels (trl, prefect, hydra, mlflow, openenv...)
#   bash benchmarks/learnability.sh "$OUT" [extra Hydra overrides]
#
# Runs `experiment=learnability eval=gpu` (full shapes, timed rewards) for seeds 1, 2, 3 (or SEEDS) as
# one Hydra multirun, reduced to 4 epochs, then writes into OUT (default $OUT):
#   runs/                    the three run directories (reports, kernels, transcripts) + MLflow store
#   compare/compare.md       flows.compare: before/after per group and task with bootstrap intervals over seeds
#   summary.md, summary.json benchmarks/learnability_summary.py: per-seed table, curve per update,
#                            roofline fraction of correct rollouts (correctness vs speed)
#
# The SFT policy (kernelflow/train/sft.py) is built on first use with TRL under $KERNELFLOW_CACHE_DIR
# (under a minute on a GPU). To skip TRL on the GPU host, carry the directory built on a CPU
# (~/.cache/kernelflow/tiny/sft-<hash>, ~2 MB, its files' sha256 in kernelflow_sft.json) and give it
# as SFT_POLICY_DIR: it is copied into the cache and used as is (same settings -> same hash -> no build).
set -euo pipefail
out="${1:-${OUT:?give an output directory as the first argument or in OUT}}"
shift || true
py="${PYTHON:-python3}"
mkdir -p "$out"
export KERNELFLOW_CACHE_DIR="${KERNELFLOW_CACHE_DIR:-$out/cache}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [[ -n "${SFT_POLICY_DIR:-}" ]]; then
  mkdir -p "$KERNELFLOW_CACHE_DIR/tiny"
  cp -r "$SFT_POLICY_DIR" "$KERNELFLOW_CACHE_DIR/tiny/"
fi
"$py" -c "import torch; print('device:', torch.cuda.get_device_name(0), '| torch', torch.__version__)"
start=$(date +%s)
seeds="${SEEDS:-1,2,3}"  # SEEDS=1 (then 2, 3): one seed per call where a call's time limit is short
"$py" -m flows.experiment -m experiment=learnability eval=gpu seed="$seeds" trainer.epochs=4 \
  tracking.runs_root="$out/runs" tracking.experiment=learnability-gpu "$@" 2>&1 | tee "$out/experiment.log"
echo "seeds $seeds in $(( $(date +%s) - start )) s" | tee -a "$out/experiment.log"
"$py" -m flows.compare --experiment learnability-gpu --runs-root "$out/runs" --out "$out/compare" --no-prefect || true
"$py" benchmarks/learnability_summary.py "$out/runs" --out "$out/summary.md"
