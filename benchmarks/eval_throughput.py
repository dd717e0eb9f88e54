"""Verdict latency and throughput of the evaluator against a KernelBench-style baseline, in one run.

    python benchmarks/eval_throughput.py --backend interpret --shape small --pool-sizes 1 2 --out results/
    python benchmarks/eval_throughput.py --backend cuda --shape full --pool-sizes 1 2 4 --out results/  # GPU host
    # issue #19's P sweep with conf/eval/gpu.yaml as eval=gpu gives it (prewarm auto, one warm evaluator, a budget):
    python benchmarks/eval_throughput.py --defaults --pool-sizes 1 2 4 8 --evaluator shared \
        --skip-hang --no-env-server --skip-cache --single-prewarm on --budget-s 250 --out results/

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

`--defaults` takes the judging settings from `conf/eval/gpu.yaml` as they are (`--set KEY=VALUE` and the
shape/seed/timing flags override single keys; `--prewarm config` keeps the file's `prewarm_workers`, an
int or "auto"). `--evaluator shared` judges every P with one evaluator (max_workers = the largest P, pool
as `--prewarm` says), so P is the number of concurrent verdicts and the one-off costs of a fresh
evaluator (the judge-clock calibration, each task's eager / torch.compile timing) are paid once, in the
warm-up pass (`--warmup`, on by default: the ten controls judged once, unmeasured, before the first
measured batch of every evaluator). `--budget-s` is a soft limit: the evaluator's batches run first,
then the baselines in `--baseline-pools` order, each only if its estimated time still fits (the estimate
uses the baseline's per-sample time measured so far, `--est-baseline-sample-s` before the first), and
every cut is printed and recorded under "cuts"; a batch that reaches the budget stops submitting and is
marked partial. The JSON is rewritten after every stage.
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
from dataclasses import fields, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
import triton
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks run from a checkout; tests/helpers holds the controls

from kernelflow.config_dicts import config_from_dict  # noqa: E402
from kernelflow.eval import EVALUATOR_VERSION, EvalConfig, Evaluator  # noqa: E402
from kernelflow.eval.config import GPU_LOCK_MODES, SERVE_DEFAULTS  # noqa: E402
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


def parse_value(text: str):
    """A --set value as YAML reads it (ints, floats, true/false, null, strings)."""
    return yaml.safe_load(text)


def prewarm_value(text: str) -> int | str:
    """prewarm_workers from the command line: an int, or a word such as "auto" passed through to EvalConfig."""
    return int(text) if text.strip().lstrip("-").isdigit() else text


def load_eval_config(name: str = "gpu", overrides: dict | None = None) -> tuple[EvalConfig, list[str]]:
    """EvalConfig from `conf/eval/<name>.yaml` (the settings `eval=<name>` composes), with `overrides` on top.

    Hydra is not needed (a GPU host that serves the environment has no flows stack): the file is one flat
    mapping of EvalConfig's fields (plus `reward`). Keys EvalConfig does not know are dropped and returned,
    so a key added to the file before the dataclass learns it does not stop a benchmark. The keys the file
    leaves out take the served defaults (`EvalConfig.served`: prewarm_workers "auto"), as `eval=<name>`
    and `kernelflow serve` give them: with the bare field defaults, `--prewarm config` measured a pool of
    0 workers on the H200 (session 11, docs/eval_speed.md), not what a user of the defaults gets.
    """
    data = yaml.safe_load((ROOT / "conf" / "eval" / f"{name}.yaml").read_text()) or {}
    data.update(overrides or {})
    known = {f.name for f in fields(EvalConfig)}
    dropped = sorted(set(data) - known)
    kept = {k: v for k, v in data.items() if k in known}  # `reward` stays a mapping: config_from_dict builds it
    return config_from_dict(EvalConfig, {**SERVE_DEFAULTS, **kept}, f"conf/eval/{name}.yaml"), dropped


def parse_sets(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: give KEY=VALUE, e.g. --set compile_baseline=false")
        out[key.strip()] = parse_value(value)
    return out


def pool_of(ev: Evaluator):
    """The evaluator's warm pool, or None (prewarm off)."""
    return getattr(ev, "_pool", None)


