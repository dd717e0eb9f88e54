#!/usr/bin/env bash
# The GPU host runbook: install the offline bundle into a clean folder, then run named steps, each under
# its own time limit (default 540 s, so one step fits a 10-minute call). From the checkout, on the host:
#
#   bash scripts/gpu_session.sh OUT STEP [ARG] [STEP [ARG] ...]
#
#   gate             the judge's GPU gate, <= 8 minutes with the install: pytest -m gpu (tests/eval, tests/tasks),
#                    the ten honest controls at full shape against their stored rewards
#                    (benchmarks/gate_expected.json), a throughput smoke (the mixed batch of 13 at P = 2, served
#                    defaults); one summary in OUT/gate/summary.md (benchmarks/gpu_gate.py), rc 1 if red. Run it
#                    on every change to kernelflow/eval before it lands (docs/ci.md records each run)
#   gpu-tests        pytest -m gpu over tests/eval and tests/tasks (GPU_TESTS picks files or -k expressions)
#   controls         the ten honest controls at full shape, 2 repeats of ReLU: runtime, t_min, reward
#   smoke            the main job on the GPU: python -m flows.experiment eval=gpu (report + MLflow run)
#   learnability N   one seed N of the learnability check (eval=gpu), into OUT/learnability; run it for
#                    seeds 1, 2 and 3 (one per call if needed), then `compare` below sums them up
#   learnability-parallel S1,S2,..
#                    those seeds of the learnability check side by side, judged by ONE environment server
#                    on the GPU (benchmarks/seeds_parallel.py), the small policies on the host's CPUs so
#                    that only the evaluator uses the GPU; same OUT/learnability as above. Stopped at the
#                    step limit, the same step again resumes the seeds (completed stages are skipped)
#   compare          flows.compare + the learnability summary over every seed in OUT/learnability
#   pilot-shaped     experiment=pilot with model=random_7b (the pilot's 7B shape, random weights) on one
#                    GPU (eval.device_index=0), one epoch over two training tasks (2 updates of the pilot's
#                    shape: 4 episodes x 2 turns x 2,048 tokens), the static compiled generation path (one
#                    6,144-position cache: one compile), and
#                    the before/after evaluation cut to 256 tokens per turn, so that it fits one 9-minute
#                    step; PILOT_OVERRIDES replaces those reductions (e.g. PILOT_OVERRIDES=" " for 4 updates)
#   throughput       the evaluator against a KernelBench-style judge at P = 2 with the default settings
#
# The bundle: BUNDLE (default .whl/), the wheels scripts/build_wheelhouse.py --host-freeze made for this
# host (docs/offline_bundle.md). It goes into SITE (default /tmp/kf-site), which is emptied first: a warm
# host keeps old installs, and `pip install --target` over a folder does not remove what a new wheel
# replaces; a folder that holds exactly this bundle (same wheels' sha256, stamped after a complete install)
# is kept. GPU_SESSION_DRY_RUN=1 prints every command instead of running it (what CI checks), and
# GPU_SESSION_INSTALL_ONLY=1 stops after the install.
# Each step writes OUT/<step>.log and its results under OUT/<step>/; a step that overruns its limit
# stops with rc 124 and the next step still runs.
set -uo pipefail
out="${1:?usage: bash scripts/gpu_session.sh OUT STEP [ARG] ... (steps: see the header of this file)}"
shift
[ $# -gt 0 ] || { echo "gpu_session.sh: no step given; steps: gate gpu-tests controls smoke learnability N learnability-parallel S1,S2 compare pilot-shaped throughput" >&2; exit 2; }
dry="${GPU_SESSION_DRY_RUN:-0}"
limit="${STEP_LIMIT:-540}"
bundle="${BUNDLE:-.whl}"
site="${SITE:-/tmp/kf-site}"
py="${PYTHON:-python3}"

run() {  # run NAME CMD...: the command under the step limit, its output in OUT/NAME.log
  local name="$1"; shift
  if [ "$dry" = 1 ]; then echo "[dry-run] $name: $*"; return 0; fi
  local t0; t0=$(date +%s)
  timeout "${step_limit:-$limit}" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc in $(( $(date +%s) - t0 )) s (log: $out/$name.log)"
  tail -"${TAIL_LINES:-12}" "$out/$name.log"
  return 0
}

# Validate every step before anything runs, so a typo does not surface after a 9-minute step.
args=("$@")
i=0
while [ $i -lt ${#args[@]} ]; do
  case "${args[$i]}" in
    gate|gpu-tests|controls|smoke|compare|pilot-shaped|throughput) ;;
    learnability)
      i=$((i + 1))
      [[ "${args[$i]:-}" =~ ^[0-9]+$ ]] || { echo "gpu_session.sh: learnability needs a seed number, e.g. 'learnability 1'" >&2; exit 2; } ;;
    learnability-parallel)
      i=$((i + 1))
      [[ "${args[$i]:-}" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "gpu_session.sh: learnability-parallel needs seeds, e.g. 'learnability-parallel 1,2,3'" >&2; exit 2; } ;;
    *) echo "gpu_session.sh: unknown step '${args[$i]}'; steps: gate gpu-tests controls smoke learnability N learnability-parallel S1,S2 compare pilot-shaped throughput" >&2; exit 2 ;;
  esac
  i=$((i + 1))
