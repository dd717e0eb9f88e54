#!/usr/bin/env bash
# Evaluator v2 on the GPU host, in one call of at most ~9.5 minutes (issue #17): the ten controls at full
# shape (+ ReLU repeats), the GPU evaluator tests, the runtime and distribution fixtures on CUDA, and the
# hostile batch. Usage (from the checkout, wheels in .whl/):  bash benchmarks/probes/h200_v2_check.sh OUT [STEP...]
# Steps: controls gpu-eval corpus-new corpus checks (gpu-eval + corpus side by side) pick (PICK=-k expr) hostile
# generation pilot-update isolation throughput spread (default: controls gpu-eval corpus-new hostile).
# Issue #19: `throughput spread` together fit one call (~520 s: THROUGHPUT_LIMIT 270 + SPREAD_LIMIT 250); each step
# has a soft budget (*_BUDGET) inside its limit, cuts what does not fit and prints the cuts (lines with CUT).
set -uo pipefail
out="${1:?output directory}"; shift
steps=("$@"); [ ${#steps[@]} -gt 0 ] || steps=(controls gpu-eval corpus-new hostile)
mkdir -p "$out"
rm -rf /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="$PWD:/tmp/site" KERNELFLOW_CACHE_DIR=/tmp/kfc HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$KERNELFLOW_CACHE_DIR"
py=python3
for step in "${steps[@]}"; do
  t0=$(date +%s)
  case "$step" in
    controls)
      timeout "${CONTROLS_LIMIT:-230}" $py benchmarks/controls.py --shape full --repeats "${REPEATS:-2}" --out "$out/c" >"$out/controls.log" 2>&1
      echo "controls rc=$?"; cp "$out/c/controls.json" "$out/controls.json" 2>/dev/null; tail -16 "$out/controls.log" ;;
    gpu-eval)
      timeout "${GPU_EVAL_LIMIT:-160}" $py -m pytest -m gpu tests/eval/test_gpu_evaluator.py -v -p no:cacheprovider -o faulthandler_timeout=${STACK_DUMP_S:-100} --timeout 200 >"$out/gpu_eval.log" 2>&1
      echo "gpu-eval rc=$?"; grep -E "PASSED|FAILED|ERROR|passed|failed" "$out/gpu_eval.log" | tail -12 ;;
    corpus-new)
      timeout "${CORPUS_LIMIT:-120}" $py -m pytest -m gpu tests/eval/test_adversarial.py -n 8 -v -p no:cacheprovider -o faulthandler_timeout=${STACK_DUMP_S:-100} --timeout 200 \
        -k "rt_ or dist_ or timer_patch or thread_spawn or side_stream or call_counting or iso_" >"$out/corpus_new.log" 2>&1
      echo "corpus-new rc=$?"; grep -E "FAILED|ERROR|passed|failed" "$out/corpus_new.log" | tail -12 ;;
    corpus)
      timeout "${CORPUS_LIMIT:-420}" $py -m pytest -m gpu tests/eval/test_adversarial.py -n 8 -v -p no:cacheprovider -o faulthandler_timeout=${STACK_DUMP_S:-100} --timeout 300 \
        >"$out/corpus.log" 2>&1
      echo "corpus rc=$?"; grep -E "FAILED|ERROR|passed|failed" "$out/corpus.log" | tail -20 ;;
    checks)  # the GPU tests and the whole CUDA corpus side by side: the GPU lock keeps timed calls alone
      timeout "${CHECKS_LIMIT:-300}" $py -m pytest -m gpu tests/eval/test_gpu_evaluator.py tests/eval/test_isolation.py -v \
        -p no:cacheprovider -o faulthandler_timeout=${STACK_DUMP_S:-100} --timeout 250 >"$out/gpu_eval.log" 2>&1 &
      timeout "${CHECKS_LIMIT:-300}" $py -m pytest -m gpu tests/eval/test_adversarial.py -n "${CORPUS_WORKERS:-6}" -v \
        -p no:cacheprovider -o faulthandler_timeout=${STACK_DUMP_S:-100} --timeout 250 >"$out/corpus.log" 2>&1
      echo "corpus rc=$?"; wait; echo "gpu-eval done"
      grep -E "FAILED|ERROR|passed|failed" "$out/gpu_eval.log" | tail -14
      grep -E "FAILED|ERROR| passed| failed" "$out/corpus.log" | tail -20 ;;
    pick)  # named GPU tests only, with their failures' tracebacks: PICK="expr" (pytest -k)
      timeout "${PICK_LIMIT:-150}" $py -m pytest -m gpu tests/eval/test_gpu_evaluator.py tests/eval/test_adversarial.py \
        -n "${CORPUS_WORKERS:-4}" -v -p no:cacheprovider -o faulthandler_timeout=${STACK_DUMP_S:-100} --timeout 140 --tb=short -k "${PICK:?PICK=pytest -k expression}" \
        >"$out/pick.log" 2>&1
      echo "pick rc=$?"; grep -E "FAILED|ERROR| passed| failed|Error|assert" "$out/pick.log" | tail -30 ;;
    hostile)
      timeout "${HOSTILE_LIMIT:-170}" $py benchmarks/hostile_batch.py --backend cuda --shape full --workers 4 --timeout-s 40 ${HOSTILE_ARGS:-} \
        --out "$out/h" >"$out/hostile.log" 2>&1
      echo "hostile rc=$?"; cp "$out/h/hostile_batch.json" "$out/hostile_batch.json" 2>/dev/null; tail -26 "$out/hostile.log" ;;
    generation)  # issue #18: rollout speed per path (7B and 0.5B, batch 16 x 256; ~2 min without the unmerged path)
      timeout "${GEN_LIMIT:-240}" $py benchmarks/generation.py --shapes 7b 0.5b --batches 16 --tokens 256 \
        --paths ${GEN_PATHS:-static merged} --budget-s "${GEN_BUDGET:-180}" --out "$out/generation" >"$out/generation.log" 2>&1
      echo "generation rc=$?"; tail -8 "$out/generation.log" ;;
    pilot-update)  # issue #18: one pilot-shaped update (7B, 4 episodes x 2 turns x 2,048 tokens, evaluator on the GPU)
      timeout "${PILOT_LIMIT:-480}" $py benchmarks/train_step.py --model-shape 7b --tokens 2048 --group-size 4 \
        --gen-backend static_compiled --tasks 19_ReLU 23_Softmax --out "$out/pilot" >"$out/pilot.log" 2>&1
      echo "pilot-update rc=$?"; tail -20 "$out/pilot.log" ;;
    isolation)
      timeout "${ISOLATION_LIMIT:-120}" $py benchmarks/isolation_cost.py --backend cuda --shape small --repeats "${ISOLATION_REPEATS:-3}" --modes "${ISOLATION_MODES:-fresh,pooled}" --out "$out/i" >"$out/isolation.log" 2>&1
      echo "isolation rc=$?"; cp "$out/i/"*.json "$out/" 2>/dev/null; tail -12 "$out/isolation.log" ;;
    throughput)  # issue #19: P sweep with conf/eval/gpu.yaml as eval=gpu gives it (prewarm_workers auto), one warm
      # evaluator; the baseline at the same P while the budget lasts (BASELINE_POOLS in priority order), then the
      # single warm verdict. Headline (session 11): POOLS=2 BASELINE_POOLS=2, ~150 s.
      timeout "${THROUGHPUT_LIMIT:-270}" $py benchmarks/eval_throughput.py --defaults --pool-sizes ${POOLS:-1 2 4 8} \
        --prewarm config --gpu-lock shared_checks --evaluator shared --single-prewarm on --single-repeats 3 --skip-hang \
        --no-env-server --skip-cache --baseline-pools ${BASELINE_POOLS:-2 4 8 1} --budget-s "${THROUGHPUT_BUDGET:-250}" \
        ${THROUGHPUT_ARGS:-} --out "$out/tp" >"$out/throughput.log" 2>&1
      echo "throughput rc=$?"; cp "$out/tp/eval_throughput.json" "$out/tp/eval_throughput.md" "$out/" 2>/dev/null
      grep "CUT" "$out/throughput.log"; tail -32 "$out/throughput.log" ;;
    spread)  # issue #19: the ten controls' rewards over fresh evaluator processes, alone and beside 4 other verdicts
      timeout "${SPREAD_LIMIT:-250}" $py benchmarks/reward_spread.py --processes "${SPREAD_PROCESSES:-5}" --modes alone loaded \
        --others 4 --prewarm "${SPREAD_PREWARM:-on}" --time-budget-s "${SPREAD_BUDGET:-210}" --kill-after-s 20 \
        ${SPREAD_ARGS:-} --out "$out/spread" >"$out/spread.log" 2>&1
      echo "spread rc=$?"; cp "$out/spread/reward_spread.json" "$out/spread/reward_spread.md" "$out/" 2>/dev/null
      grep "CUT" "$out/spread.log"; tail -36 "$out/spread.log" ;;
    *) echo "unknown step $step" >&2 ;;
  esac
  echo "== $step took $(( $(date +%s) - t0 )) s"
done