def wait_warm(ev: Evaluator, timeout_s: float = 600) -> float | None:
    """Wait until the evaluator's pool is full and warm; the seconds it took (None without a pool)."""
    pool = pool_of(ev)
    if pool is None:
        return None
    t0 = time.monotonic()
    if not pool.wait_warm(timeout_s):
        log(f"  warning: the warm pool did not fill in {timeout_s:.0f} s")
    return time.monotonic() - t0


def summarise(latencies: list[float], wall_s: float, statuses: list[str], splits: list[dict] | None = None) -> dict:
    out = {"n": len(latencies), "p50_s": pct(latencies, 0.5), "p95_s": pct(latencies, 0.95), "wall_s": wall_s,
           "throughput_per_min": 60 * len(latencies) / wall_s if wall_s else None,
           "verdicts_per_s": len(latencies) / wall_s if wall_s else None,
           "statuses": {s: statuses.count(s) for s in sorted(set(statuses))}}
    if splits:
        for key in ("worker_start_s", "import_s", "compile_s", "correctness_s", "timing_s", "reference_s", "gpu_wait_s"):
            vals = [s[key] for s in splits if s and s.get(key) is not None]
            out[f"median_{key}"] = statistics.median(vals) if vals else None
    return out


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- kernelflow -----------------------------------------------------------------------------------


def fan_out(batch, clients: int, judge_one, tag: str, deadline: float | None = None) -> dict:
    """`batch` judged by `clients` threads (P concurrent verdicts); stops submitting at `deadline`.

    `judge_one(label, task_id, source)` returns (status, latency s, split dict or None, row fields); the
    result is `summarise`'s, the rows, and `partial`/`skipped` when the deadline cut the batch.
    """
    lat, statuses, splits, rows = [], [], [], []
    lock = threading.Lock()
    skipped = []

    def judge(item):
        label, task_id, source = item
        if deadline is not None and time.monotonic() > deadline:
            with lock:
                skipped.append(label)
            return
        status, dt, split, extra = judge_one(label, task_id, source)
        with lock:
            lat.append(dt)
            statuses.append(status)
            splits.append(split)
            row = {"label": label, "status": status, "latency_s": dt, **extra}
            if split:  # where this verdict's time went: an outlier says why (memory wait in queue_s, a worker...)
                row["wall_time"] = {k: round(v, 3) for k, v in split.items() if isinstance(v, float)}
            rows.append(row)
            log(f"  {tag} {label:<24} {status:<16} {dt:6.2f} s  ({len(lat)}/{len(batch)})")

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(judge, batch))
    out = {**summarise(lat, time.monotonic() - t0, statuses, splits), "rows": rows}
    if skipped:
        out.update(partial=True, skipped=skipped)
        log(f"  {tag}: budget reached, {len(skipped)} of {len(batch)} not submitted (partial)")
    return out


def judge_batch(ev: Evaluator, batch, clients: int, tag: str, deadline: float | None = None) -> dict:
    """The batch through `ev`, fed by `clients` threads (P concurrent verdicts); stops submitting at `deadline`."""

    def judge_one(label, task_id, source):
        t0 = time.monotonic()
        v = ev.evaluate(task_id, unique(source))
        extra = {"reward": v.reward}
        if v.status not in ("ok", "compile_error", "static_rejected", "incorrect"):  # the unexpected: say why
            extra["feedback"] = (v.feedback or "")[:600]
        return v.status, time.monotonic() - t0, v.wall_time.__dict__ if v.wall_time else None, extra

    return {**fan_out(batch, clients, judge_one, tag, deadline), "stats": ev.stats()}


