"""Verdict latency and throughput of the evaluator against a KernelBench-style baseline, in one run.

    python benchmarks/eval_throughput.py --backend interpret --shape small --pool-sizes 1 2 --out results/
    python benchmarks/eval_throughput.py --backend cuda --shape full --pool-sizes 1 2 4 --out results/  # GPU host

The mixed batch: the ten honest controls (tests/fixtures/solutions) plus failing submissions (a Triton
compile error, a static rejection, a wrong result), each made unique (a comment with a nonce), with
the verdict cache off, so every verdict really runs. For every pool size P it is judged by
`Evaluator(max_workers=P)` with pre-warmed workers off (`prewarm_workers=0`) and on (`=P`, pool warm
before the batch starts; `--prewarm`), once per GPU-lock mode (`--gpu-lock exclusive shared_checks`:
every call alone on the GPU, or only the timed ones), fed by P client threads; and by the baseline at
the same concurrency.

The baseline is written here, after KernelBench's eval: a fresh `python` process per sample (spawned
by P client threads), imports inside it, the reference model run in the same process, 5 correctness
trials (`torch.allclose`, atol = rtol = 1e-2) on the same inputs as the evaluator's, then 100 timed
trials with CUDA events on a GPU (none under the interpreter). It has no static checks, no runtime
controls and no isolation; each process gets its own cold TRITON_CACHE_DIR, like each of our workers.

Also measured: an idle-pool single verdict of the ReLU control (latency vs its compile + call time),
an identical resubmission answered by the verdict cache (in process, and through a live environment
server over its WebSocket protocol when `--env-server` is on), and a hanging submission under both
(timeouts are reported apart: both sides just wait for their limit). Results: `eval_throughput.json`
and `eval_throughput.md` under `--out`, with date, machine, versions and the method.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks run from a checkout; tests/helpers holds the controls

from kernelflow.eval import EVALUATOR_VERSION, EvalConfig, Evaluator  # noqa: E402
from kernelflow.eval.config import GPU_LOCK_MODES  # noqa: E402
from kernelflow.tasks import TASKS  # noqa: E402
from tests.helpers.solutions import solution_source  # noqa: E402

RELU = solution_source("19_ReLU")
HANG = RELU.replace("        return out", "        while True:\n            pass\n        return out")


def mixed_batch() -> list[tuple[str, str, str]]:
    """(label, task_id, source): the ten honest controls plus three failing submissions."""
    batch = [(f"honest {t}", t, solution_source(t)) for t in TASKS]
    batch.append(("compile error", "19_ReLU", RELU.replace("tl.arange(0, BLOCK_SIZE)", "tl.arange(0, 1000)")))
    batch.append(("static rejection", "19_ReLU", RELU.replace("        return out", "        return torch.relu(x)")))
    batch.append(("wrong result", "19_ReLU", RELU.replace("tl.maximum(x.to(tl.float32), 0.0)",
                                                         "tl.minimum(x.to(tl.float32), 0.0)")))
    for _label, _task, source in batch:
        assert source.count("\n") > 5
    return batch


def unique(source: str) -> str:
    """The same submission with a nonce comment: a new sha256, so no cache can answer it."""
    return f"{source}\n# nonce {uuid.uuid4().hex}\n"


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile with linear interpolation (numpy's default), None for no values."""
    return float(np.percentile(values, 100 * q)) if values else None


def summarise(latencies: list[float], wall_s: float, statuses: list[str], splits: list[dict] | None = None) -> dict:
    out = {"n": len(latencies), "p50_s": pct(latencies, 0.5), "p95_s": pct(latencies, 0.95), "wall_s": wall_s,
           "throughput_per_min": 60 * len(latencies) / wall_s if wall_s else None,
           "statuses": {s: statuses.count(s) for s in sorted(set(statuses))}}
    if splits:
        for key in ("worker_start_s", "import_s", "compile_s", "correctness_s", "timing_s", "reference_s", "gpu_wait_s"):
            vals = [s[key] for s in splits if s and s.get(key) is not None]
            out[f"median_{key}"] = statistics.median(vals) if vals else None
    return out


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- kernelflow -----------------------------------------------------------------------------------


