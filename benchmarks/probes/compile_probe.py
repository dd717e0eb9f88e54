"""Why a worker's first call is slower than a plain process's (issue 7): the same first call, one change at a time.

    python benchmarks/probes/compile_probe.py --out results/        # GPU host; ~1 min

benchmarks/first_call_profile.py showed the worker's first forward of the ReLU control taking 4.7-5.7 s
on the H200 (at full and small shapes alike, so it is not data movement), where the KernelBench-style
process of eval_throughput.py takes 1.5 s for the same call. Each variant here is a fresh process with
a cold Triton cache that imports torch and triton, initialises CUDA, loads the control and times its
first and second forward at the small shape, changing one thing the worker does differently:

- `plain`: the baseline's setting (inherits this environment).
- `worker_env`: the worker's environment (`worker_handle.worker_environment`: only the kept variables,
  HOME/TMPDIR in a fresh folder, PYTHONDONTWRITEBYTECODE, PYTHONNOUSERSITE, OMP_NUM_THREADS=1); not its
  rlimits.
- `controls`: the worker's runtime controls around the call (LaunchCounter + DispatchGuard).
- `worker_env+controls`: both.
- `*_profiled`: the same under cProfile; the top functions by cumulative time are printed.

Writes `compile_probe.json` under `--out`. A diagnostic, not a benchmark of record.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # benchmarks run from a checkout

from kernelflow.eval.session.worker_handle import worker_environment  # noqa: E402

CHILD = r'''
import json, os, sys, time
t0 = time.perf_counter()
import torch, triton
torch.cuda.init(); torch.empty(1, device="cuda")
setup = time.perf_counter() - t0
sys.path.insert(0, os.environ["PROBE_ROOT"])
from tests.helpers.solutions import load_solution_module
from kernelflow.tasks import TASKS
task = TASKS["19_ReLU"]
mod = load_solution_module("19_ReLU")
model = mod.ModelNew(*task.init_inputs).cuda()
x = torch.randn(*task.input_shapes("small")[0], device="cuda")
controls = os.environ.get("PROBE_CONTROLS") == "1"
if controls:
    from kernelflow.eval.worker.controls import LaunchCounter, make_guard
    counter = LaunchCounter(mod.__name__); counter.install(cuda=True); guard_cls = make_guard(counter, interpreter=False)
def call():
    t = time.perf_counter()
    with torch.no_grad():
        if controls:
            with guard_cls():
                model(x)
        else:
            model(x)
    torch.cuda.synchronize()
    return time.perf_counter() - t
prof = None
if os.environ.get("PROBE_PROFILE") == "1":
    import cProfile, pstats, io
    prof = cProfile.Profile(); prof.enable()
first = call()
if prof is not None:
    prof.disable(); s = io.StringIO(); pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(25)
    print(s.getvalue()[-6000:], file=sys.stderr)
second = call()
print("PROBE " + json.dumps({"setup_s": setup, "first_s": first, "second_s": second}), flush=True)
'''

def run(name: str, worker_env: bool, controls: bool, profile: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="probe-") as tmp:
        env = worker_environment(Path(tmp), "cuda") if worker_env else dict(os.environ)
        env.update(TRITON_CACHE_DIR=str(Path(tmp) / "triton_cache"), PROBE_ROOT=str(ROOT),
                   PROBE_CONTROLS="1" if controls else "0", PROBE_PROFILE="1" if profile else "0")
        env.pop("TRITON_INTERPRET", None)
        proc = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=tmp, capture_output=True, timeout=300)
    res = {"variant": name, "rc": proc.returncode}
    for line in proc.stdout.decode(errors="replace").splitlines():
        if line.startswith("PROBE "):
            res.update(json.loads(line[6:]))
    if profile or proc.returncode:
        res["stderr_tail"] = proc.stderr.decode(errors="replace")[-6000:]
    print(json.dumps({k: v for k, v in res.items() if k != "stderr_tail"}), flush=True)
    return res


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="benchmark-results")
    args = parser.parse_args()
    variants = [("plain", False, False), ("worker_env", True, False), ("controls", False, True),
                ("worker_env+controls", True, True)]
    rows = [run(name, w, c, False) for _ in range(args.repeats) for name, w, c in variants]
    rows += [run("plain_profiled", False, False, True), run("worker_env+controls_profiled", True, True, True)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compile_probe.json").write_text(json.dumps(rows, indent=1))
    for r in rows[-2:]:
        print(f"---- {r['variant']}\n{r.get('stderr_tail', '')[-3500:]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