def warm_up(ev: Evaluator, clients: int, deadline: float | None = None) -> dict:
    """The one-off costs of a fresh evaluator, paid before anything is measured: the judge-clock calibration,
    and each task's eager (and torch.compile) timing, by judging every honest control once, unmeasured."""
    t0 = time.monotonic()
    warm_s = wait_warm(ev)
    items = [(f"warm-up {t}", t, solution_source(t)) for t in TASKS]
    res = judge_batch(ev, items, clients, "warm-up", deadline)
    warm2 = wait_warm(ev)
    return {"wall_s": time.monotonic() - t0, "pool_fill_s": warm_s, "pool_refill_s": warm2,
            "statuses": res["statuses"], "partial": res.get("partial", False)}


def run_kernelflow(config: EvalConfig, batch, pool: int, prewarm: bool) -> dict:
    """The batch through one fresh evaluator of `pool` workers (pre-#19 behaviour: no warm-up)."""
    ev = Evaluator(replace(config, max_workers=pool, prewarm_workers=pool if prewarm else 0, verdict_cache_size=0))
    try:
        if prewarm:
            log(f"  pool of {pool} warm in {wait_warm(ev):.1f} s")
        tag = f"kernelflow P={pool} prewarm={'on' if prewarm else 'off'} lock={config.gpu_lock}"
        return judge_batch(ev, batch, pool, tag)
    finally:
        ev.close()


def idle_pool_single(config: EvalConfig, prewarm: bool, repeats: int, ev: Evaluator | None = None,
                     deadline: float | None = None) -> dict:
    """The ReLU control judged alone with an idle (warm) pool: latency vs compile + GPU-phase time.

    With `ev` (an evaluator already warmed up) the verdicts go to it; otherwise a fresh one-worker evaluator
    is made and warmed up by one unmeasured ReLU verdict first, so that no measured verdict pays the one-off
    costs (judge-clock calibration, eager / torch.compile timing of the task).
    """
    own = ev is None
    if own:
        ev = Evaluator(replace(config, max_workers=1, prewarm_workers=1 if prewarm else 0, verdict_cache_size=0))
    try:
        if own:
            wait_warm(ev)
            ev.evaluate("19_ReLU", unique(RELU))
        rows = []
        for _ in range(repeats):
            if deadline is not None and time.monotonic() > deadline and rows:
                log("  single verdicts: budget reached")
                break
            wait_warm(ev)
            t0 = time.monotonic()
            v = ev.evaluate("19_ReLU", unique(RELU))
            dt = time.monotonic() - t0
            w = v.wall_time
            # correctness_s runs from the first call (which compiles) to the timed calls: compile included
            work = sum(x or 0.0 for x in (w.correctness_s, w.timing_s))
            rows.append({"status": v.status, "latency_s": dt, "compile_plus_calls_s": work,
                         "ratio": dt / work if work else None, "reward": v.reward, **w.__dict__})
            log(f"  single ReLU prewarm={'on' if prewarm else 'off'} {v.status} {dt:.2f} s")
        lat = [r["latency_s"] for r in rows]
        return {"n": len(rows), "p50_s": pct(lat, 0.5),
                "p50_compile_plus_calls_s": pct([r["compile_plus_calls_s"] for r in rows], 0.5),
                "p50_ratio": pct([r["ratio"] for r in rows if r["ratio"]], 0.5),
                "evaluator": "fresh, warmed up by one verdict" if own else "the sweep's warm evaluator",
                "prewarm_workers": ev.config.prewarm_workers, "rows": rows}
    finally:
        if own:
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


def run_baseline(backend: str, shape: str, batch, pool: int, timeout_s: float, deadline: float | None = None) -> dict:
    def judge_one(label, task_id, source):
        status, dt, res = baseline_sample(backend, shape, task_id, unique(source), timeout_s)
        split = {"worker_start_s": res.get("import_s"), "compile_s": res.get("compile_s"),
                 "correctness_s": res.get("correctness_s"), "timing_s": res.get("timing_s")}
        return status, dt, split, {}

    return fan_out(batch, pool, judge_one, f"baseline   P={pool}", deadline)