def run_kernelflow(config: EvalConfig, batch, pool: int, prewarm: bool) -> dict:
    """The batch through one evaluator of `pool` workers (its GPU-lock mode is `config.gpu_lock`)."""
    ev = Evaluator(replace(config, max_workers=pool, prewarm_workers=pool if prewarm else 0, verdict_cache_size=0))
    try:
        if prewarm:
            t0 = time.monotonic()
            assert ev._pool.wait_warm(600), "the warm pool did not fill"
            log(f"  pool of {pool} warm in {time.monotonic() - t0:.1f} s")
        lat, statuses, splits, rows = [], [], [], []
        lock = threading.Lock()

        def judge(item):
            label, task_id, source = item
            t0 = time.monotonic()
            v = ev.evaluate(task_id, unique(source))
            dt = time.monotonic() - t0
            with lock:
                lat.append(dt)
                statuses.append(v.status)
                splits.append(v.wall_time.__dict__ if v.wall_time else None)
                rows.append({"label": label, "status": v.status, "latency_s": dt})
                log(f"  kernelflow P={pool} prewarm={'on' if prewarm else 'off'} lock={config.gpu_lock} "
                    f"{label:<24} {v.status:<16} {dt:6.2f} s"
                    f"  ({len(lat)}/{len(batch)})")

        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=pool) as clients:
            list(clients.map(judge, batch))
        wall = time.monotonic() - t0
        return {**summarise(lat, wall, statuses, splits), "rows": rows, "stats": ev.stats()}
    finally:
        ev.close()


def idle_pool_single(config: EvalConfig, prewarm: bool, repeats: int) -> dict:
    """The ReLU control judged alone with an idle (warm) pool: latency vs compile + GPU-phase time."""
    ev = Evaluator(replace(config, max_workers=1, prewarm_workers=1 if prewarm else 0, verdict_cache_size=0))
    try:
        rows = []
        for _ in range(repeats):
            if prewarm:
                ev._pool.wait_warm(600)
            t0 = time.monotonic()
            v = ev.evaluate("19_ReLU", unique(RELU))
            dt = time.monotonic() - t0
            w = v.wall_time
            # correctness_s runs from the first call (which compiles) to the timed calls: compile included
            work = sum(x or 0.0 for x in (w.correctness_s, w.timing_s))
            rows.append({"status": v.status, "latency_s": dt, "compile_plus_calls_s": work,
                         "ratio": dt / work if work else None, **w.__dict__})
        lat = [r["latency_s"] for r in rows]
        return {"p50_s": pct(lat, 0.5), "p50_compile_plus_calls_s": pct([r["compile_plus_calls_s"] for r in rows], 0.5),
                "p50_ratio": pct([r["ratio"] for r in rows if r["ratio"]], 0.5), "rows": rows}
    finally:
        ev.close()


def cached_in_process(config: EvalConfig, n: int) -> dict:
    ev = Evaluator(replace(config, max_workers=1, prewarm_workers=0, verdict_cache_size=4096))
    try:
        first = ev.evaluate("19_ReLU", RELU)
        ev.evaluate("19_ReLU", RELU)  # an ok is cached only once a second fresh judgement agrees (cache.py)
        lat = []
        for _ in range(n):
            t0 = time.monotonic()
            v = ev.evaluate("19_ReLU", RELU)
            lat.append(time.monotonic() - t0)
            assert v.cached and v.status == first.status
        return {"first_s": first.wall_time.total_s, "p50_ms": 1e3 * pct(lat, 0.5), "p95_ms": 1e3 * pct(lat, 0.95),
                "max_ms": 1e3 * max(lat)}
    finally:
        ev.close()


