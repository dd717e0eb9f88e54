#!/usr/bin/env bash
# The GPU validation runs, grouped so that timing-sensitive work never shares the GPU with other work.
# On the GPU host, from the checkout (wheels in .whl/, see docs/offline_bundle.md):
#
#   bash benchmarks/probes/h200_session.sh OUT STEP [STEP ...]
#
#   controls    the ten pilot controls + 5 ReLU repeats, alone on the GPU (issue 3)       ~250 s
#   timing      tests/eval/test_timing.py, alone on the GPU                                ~20 s
#   gpu-tests   the other CUDA tests (pytest -m gpu, 8 xdist workers); GPU_TESTS selects  ~800 s for all
#               files or -k expressions, e.g. GPU_TESTS="tests/eval/test_adversarial.py"   of tests/eval
#   families    the 25 family solutions at full shape (issue 9)                            ~600-900 s
#   train       one epoch of the loop with a 0.5B-shaped random Qwen2 (issue 5)            ~250 s
#   throughput  eval_throughput.py: kernelflow against a KernelBench-style judge (issue 7)  ~400 s
#   compile     the torch.compile baseline on three controls                               ~120 s
#
# Durations were measured on one H200 on 2026-11-29 (docs/evaluator.md, docs/families.md); a call is
# at most 600 s, so spread the long steps over several calls. Steps run one after another, each under
# its own time limit, so a step that overruns still leaves the others' results in OUT. Every verdict
# holds the per-GPU lock from its first call to its last (compilation included), so parallel judging
# overlaps only worker start-up: the steps judge 2-4 at a time, not more.
set -uo pipefail
out="${1:?output directory}"
shift
mkdir -p "$out"
# shellcheck disable=SC1091
source benchmarks/probes/h200_setup.sh
export PYTHONUNBUFFERED=1
py=python3

for what in "$@"; do
case "$what" in
  controls)
    timeout 300 $py benchmarks/controls.py --shape full --repeats 5 --out "$out/controls" >"$out/controls.log" 2>&1
    echo "controls rc=$?"
    ;;
  timing)
    timeout 60 $py -m pytest -m gpu tests/eval/test_timing.py -v -p no:cacheprovider >"$out/timing.log" 2>&1
    echo "timing rc=$?"
    ;;
  gpu-tests)
    # -v prints a line per test as it ends, so a run cut short still says what passed.
    # Tests that record their verdicts (tests/helpers/gpu_record.py) leave them in one JSON file, so the
    # families' H200 table comes from the same run that checks them. set -f: node ids hold [brackets].
    set -f
    # shellcheck disable=SC2086
    KERNELFLOW_GPU_VERDICTS="$out/verdicts" timeout "${GPU_TESTS_LIMIT:-560}" $py -m pytest -m gpu \
      ${GPU_TESTS:-tests/eval tests/tasks} -n "${GPU_TESTS_WORKERS:-8}" -v -p no:cacheprovider --timeout 300 \
      >"$out/gpu_tests.log" 2>&1
    echo "gpu-tests rc=$?"
    set +f
    tail -3 "$out/gpu_tests.log"
    if [ -d "$out/verdicts" ]; then
      $py -c 'import json, pathlib, sys; d = pathlib.Path(sys.argv[1]); json.dump([json.loads(p.read_text()) for p in sorted(d.glob("*.json"))], open(sys.argv[2], "w"), indent=1)' \
        "$out/verdicts" "$out/gpu_verdicts.json" && rm -r "$out/verdicts"
    fi
    ;;
  families)
    timeout "${FAMILIES_LIMIT:-560}" $py benchmarks/controls.py --shape full --tasks ${FAMILIES:-families} --parallel 2 --repeats 0 \
      --out "$out/families" >"$out/families.log" 2>&1
    echo "families rc=$?"
    ;;
  compile)
    timeout 150 $py benchmarks/controls.py --shape full --tasks 19_ReLU 23_Softmax 88_MinGPTNewGelu --repeats 0 \
      --compile-baseline --out "$out/compile" >"$out/compile.log" 2>&1
    echo "compile rc=$?"
    ;;
  train)
    timeout 400 $py benchmarks/train_step.py --out "$out/train_step" >"$out/train_step.log" 2>&1
    echo "train_step rc=$?"
    ;;
  throughput)
    timeout 420 $py benchmarks/eval_throughput.py --backend cuda --shape full --pool-sizes 2 --prewarm on --gpu-lock exclusive shared_checks --single-repeats 2 \
      --hang-timeout-s 0 --no-env-server --out "$out/eval_throughput" >"$out/eval_throughput.log" 2>&1
    echo "eval_throughput rc=$?"
    ;;
  *)
    echo "unknown step $what" >&2
    exit 2
    ;;
esac
done