# ---- report -------------------------------------------------------------------------------------


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def sweep_rows(result: dict) -> list[dict]:
    """Per P and kernelflow setting: verdicts/s ours vs the baseline at the same concurrency, and p50s."""
    base = {r["pool"]: r["summary"] for r in result["runs"] if r["judge"] == "kernelbench-style"}
    out = []
    for r in result["runs"]:
        if r["judge"] != "kernelflow":
            continue
        s, b = r["summary"], base.get(r["pool"])
        ratio = (s["verdicts_per_s"] / b["verdicts_per_s"]) if b and b.get("verdicts_per_s") and s.get("verdicts_per_s") else None
        out.append({"pool": r["pool"], "prewarm": r.get("prewarm"), "prewarm_workers": r.get("prewarm_workers"),
                    "gpu_lock": r.get("gpu_lock"), "ours_verdicts_per_s": s.get("verdicts_per_s"),
                    "baseline_verdicts_per_s": None if b is None else b.get("verdicts_per_s"), "ratio": ratio,
                    "ours_p50_s": s["p50_s"], "baseline_p50_s": None if b is None else b["p50_s"],
                    "partial": bool(s.get("partial") or (b or {}).get("partial"))})
    return out


def markdown(result: dict) -> str:
    m = result["meta"]
    lines = [f"# Evaluator throughput ({m['date']})", "",
             f"backend `{m['backend']}`, shape `{m['shape']}`, device {m['device']}, {m['cpus']} CPUs, host {m.get('host')}, "
             f"torch {m['torch']}, triton {m['triton']}, CUDA {m.get('cuda')}, Python {m['python']}, "
             f"evaluator {m['evaluator_version']}, calibration {m.get('calibration')}; "
             f"settings {m.get('settings')}: seeds {m['seeds']}, timed_runs {m['timed_runs']}, "
             f"compile_baseline {m.get('compile_baseline')}; evaluator {m.get('evaluator_mode', 'per-pool')}, "
             f"warm-up {m.get('warmup')}; batch of {m['batch_size']} unique submissions "
             f"(10 honest controls, compile error, static rejection, wrong result), verdict cache off.", ""]
    sweep = sweep_rows(result)
    if sweep:
        lines += ["| P | prewarm (workers) | GPU lock | ours verdicts/s | baseline verdicts/s | ratio | ours p50 s | "
                  "baseline p50 s |", "|---|---|---|---|---|---|---|---|"]
        for r in sweep:
            lines.append(f"| {r['pool']} | {r['prewarm']} ({r['prewarm_workers']}) | {r['gpu_lock']} | "
                         f"{fmt(r['ours_verdicts_per_s'], '.3f')} | {fmt(r['baseline_verdicts_per_s'], '.3f')} | "
                         f"{'-' if r['ratio'] is None else format(r['ratio'], '.2f') + 'x'} | {fmt(r['ours_p50_s'])} | "
                         f"{fmt(r['baseline_p50_s'])} |{' (partial)' if r['partial'] else ''}")
        lines.append("")
    lines += ["| judge | pool | prewarm | GPU lock | n | p50 s | p95 s | throughput /min | vs baseline | statuses | "
              "median worker start s | median compile s | median correctness s | median reference s | "
              "median GPU-lock wait s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios = {(r["pool"], r["prewarm"], r["gpu_lock"]): r["ratio"] for r in sweep}
    for row in result["runs"]:
        s = row["summary"]
        ratio = ratios.get((row["pool"], row.get("prewarm"), row.get("gpu_lock"))) if row["judge"] == "kernelflow" else None
        statuses = ", ".join(f"{k} {v}" for k, v in s["statuses"].items())
        lines.append(f"| {row['judge']} | {row['pool']} | {row.get('prewarm', '-')} | {row.get('gpu_lock', '-')} | "
                     f"{s['n']}{' (partial)' if s.get('partial') else ''} | {fmt(s['p50_s'])} | "
                     f"{fmt(s['p95_s'])} | {fmt(s['throughput_per_min'], '.1f')} | "
                     f"{'-' if ratio is None else f'{ratio:.2f}x'} | {statuses} | {fmt(s.get('median_worker_start_s'))} | "
                     f"{fmt(s.get('median_compile_s'))} | {fmt(s.get('median_correctness_s'))} | "
                     f"{fmt(s.get('median_reference_s'))} | {fmt(s.get('median_gpu_wait_s'))} |")
    for w in result.get("warmups", []):
        lines.append(f"\nWarm-up ({w['what']}): {fmt(w['wall_s'])} s, statuses {w['statuses']}, pool fill "
                     f"{fmt(w.get('pool_fill_s'))} s")
    single = result.get("idle_pool_single") or {}
    if single:
        lines += ["", "Single ReLU control, idle pool (warm evaluator): latency / (compile + all calls, i.e. the worker's "
                  "share of correctness_s + timing_s):", ""]
        for k, v in single.items():
            lines.append(f"- prewarm {k} ({v.get('evaluator', '')}, {v.get('n')} verdicts): p50 {fmt(v['p50_s'])} s, "
                         f"compile + calls {fmt(v['p50_compile_plus_calls_s'])} s, ratio {fmt(v['p50_ratio'])}")
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
    if result.get("cuts"):
        lines += ["", "Cut (budget or flags): " + "; ".join(result["cuts"])]
    return "\n".join(lines) + "\n"


def build_config(args) -> tuple[EvalConfig, dict]:
    """The judging settings: conf/eval/gpu.yaml as is with --defaults, else the pre-#19 benchmark settings."""
    sets = parse_sets(args.set)
    for flag, key in (("backend", "backend"), ("shape", "shape"), ("seeds", "seeds"), ("timed_runs", "timed_runs"),
                      ("timeout_s", "timeout_s")):
        value = getattr(args, flag)
        if value is not None and not (flag == "backend" and value == "auto" and not args.defaults):
            sets[key] = value
    if args.defaults:
        config, dropped = load_eval_config(args.conf_eval, sets)
        return config, {"settings": f"conf/eval/{args.conf_eval}.yaml" + (f" + {sets}" if sets else ""),
                        "dropped_keys": dropped}
    backend = sets.pop("backend", "auto")
    if backend == "auto":
        backend = "cuda" if torch.cuda.is_available() else "interpret"
    cuda = backend == "cuda"
    shape = sets.pop("shape", None) or ("full" if cuda else "small")
    base = dict(backend=backend, shape=shape, seeds=3 if cuda else 1, timed_runs=20 if cuda else 1,
                timeout_s=300 if shape == "full" else 120)
    base.update(sets)
    return EvalConfig(**base), {"settings": "benchmark (pre-#19)" + (f" + {sets}" if sets else ""), "dropped_keys": []}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--defaults", action="store_true",
                        help="judging settings from conf/eval/gpu.yaml as is (--conf-eval picks another file)")
    parser.add_argument("--conf-eval", default="gpu", help="with --defaults: conf/eval/<NAME>.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one EvalConfig key")
    parser.add_argument("--backend", choices=["auto", "cuda", "interpret"], default=None)
    parser.add_argument("--shape", choices=["small", "full"], default=None, help="default: full on cuda, small otherwise")
    parser.add_argument("--pool-sizes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seeds", type=int, default=None, help="default: 3 on cuda, 1 under the interpreter")
    parser.add_argument("--timed-runs", type=int, default=None, help="default: 20 on cuda, 1 under the interpreter")
    parser.add_argument("--timeout-s", type=float, default=None)
    parser.add_argument("--single-repeats", type=int, default=3, help="idle-pool single-verdict repeats")
    parser.add_argument("--single-prewarm", nargs="*", choices=["off", "on"], default=["off", "on"],
                        help="the idle-pool single verdicts to measure (none: skip)")
    parser.add_argument("--hang-timeout-s", type=float, default=10.0, help="0: skip the timeout comparison")
    parser.add_argument("--skip-hang", action="store_true", help="skip the timeout comparison (= --hang-timeout-s 0)")
    parser.add_argument("--skip-cache", action="store_true", help="skip the verdict-cache measurements")
    parser.add_argument("--env-server", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--prewarm", choices=["off", "on", "both", "config"], default=None,
                        help="pre-warmed workers: off, on (--prewarm-workers, default P), both, or config (the "
                             "settings' prewarm_workers as they are); default: config with --defaults, else both")
    parser.add_argument("--prewarm-workers", type=prewarm_value, default=None,
                        help="pool size when prewarm is on (an int or e.g. 'auto'); default: P (shared: the largest P)")
    parser.add_argument("--gpu-lock", nargs="+", choices=list(GPU_LOCK_MODES), default=None,
                        help="GPU-lock modes to compare (EvalConfig.gpu_lock); default: the settings' with --defaults, "
                             "else exclusive")
    parser.add_argument("--evaluator", choices=["per-pool", "shared"], default="per-pool",
                        help="per-pool: a fresh evaluator of max_workers=P per P; shared: one evaluator (max_workers = "
                             "the largest P) for every P, P client threads each")
    parser.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                        help="judge the ten controls once, unmeasured, before an evaluator's first measured batch")
    parser.add_argument("--kernelflow", action=argparse.BooleanOptionalAction, default=True,
                        help="--no-kernelflow: the baselines only")
    parser.add_argument("--baseline-pools", type=int, nargs="*", default=None,
                        help="P values for the baseline, in priority order (default: --pool-sizes; none: skip)")
    parser.add_argument("--budget-s", type=float, default=None, help="soft time budget of the whole run (see the docstring)")
    parser.add_argument("--est-baseline-sample-s", type=float, default=None,
                        help="baseline seconds per sample before one is measured (default 11 on cuda, 3 otherwise)")
    parser.add_argument("--out", default="benchmark-results")
    args = parser.parse_args()
    t_start = time.monotonic()
    deadline = None if args.budget_s is None else t_start + args.budget_s
    config, how = build_config(args)
    backend = config.backend if config.backend != "auto" else ("cuda" if torch.cuda.is_available() else "interpret")
    config = replace(config, backend=backend, verdict_cache_size=0)
    cuda = backend == "cuda"
    shape = config.shape
    prewarm_mode = args.prewarm or ("config" if args.defaults else "both")
    lock_modes = args.gpu_lock or ([config.gpu_lock] if args.defaults else ["exclusive"])
    baseline_pools = args.pool_sizes if args.baseline_pools is None else args.baseline_pools
    hang_s = 0.0 if args.skip_hang else args.hang_timeout_s
    est_sample = args.est_baseline_sample_s or (11.0 if cuda else 3.0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    batch = mixed_batch()
    device = torch.cuda.get_device_name(0) if cuda else f"CPU ({platform.processor() or platform.machine()})"
    result = {"meta": {"date": datetime.now(UTC).isoformat(timespec="seconds"), "backend": backend, "shape": shape,
                       "device": device, "cpus": os.cpu_count(), "host": platform.node(), "torch": torch.__version__,
                       "triton": triton.__version__, "cuda": torch.version.cuda,
                       "python": platform.python_version(), "platform": platform.platform(),
                       "evaluator_version": EVALUATOR_VERSION, "seeds": config.seeds, "timed_runs": config.timed_runs,
                       "compile_baseline": config.compile_baseline, **how, "config": config.__dict__ | {"reward": None},
                       "batch_size": len(batch), "pool_sizes": args.pool_sizes, "baseline_pools": baseline_pools,
                       "evaluator_mode": args.evaluator, "warmup": args.warmup, "prewarm": prewarm_mode,
                       "gpu_lock_modes": lock_modes, "budget_s": args.budget_s, "calibration": None},
              "runs": [], "warmups": [], "cuts": []}
    if how["dropped_keys"]:
        log(f"warning: keys of conf/eval/{args.conf_eval}.yaml that EvalConfig does not know were dropped: "
            f"{how['dropped_keys']}")
    log(f"settings: {how['settings']}; backend {backend}, shape {shape}, seeds {config.seeds}, timed_runs "
        f"{config.timed_runs}, prewarm {prewarm_mode}, gpu lock {lock_modes}, evaluator {args.evaluator}")

    def save():
        result["meta"]["elapsed_s"] = time.monotonic() - t_start
        (out / "eval_throughput.json").write_text(json.dumps(result, indent=1, default=str))
        (out / "eval_throughput.md").write_text(markdown(result))

    def cut(what: str) -> None:
        result["cuts"].append(what)
        log(f"CUT: {what}")
        save()

    def left() -> float:
        return float("inf") if deadline is None else deadline - time.monotonic()

    def prewarm_count(pool: int, mode_p: str):
        return {"off": 0, "on": args.prewarm_workers if args.prewarm_workers is not None else pool,
                "config": config.prewarm_workers}[mode_p]

    def note_calibration(ev: Evaluator) -> None:
        result["meta"]["calibration"] = ev.info().get("calibration")

    prewarm_modes = {"off": ["off"], "on": ["on"], "both": ["off", "on"], "config": ["config"]}[prewarm_mode]
    kept: dict[str, Evaluator] = {}  # warm shared evaluators, kept for the single verdicts (prewarm label -> ev)
    try:
        if not args.kernelflow:
            cut("kernelflow batches (--no-kernelflow)")
        for lock_mode in lock_modes if args.kernelflow else []:
            for mode_p in prewarm_modes:
                cfg = replace(config, gpu_lock=lock_mode)
                shared = None
                if args.evaluator == "shared":
                    top = max(args.pool_sizes)
                    shared = Evaluator(replace(cfg, max_workers=top, prewarm_workers=prewarm_count(top, mode_p)))
                    if args.warmup:
                        log(f"warm-up: shared evaluator (max_workers {top}, prewarm_workers "
                            f"{shared.config.prewarm_workers}, gpu lock {lock_mode})")
                        w = warm_up(shared, top, deadline)
                        result["warmups"].append({"what": f"shared, lock {lock_mode}, prewarm {mode_p}", **w})
                        note_calibration(shared)
                        save()
                    single_label = "on" if pool_of(shared) is not None else "off"
                    if single_label in args.single_prewarm and single_label not in result.get("idle_pool_single", {}):
                        # first, while the warm evaluator is idle: the single warm verdict is cheap and must not be cut
                        log(f"idle pool, single ReLU verdicts, prewarm {single_label} (the shared evaluator)")
                        result.setdefault("idle_pool_single", {})[single_label] = idle_pool_single(
                            config, single_label == "on", args.single_repeats, ev=shared, deadline=deadline)
                        save()
                for pool in args.pool_sizes:
                    if left() <= 0:
                        cut(f"kernelflow P={pool} lock {lock_mode} prewarm {mode_p} (budget)")
                        continue
                    ev = shared or Evaluator(replace(cfg, max_workers=pool, prewarm_workers=prewarm_count(pool, mode_p)))
                    try:
                        if shared is None and args.warmup:
                            log(f"warm-up: evaluator P={pool}")
                            w = warm_up(ev, pool, deadline)
                            result["warmups"].append({"what": f"P={pool}, lock {lock_mode}, prewarm {mode_p}", **w})
                        fill = wait_warm(ev)
                        label = mode_p
                        log(f"pool size {pool}: kernelflow, prewarm {label} ({ev.config.prewarm_workers} workers"
                            f"{'' if fill is None else f', warm in {fill:.1f} s'}), gpu lock {lock_mode}")
                        tag = f"kernelflow P={pool} prewarm={label} lock={lock_mode}"
                        kf = judge_batch(ev, batch, pool, tag, deadline)
                        note_calibration(ev)
                        result["runs"].append({"judge": "kernelflow", "pool": pool, "prewarm": label,
                                               # the pool's real size ("auto" resolved when the evaluator started)
                                               "prewarm_workers": pool_of(ev).size if pool_of(ev) else 0,
                                               "max_workers": ev.config.max_workers, "gpu_lock": lock_mode,
                                               "summary": kf})
                        save()
                    finally:
                        if shared is None:
                            ev.close()
                if shared is not None:  # kept (warm) for the single verdicts; an older one of the same kind goes
                    ev_label = "on" if pool_of(shared) is not None else "off"
                    if ev_label in kept:
                        kept[ev_label].close()
                    kept[ev_label] = shared
        for p in args.single_prewarm:
            if p in result.get("idle_pool_single", {}):
                continue
            if left() <= 0:
                cut(f"single verdicts prewarm {p} (budget)")
                continue
            log(f"idle pool, single ReLU verdicts, prewarm {p}")
            result.setdefault("idle_pool_single", {})[p] = idle_pool_single(config, p == "on", args.single_repeats,
                                                                            ev=kept.get(p), deadline=deadline)
            save()
        if not args.single_prewarm:
            cut("single verdicts (--single-prewarm with none)")
    finally:
        for ev in kept.values():
            ev.close()
    for pool in baseline_pools:
        measured = [r["latency_s"] for run in result["runs"] if run["judge"] == "kernelbench-style"
                    for r in run["summary"]["rows"] if r["status"] == "ok"]
        per_sample = statistics.mean(measured) if measured else est_sample
        estimate = -(-len(batch) // pool) * per_sample * (1 + 0.05 * (pool - 1))
        if estimate > left():
            cut(f"baseline P={pool} (estimated {estimate:.0f} s, {max(0.0, left()):.0f} s of budget left)")
            continue
        log(f"pool size {pool}: baseline (estimated {estimate:.0f} s)")
        base = run_baseline(backend, shape, batch, pool, config.timeout_s, deadline)
        result["runs"].append({"judge": "kernelbench-style", "pool": pool, "summary": base})
        save()
    if not baseline_pools:
        cut("baselines (--baseline-pools with none)")
    for r in result["runs"]:  # the ratio on every kernelflow row, now that the baselines are in
        if r["judge"] == "kernelflow":
            match = [x for x in sweep_rows(result) if (x["pool"], x["prewarm"], x["gpu_lock"]) ==
                     (r["pool"], r["prewarm"], r["gpu_lock"])]
            r["throughput_vs_baseline"] = match[0]["ratio"] if match else None
    result["sweep"] = sweep_rows(result)
    save()
    if args.skip_cache:
        cut("verdict cache (--skip-cache)")
    elif left() > 0:
        log("verdict cache")
        result["cached_in_process"] = cached_in_process(config, 20)
        if args.env_server:
            result["cached_env_server"] = cached_through_env_server(config, 10)
        save()
    else:
        cut("verdict cache (budget)")
    if hang_s > 0 and left() > 2 * hang_s:
        log(f"timeouts ({hang_s} s limit)")
        ev = Evaluator(replace(config, max_workers=1, timeout_s=hang_s, verdict_cache_size=0))
        t0 = time.monotonic()
        v = ev.evaluate("19_ReLU", unique(HANG))
        kf_s = time.monotonic() - t0
        ev.close()
        status, base_s, _ = baseline_sample(backend, shape, "19_ReLU", unique(HANG), hang_s)
        result["timeouts"] = {"limit_s": hang_s, "kernelflow_status": v.status, "kernelflow_s": kf_s,
                              "baseline_status": status, "baseline_s": base_s}
    elif hang_s > 0:
        cut("timeouts (budget)")
    save()
    print(markdown(result))
    log(f"done in {time.monotonic() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