def cached_through_env_server(config: EvalConfig, n: int) -> dict:
    from kernelflow.env.client import KernelEnvSession
    from kernelflow.env.config import EnvServerConfig
    from kernelflow.env.server.launch import start_local_server

    server = start_local_server(EnvServerConfig(eval=replace(config, max_workers=1), max_turns=n + 2),
                                startup_timeout_s=300)
    try:
        with KernelEnvSession(server.url) as session:
            session.reset("19_ReLU", seed=0)
            t0 = time.monotonic()
            first = session.step(RELU)
            first_s = time.monotonic() - t0
            session.step(RELU)  # the second fresh judgement that confirms the ok for the cache (cache.py)
            lat = []
            for _ in range(n):
                t0 = time.monotonic()
                obs = session.step(RELU)
                lat.append(time.monotonic() - t0)
                assert obs.verdict["cached"] is True and obs.status == first.status
        return {"first_s": first_s, "p50_ms": 1e3 * pct(lat, 0.5), "p95_ms": 1e3 * pct(lat, 0.95), "max_ms": 1e3 * max(lat)}
    finally:
        server.stop()


# ---- the KernelBench-style baseline -------------------------------------------------------------

BASELINE_CHILD = r'''
import importlib.util, json, os, sys, time
t0 = time.perf_counter()
req = json.loads(sys.stdin.read())
import torch, triton  # imports inside the fresh process, as KernelBench does
from kernelflow.tasks import get_task, generate_input
t_import = time.perf_counter()
device = torch.device("cuda" if req["backend"] == "cuda" else "cpu")
if device.type == "cuda":
    torch.cuda.init()
task = get_task(req["task_id"])
ref = task.load_module().Model(*task.init_inputs).to(device)
res = {"import_s": t_import - t0}
try:
    path = os.path.join(os.environ["TMPDIR"], "candidate.py")
    open(path, "w").write(req["source"])
    spec = importlib.util.spec_from_file_location("candidate", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    new = mod.ModelNew(*task.init_inputs).to(device)
except Exception as exc:
    res.update(status="compile_error", error=repr(exc)[:200])
else:
    status = "ok"
    shape = task.shape(req["shape"])
    t_c = time.perf_counter()
    for trial in range(5):
        x = generate_input(shape, trial, task.distribution, device)
        try:
            with torch.no_grad():
                expected = ref(x)
                out = new(x)
            if device.type == "cuda":
                torch.cuda.synchronize()
        except Exception as exc:
            names = {c.__name__ for c in type(exc).__mro__}
            compile_names = {"CompilationError", "InterpreterError", "CompileTimeAssertionFailure"}
            status = "compile_error" if trial == 0 and names & compile_names else "runtime_error"
            res["error"] = repr(exc)[:200]
            break
        if trial == 0:
            res["compile_s"] = time.perf_counter() - t_c
        if out.shape != expected.shape or not torch.allclose(out, expected, atol=1e-2, rtol=1e-2):
            status = "incorrect"
            break
    res["correctness_s"] = time.perf_counter() - t_c
    if status == "ok" and device.type == "cuda":
        t_t = time.perf_counter()
        times = []
        with torch.no_grad():
            for _ in range(100):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record(); new(x); e.record(); torch.cuda.synchronize()
                times.append(s.elapsed_time(e))
        res["runtime_ms"] = sorted(times)[50]
        res["timing_s"] = time.perf_counter() - t_t
    res["status"] = status
res["process_s"] = time.perf_counter() - t0
print("KB_RESULT " + json.dumps(res), flush=True)
'''


def baseline_sample(backend: str, shape: str, task_id: str, source: str, timeout_s: float) -> tuple[str, float, dict]:
    with tempfile.TemporaryDirectory(prefix="kb-sample-") as tmp:
        env = {**os.environ, "TMPDIR": tmp, "TRITON_CACHE_DIR": str(Path(tmp) / "triton_cache"),
               "PYTHONPATH": str(ROOT)}
        if backend == "interpret":
            env["TRITON_INTERPRET"] = "1"
        else:
            env.pop("TRITON_INTERPRET", None)
        req = json.dumps({"backend": backend, "shape": shape, "task_id": task_id, "source": source})
        t0 = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, "-c", BASELINE_CHILD], input=req.encode(), capture_output=True,
                                  env=env, cwd=tmp, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return "timeout", time.monotonic() - t0, {}
        dt = time.monotonic() - t0
        for line in proc.stdout.decode(errors="replace").splitlines():
            if line.startswith("KB_RESULT "):
                res = json.loads(line[len("KB_RESULT "):])
                return res["status"], dt, res
        return "crashed", dt, {"stderr": proc.stderr.decode(errors="replace")[-300:]}