done

mkdir -p "$out"
if [ "$dry" = 1 ]; then
  echo "[dry-run] install: rm -rf $site; pip install --no-index --no-deps --target $site $bundle/*.whl (kept when $site holds exactly this bundle)"
else
  compgen -G "$bundle/*.whl" >/dev/null || { echo "gpu_session.sh: no wheels in $bundle/ (build them with scripts/build_wheelhouse.py --host-freeze; see docs/offline_bundle.md)" >&2; exit 2; }
  # The bundle's identity: the sha256 of every wheel. A folder installed from exactly these wheels by this
  # script (its stamp written last, so an interrupted install has none) is kept: a warm host's second call
  # saves the ~40 s install. Anything else is emptied first, since --target over it would keep stale files.
  stamp=$(sha256sum "$bundle"/*.whl | sed 's|  .*/|  |' | sha256sum | cut -c1-16)
  if [ -f "$site/.kf-bundle-stamp" ] && [ "$(cat "$site/.kf-bundle-stamp")" = "$stamp" ]; then
    echo "bundle $stamp already installed in $site: kept"
  else
    rm -rf "$site"
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$bundle"/*.whl || exit 1
    echo "$stamp" > "$site/.kf-bundle-stamp"
    echo "bundle $stamp installed in $site"
  fi
  [ "${GPU_SESSION_INSTALL_ONLY:-0}" = 1 ] && exit 0
fi
export PYTHONPATH="$PWD:$site" KERNELFLOW_CACHE_DIR="${KERNELFLOW_CACHE_DIR:-/tmp/kfc}" HF_HUB_OFFLINE=1 \
  TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 PREFECT_SERVER_ANALYTICS_ENABLED=false
mkdir -p "$KERNELFLOW_CACHE_DIR"
if [ "$dry" != 1 ]; then
  "$py" -c "import torch, triton, kernelflow, flows; print('host:', torch.cuda.get_device_name(0), '| torch', torch.__version__, '| triton', triton.__version__)" \
    || { echo "gpu_session.sh: the bundle does not import on this host (see above)" >&2; exit 1; }
fi

set -- "${args[@]}"
while [ $# -gt 0 ]; do
  step="$1"; shift
  case "$step" in
    gate)
      # Three parts under their own limits (360 + 120 + 75 + 75 s, plus the install: up to 10 minutes), then the
      # summary, which reads whatever each part left (a part cut by its limit is red, not silent).
      mkdir -p "$out/gate"
      set -f
      # 12 at a time, the full-shape verdicts in two xdist groups (their device memory must fit: 14 at a time
      # with no groups ran out of it on 2026-12-03), then the clock-reading tests alone on a quiet GPU
      # shellcheck disable=SC2086
      step_limit=${GATE_TESTS_LIMIT:-360} run gate/gpu-tests env KF_FAILURES_LOG="$out/gate/failures.log" \
        "$py" -m pytest -m "gpu and not gpu_alone" \
        ${GPU_TESTS:-tests/eval tests/tasks} -n "${GATE_TESTS_WORKERS:-12}" --dist loadgroup -v -p no:cacheprovider \
        -o faulthandler_timeout=120 --timeout 240 --durations=30
      # a run cut by its limit leaves its xdist workers and their judges' workers on the GPU: end them all
      # before anything is timed (on 2026-12-03 they were still running beside the clock tests)
      [ "$dry" = 1 ] || { pkill -KILL -f "pytest -m gpu" ; pkill -KILL -f "kernelflow.eval.worker.main"; sleep 3; } 2>/dev/null
      # shellcheck disable=SC2086
      step_limit=120 run gate/gpu-alone env KF_FAILURES_LOG="$out/gate/failures.log" "$py" -m pytest \
        -m "gpu and gpu_alone" ${GPU_TESTS:-tests/eval tests/tasks} -v -p no:cacheprovider --timeout 100
      set +f
      step_limit=${GATE_CONTROLS_LIMIT:-75} run gate/controls "$py" benchmarks/controls.py --shape full --repeats 0 \
        --parallel 4 --out "$out/gate/controls"
      step_limit=${GATE_THROUGHPUT_LIMIT:-75} run gate/throughput "$py" benchmarks/eval_throughput.py --defaults \
        --pool-sizes 2 --baseline-pools --evaluator shared --single-prewarm --skip-hang --no-env-server --skip-cache \
        --no-warmup --out "$out/gate/throughput"
      step_limit=60 run gate/summary "$py" benchmarks/gpu_gate.py "$out/gate"
      [ "$dry" = 1 ] || cat "$out/gate/summary.md" 2>/dev/null ;;
    gpu-tests)
      set -f  # node ids hold [brackets]
      # shellcheck disable=SC2086
      run gpu-tests "$py" -m pytest -m gpu ${GPU_TESTS:-tests/eval tests/tasks} -n "${GPU_TESTS_WORKERS:-8}" -v \
        -p no:cacheprovider -o faulthandler_timeout=120 --timeout 300
      set +f ;;
    controls)
      run controls "$py" benchmarks/controls.py --shape full --repeats 2 --out "$out/controls" ;;
    smoke)
      run smoke "$py" -m flows.experiment eval=gpu tracking.runs_root="$out/smoke" tracking.experiment=smoke-gpu ;;
    learnability)
      seed="$1"; shift
      run "learnability-seed$seed" env SEEDS="$seed" PYTHON="$py" bash benchmarks/learnability.sh "$out/learnability" ;;
    learnability-parallel)
      seeds="$1"; shift
      # The policies on the CPU (a few threads each), the GPU for the evaluator alone: a policy generating
      # on the GPU would overlap the other seeds' timed kernel runs. SFT_POLICY_DIR: a policy built
      # elsewhere (benchmarks/learnability.sh says how), copied into the cache instead of built here.
      mkdir -p "$out/learnability/cache/tiny"
      if [ -n "${SFT_POLICY_DIR:-}" ] && [ "$dry" != 1 ]; then cp -r "$SFT_POLICY_DIR" "$out/learnability/cache/tiny/"; fi
      run "learnability-parallel" env KERNELFLOW_CACHE_DIR="$out/learnability/cache" OMP_NUM_THREADS="${SEED_THREADS:-3}" \
        "$py" benchmarks/seeds_parallel.py "$out/learnability" --seeds "$seeds" --limit-s $(( limit - 30 )) -- \
        experiment=learnability eval=gpu trainer.epochs=4 model.device=cpu \
        tracking.runs_root="$out/learnability/runs" tracking.experiment=learnability-gpu ;;
    compare)
      run compare "$py" -m flows.compare --experiment learnability-gpu --runs-root "$out/learnability/runs" \
        --out "$out/learnability/compare" --no-prefect
      run compare-summary "$py" benchmarks/learnability_summary.py "$out/learnability/runs" \
        --out "$out/learnability/summary.md" ;;
    pilot-shaped)
      # shellcheck disable=SC2086
      set -f  # the task list holds [brackets]
      # The whole device's memory every 2 s (policy, evaluator and its workers together: what must fit).
      smi=""
      if [ "$dry" != 1 ] && command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=timestamp,memory.used,memory.total,utilization.gpu --format=csv,noheader,nounits \
          -l 2 > "$out/pilot-shaped-gpu.csv" 2>/dev/null & smi=$!
      fi
      run pilot-shaped "$py" -m flows.experiment experiment=pilot model=random_7b eval.device_index=0 \
        trainer.epochs=1 tracking.runs_root="$out/pilot-shaped" tracking.experiment=pilot-shaped \
        ${PILOT_OVERRIDES:-"tasks.train=[19_ReLU,21_Sigmoid]" trainer.generation.backend=static_compiled trainer.generation.max_context=6144 trainer.eval_max_new_tokens=256}
      if [ -n "$smi" ]; then
        kill "$smi" 2>/dev/null
        echo "pilot-shaped: peak device memory $(cut -d, -f2 "$out/pilot-shaped-gpu.csv" | sort -n | tail -1) MiB of $(cut -d, -f3 "$out/pilot-shaped-gpu.csv" | head -1) MiB (nvidia-smi every 2 s: $out/pilot-shaped-gpu.csv)"
      fi
      set +f ;;
    throughput)
      run throughput "$py" benchmarks/eval_throughput.py --defaults --pool-sizes 2 --baseline-pools 2 --evaluator shared \
        --single-prewarm on --single-repeats 3 --skip-hang --no-env-server --skip-cache --out "$out/throughput" ;;
  esac
done