def run_baseline(backend: str, shape: str, batch, pool: int, timeout_s: float) -> dict:
    lat, statuses, splits, rows = [], [], [], []
    lock = threading.Lock()

    def judge(item):
        label, task_id, source = item
        status, dt, res = baseline_sample(backend, shape, task_id, unique(source), timeout_s)
        with lock:
            lat.append(dt)
            statuses.append(status)
            splits.append({"worker_start_s": res.get("import_s"), "compile_s": res.get("compile_s"),
                           "correctness_s": res.get("correctness_s"), "timing_s": res.get("timing_s")})
            rows.append({"label": label, "status": status, "latency_s": dt})
            log(f"  baseline   P={pool} {label:<24} {status:<16} {dt:6.2f} s  ({len(lat)}/{len(batch)})")

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=pool) as clients:
        list(clients.map(judge, batch))
    wall = time.monotonic() - t0
    return {**summarise(lat, wall, statuses, splits), "rows": rows}


# ---- report -------------------------------------------------------------------------------------


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def markdown(result: dict) -> str:
    m = result["meta"]
    lines = [f"# Evaluator throughput ({m['date']})", "",
             f"backend `{m['backend']}`, shape `{m['shape']}`, device {m['device']}, {m['cpus']} CPUs, "
             f"torch {m['torch']}, triton {m['triton']}, Python {m['python']}, evaluator {m['evaluator_version']}; "
             f"seeds {m['seeds']}, timed_runs {m['timed_runs']}; batch of {m['batch_size']} unique submissions "
             f"(10 honest controls, compile error, static rejection, wrong result), verdict cache off.", "",
             "| judge | pool | prewarm | GPU lock | n | p50 s | p95 s | throughput /min | vs baseline | statuses | "
             "median worker start s | median compile s | median correctness s | median reference s | "
             "median GPU-lock wait s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in result["runs"]:
        s = row["summary"]
        ratio = row.get("throughput_vs_baseline")
        statuses = ", ".join(f"{k} {v}" for k, v in s["statuses"].items())
        lines.append(f"| {row['judge']} | {row['pool']} | {row.get('prewarm', '-')} | {row.get('gpu_lock', '-')} | "
                     f"{s['n']} | {fmt(s['p50_s'])} | "
                     f"{fmt(s['p95_s'])} | {fmt(s['throughput_per_min'], '.1f')} | "
                     f"{'-' if ratio is None else f'{ratio:.2f}x'} | {statuses} | {fmt(s.get('median_worker_start_s'))} | "
                     f"{fmt(s.get('median_compile_s'))} | {fmt(s.get('median_correctness_s'))} | "
                     f"{fmt(s.get('median_reference_s'))} | {fmt(s.get('median_gpu_wait_s'))} |")
    single = result.get("idle_pool_single") or {}
    if single:
        lines += ["", "Single ReLU control, idle pool: latency / (compile + all calls, i.e. the worker's share of "
                  "correctness_s + timing_s):", ""]
        for k, v in single.items():
            lines.append(f"- prewarm {k}: p50 {fmt(v['p50_s'])} s, compile + calls {fmt(v['p50_compile_plus_calls_s'])} s, "
                         f"ratio {fmt(v['p50_ratio'])}")
    for key, title in (("cached_in_process", "Verdict cache, in process"),
                       ("cached_env_server", "Verdict cache, through a live environment server (client-side step)")):
        c = result.get(key)
        if c:
            lines.append(f"- {title}: first verdict {fmt(c['first_s'])} s; identical resubmission p50 "
                         f"{fmt(c['p50_ms'])} ms, p95 {fmt(c['p95_ms'])} ms, max {fmt(c['max_ms'])} ms")
    h = result.get("timeouts")
    if h:
        lines.append(f"- Timeouts (reported apart, limit {h['limit_s']} s): kernelflow {h['kernelflow_status']} in "
                     f"{fmt(h['kernelflow_s'])} s; baseline {h['baseline_status']} in {fmt(h['baseline_s'])} s")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["auto", "cuda", "interpret"], default="auto")
    parser.add_argument("--shape", choices=["small", "full"], default=None, help="default: full on cuda, small otherwise")
    parser.add_argument("--pool-sizes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seeds", type=int, default=None, help="default: 3 on cuda, 1 under the interpreter")
    parser.add_argument("--timed-runs", type=int, default=None, help="default: 20 on cuda, 1 under the interpreter")
    parser.add_argument("--single-repeats", type=int, default=3, help="idle-pool single-verdict repeats")
    parser.add_argument("--hang-timeout-s", type=float, default=10.0, help="0: skip the timeout comparison")
    parser.add_argument("--env-server", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--prewarm", choices=["off", "on", "both"], default="both")
    parser.add_argument("--gpu-lock", nargs="+", choices=list(GPU_LOCK_MODES), default=["exclusive"],
                        help="the evaluator's GPU-lock modes to compare (EvalConfig.gpu_lock); each runs the batch")
    parser.add_argument("--out", default="benchmark-results")
    args = parser.parse_args()
    backend = args.backend
    if backend == "auto":
        backend = "cuda" if torch.cuda.is_available() else "interpret"
    cuda = backend == "cuda"
    shape = args.shape or ("full" if cuda else "small")
    config = EvalConfig(backend=backend, shape=shape, seeds=args.seeds or (3 if cuda else 1),
                        timed_runs=args.timed_runs or (20 if cuda else 1), timeout_s=300 if shape == "full" else 120)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    batch = mixed_batch()
    device = torch.cuda.get_device_name(0) if cuda else f"CPU ({platform.processor() or platform.machine()})"
    result = {"meta": {"date": datetime.now(UTC).isoformat(timespec="seconds"), "backend": backend, "shape": shape,
                       "device": device, "cpus": os.cpu_count(), "torch": torch.__version__, "triton": triton.__version__,
                       "python": platform.python_version(), "platform": platform.platform(),
                       "evaluator_version": EVALUATOR_VERSION, "seeds": config.seeds, "timed_runs": config.timed_runs,
                       "batch_size": len(batch), "pool_sizes": args.pool_sizes},
              "runs": []}

    def save():
        (out / "eval_throughput.json").write_text(json.dumps(result, indent=1, default=str))
        (out / "eval_throughput.md").write_text(markdown(result))

    for pool in args.pool_sizes:
        log(f"pool size {pool}: baseline")
        base = run_baseline(backend, shape, batch, pool, config.timeout_s)
        result["runs"].append({"judge": "kernelbench-style", "pool": pool, "summary": base})
        save()
        for prewarm in {"off": (False,), "on": (True,), "both": (False, True)}[args.prewarm]:
            for mode in args.gpu_lock:
                log(f"pool size {pool}: kernelflow, prewarm {'on' if prewarm else 'off'}, gpu lock {mode}")
                kf = run_kernelflow(replace(config, gpu_lock=mode), batch, pool, prewarm)
                ratio = kf["throughput_per_min"] / base["throughput_per_min"]
                result["runs"].append({"judge": "kernelflow", "pool": pool, "prewarm": "on" if prewarm else "off",
                                       "gpu_lock": mode, "summary": kf, "throughput_vs_baseline": ratio})
                save()
    log("idle pool, single ReLU verdicts")
    result["idle_pool_single"] = {("on" if p else "off"): idle_pool_single(config, p, args.single_repeats)
                                  for p in (False, True)}
    save()
    log("verdict cache")
    result["cached_in_process"] = cached_in_process(config, 20)
    if args.env_server:
        result["cached_env_server"] = cached_through_env_server(config, 10)
    save()
    if args.hang_timeout_s > 0:
        log(f"timeouts ({args.hang_timeout_s} s limit)")
        ev = Evaluator(replace(config, max_workers=1, timeout_s=args.hang_timeout_s, verdict_cache_size=0))
        t0 = time.monotonic()
        v = ev.evaluate("19_ReLU", unique(HANG))
        kf_s = time.monotonic() - t0
        status, base_s, _ = baseline_sample(backend, shape, "19_ReLU", unique(HANG), args.hang_timeout_s)
        result["timeouts"] = {"limit_s": args.hang_timeout_s, "kernelflow_status": v.status, "kernelflow_s": kf_s,
                              "baseline_status": status, "baseline_s": base_s}
    save()
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
