"""Reward repeatability (issue #19): the ten honest controls judged in N fresh evaluator processes, alone and loaded.

    python benchmarks/reward_spread.py --processes 5 --time-budget-s 480 --out results/spread       # GPU host
    python benchmarks/reward_spread.py --backend interpret --shape small --seeds 1 --timed-runs 1 \\
        --processes 2 --out /tmp/spread                                                            # anywhere

Every process is a fresh `python` (this script with `--child`), so nothing in-process is shared between
them: not the device calibration, the judge-clock calibration, the eager / torch.compile timings, the
reference cache or the input salt. In each process the controls are judged in two modes, each verdict a
unique submission (a nonce comment) with the verdict cache off, so every one really runs:

- `alone`: one verdict at a time;
- `loaded`: every measured verdict runs while P (`--others`, default 4) other verdicts run beside it in the
  same evaluator (max_workers >= 1 + P). 1 + P threads judge; `--measured-at-once K` of them draw the
  measured controls (K = 1: one measured verdict at a time beside P fillers; K = 1 + P, the default: the
  measured controls run beside each other), and a thread with no measured control left submits fillers
  (unique copies of the controls, never recorded) until every measured verdict is done. Each measured
  verdict records how many others were in flight when it started and when it ended.

By default both modes run in the same process (alone first, one evaluator of max_workers = 1 + P);
`--separate-modes` gives each mode its own fresh process (slower: the one-off costs are paid twice).
Per control and mode: the rewards and runtimes per process, spread = (max - min) / mean of each, and
pass when the reward spread is at most `--max-spread` (2%). The settings are conf/eval/gpu.yaml's as
they are (`--conf-eval`, `--set KEY=VALUE` and the flags below override single keys; `--prewarm on` sets
prewarm_workers to the mode's concurrency, `--prewarm N|auto` to that value, `config` keeps the file's).

`--time-budget-s` stops cleanly: a process is started only while its estimated time (the longest one so
far) fits, a running one stops taking verdicts at the deadline and is killed `--kill-after-s` (30 s) after it, and the
JSON and markdown under `--out` are rewritten after every process (a child rewrites its own after every
verdict, so a killed one keeps what it judged). Under the interpreter every reward is 0.3 and there are
no runtimes: the run then only proves the script.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODES = ("alone", "loaded")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def others_mean(own: tuple[float, float], intervals: list[tuple[float, float]]) -> float | None:
    """The time-weighted mean number of other verdicts in flight during `own` (which is in `intervals`)."""
    s, e = own
    if e <= s:
        return None
    overlap = sum(max(0.0, min(e, b) - max(s, a)) for a, b in intervals)
    return overlap / (e - s) - 1.0  # minus `own` itself


# ---- child: one fresh evaluator process ---------------------------------------------------------------


def child(args) -> int:
    import torch  # noqa: F401 - imported here so the parent stays light

    from benchmarks.eval_throughput import unique, wait_warm
    from kernelflow.config_dicts import config_from_dict
    from kernelflow.eval import EvalConfig, Evaluator
    from tests.helpers.solutions import solution_source

    spec = json.loads(Path(args.child_spec).read_text())
    config = config_from_dict(EvalConfig, spec["config"], "config")
    tasks, modes, others, at_once = spec["tasks"], spec["modes"], spec["others"], spec["measured_at_once"]
    deadline = spec["deadline"]  # time.time() based: shared with the parent
    sources = {t: solution_source(t) for t in dict.fromkeys(tasks + spec["filler_tasks"])}
    out_path = Path(args.child_out)
    record = {"pid": os.getpid(), "started": datetime.now(UTC).isoformat(timespec="seconds"), "verdicts": [],
              "fillers": 0, "info": None, "stopped_early": False}
    lock = threading.Lock()

    def save():
        with lock:  # the write and the rename too: two verdicts ending at once shared one temp file
            text = json.dumps(record, indent=1, default=str)
            tmp = out_path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(out_path)

    def over() -> bool:
        return time.time() > deadline

    loaded = "loaded" in modes
    workers = max(config.max_workers, 1 + others) if loaded else config.max_workers
    prewarm = spec["prewarm"]
    if prewarm == "on":
        prewarm = 1 + others if loaded else 1
    elif prewarm == "off":
        prewarm = 0
    elif prewarm != "config":
        prewarm = int(prewarm) if str(prewarm).isdigit() else prewarm
    cfg = replace(config, max_workers=workers, verdict_cache_size=0,
                  **({} if prewarm == "config" else {"prewarm_workers": prewarm}))
    ev = Evaluator(cfg)
    in_flight = 0
    intervals: list[tuple[float, float]] = []  # every verdict's (start, end), measured or filler
    record["intervals"] = intervals  # saved with the record, so a killed child's rows still get others_mean
    try:
        record["settings"] = {"max_workers": cfg.max_workers, "prewarm_workers": cfg.prewarm_workers}
        fill_s = wait_warm(ev)
        log(f"process {spec['index']}: evaluator ready (max_workers {cfg.max_workers}, prewarm_workers "
            f"{cfg.prewarm_workers}{'' if fill_s is None else f', pool warm in {fill_s:.1f} s'})")

        def judge(mode: str, task_id: str, measured: bool) -> None:
            nonlocal in_flight
            with lock:
                in_flight += 1
                others_start = in_flight - 1
            t0 = time.monotonic()
            try:
                v = ev.evaluate(task_id, unique(sources[task_id]))
            finally:
                with lock:
                    others_end = in_flight - 1
                    in_flight -= 1
                    t1 = time.monotonic()
                    intervals.append((t0, t1))
            dt = t1 - t0
            if not measured:
                with lock:
                    record["fillers"] += 1
                return
            row = {"mode": mode, "task_id": task_id, "status": v.status, "reward": v.reward,
                   "runtime_ms": v.runtime_ms, "runtime_min_ms": v.runtime_min_ms, "runtime_max_ms": v.runtime_max_ms,
                   "t_min_ms": v.t_min_ms, "latency_s": dt, "others_at_start": others_start,
                   "others_at_end": others_end, "interval": (t0, t1), "wall_time": v.wall_time.__dict__ if v.wall_time else None,
                   "feedback": None if v.status == "ok" else (v.feedback or "")[:600]}
            with lock:
                record["verdicts"].append(row)
                if record["info"] is None and v.status == "ok":
                    record["info"] = ev.info()
            save()
            rt = "-" if v.runtime_ms is None else f"{v.runtime_ms:.4f} ms"
            log(f"process {spec['index']} {mode:<6} {task_id:<18} {v.status:<10} reward {v.reward:.4f} runtime {rt} "
                f"latency {dt:5.2f} s others {others_start}/{others_end}")

        def run_loaded() -> None:
            # loaded: 1 + others threads; the first `at_once` draw measured controls, all fill when none are left
            queue = list(tasks)
            pending = len(tasks)  # measured verdicts not yet finished (or dropped at the deadline)
            done = threading.Event()
            if not pending:
                done.set()
            fill_cycle = itertools.cycle(spec["filler_tasks"])

            def next_measured():
                nonlocal pending
                with lock:
                    if queue and over():  # the budget is spent: the rest is not judged
                        record["stopped_early"] = True
                        pending -= len(queue)
                        queue.clear()
                        if pending <= 0:
                            done.set()
                    return queue.pop(0) if queue else None

            def finish_one():
                nonlocal pending
                with lock:
                    pending -= 1
                    if pending <= 0:
                        done.set()

            def thread_main(index: int) -> None:
                if index < at_once:
                    while (task_id := next_measured()) is not None:
                        try:
                            judge("loaded", task_id, True)
                        finally:
                            finish_one()
                while not done.is_set():  # keep P others beside every measured verdict still in flight
                    with lock:
                        filler = next(fill_cycle)
                    judge("loaded", filler, False)

            threads = [threading.Thread(target=thread_main, args=(i,), daemon=True) for i in range(1 + others)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for row in record["verdicts"]:  # the time-weighted mean number of other verdicts in flight beside it
                if row["mode"] == "loaded" and "others_mean" not in row:
                    row["others_mean"] = others_mean(row["interval"], intervals)
            save()

        for mode in modes:
            if mode == "alone":
                for task_id in tasks:
                    if over():
                        record["stopped_early"] = True
                        break
                    judge("alone", task_id, True)
            else:
                run_loaded()
        if record["info"] is None:
            record["info"] = ev.info()
    finally:
        record["stats"] = ev.stats()
        record["ended"] = datetime.now(UTC).isoformat(timespec="seconds")
        ev.close()
        save()
    return 0


# ---- parent: N fresh processes, the table ------------------------------------------------------------------


def spread(values: list[float]) -> float | None:
    """(max - min) / mean; None for fewer than two values or a zero mean."""
    if len(values) < 2:
        return None
    mean = statistics.mean(values)
    return (max(values) - min(values)) / mean if mean else None


def summarise(result: dict, max_spread: float, wanted: int) -> dict:
    table = {}
    for mode in result["meta"]["modes"]:
        rows = {}
        for task_id in result["meta"]["tasks"]:
            got = [(p["index"], v) for p in result["processes"] for v in p.get("verdicts", [])
                   if v["mode"] == mode and v["task_id"] == task_id]
            rewards = [v["reward"] for _, v in got]
            runtimes = [v["runtime_ms"] for _, v in got if v["runtime_ms"] is not None]
            rs = spread(rewards)
            rows[task_id] = {"n": len(got), "processes": [i for i, _ in got], "statuses": [v["status"] for _, v in got],
                             "rewards": rewards, "runtimes_ms": runtimes, "reward_spread": rs,
                             "runtime_spread": spread(runtimes),
                             "others_at_start": [v["others_at_start"] for _, v in got],
                             "others_at_end": [v["others_at_end"] for _, v in got],
                             "others_mean": [v.get("others_mean") for _, v in got],
                             "pass": None if rs is None else bool(rs <= max_spread and all(
                                 v["status"] == "ok" for _, v in got))}
        complete = all(r["n"] >= wanted for r in rows.values())
        verdict = all(r["pass"] for r in rows.values()) if rows and all(r["pass"] is not None for r in rows.values()) else None
        table[mode] = {"rows": rows, "all_pass": verdict, "complete": complete}
    return table


def fmt(v, spec=".4f"):
    return "-" if v is None else format(v, spec)


def markdown(result: dict) -> str:
    m = result["meta"]
    lines = [f"# Reward spread over fresh evaluator processes ({m['date']})", "",
             f"Host {m['host']} ({m['cpus']} CPUs), device {m['device']}, torch {m['torch']}, triton {m['triton']}, "
             f"CUDA {m['cuda']}, Python {m['python']}; evaluator {m['evaluator_versions']}, calibration "
             f"{m['calibration_sources']}; settings {m['settings']} (backend {m['config']['backend']}, shape "
             f"{m['config']['shape']}, seeds {m['config']['seeds']}, timed_runs {m['config']['timed_runs']}, gpu_lock "
             f"{m['config']['gpu_lock']}), prewarm {m['prewarm']} (in the processes: {m.get('process_settings')}); "
             f"loaded: {m['others']} others beside each measured verdict, {m['measured_at_once']} measured at once; "
             f"{len(result['processes'])} of {m['processes']} processes ran, "
             f"{'one process per mode' if m['separate_modes'] else 'both modes in each process (alone first)'}; "
             f"pass: reward spread (max - min) / mean <= {m['max_spread']:.0%}.", ""]
    for mode, t in result.get("table", {}).items():
        incomplete = "" if t["complete"] else " (incomplete: fewer processes than asked)"
        lines += [f"## {mode}: all pass = {t['all_pass']}{incomplete}", "",
                  "| task | n | statuses | rewards | reward spread | runtimes ms | runtime spread | others beside (mean) "
                  "| pass |", "|---|---|---|---|---|---|---|---|---|"]
        for task_id, r in t["rows"].items():
            st = ", ".join(f"{s} {r['statuses'].count(s)}" for s in sorted(set(r["statuses"])))
            others = ", ".join(fmt(x, ".1f") for x in r["others_mean"])
            lines.append(f"| {task_id} | {r['n']} | {st} | {', '.join(fmt(x) for x in r['rewards'])} | "
                         f"{fmt(r['reward_spread'], '.2%')} | {', '.join(fmt(x) for x in r['runtimes_ms'])} | "
                         f"{fmt(r['runtime_spread'], '.2%')} | {others} | {r['pass']} |")
        lines.append("")
    lines += ["Processes: " + "; ".join(f"#{p['index']} {'+'.join(p['modes'])} {p.get('wall_s', 0):.0f} s rc "
                                          f"{p.get('rc')} fillers {p.get('fillers')}" for p in result["processes"])]
    if result.get("cuts"):
        lines += ["", "Cut: " + "; ".join(result["cuts"])]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=5, help="fresh evaluator processes per mode")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--separate-modes", action="store_true", help="a fresh process per (repetition, mode)")
    parser.add_argument("--others", type=int, default=4, help="loaded: verdicts beside each measured one (P)")
    parser.add_argument("--measured-at-once", type=int, default=None, help="loaded: measured verdicts in flight "
                        "at once, 1 .. 1 + P (default 1 + P)")
    parser.add_argument("--tasks", nargs="+", default=None, help="default: the ten pilot controls")
    parser.add_argument("--conf-eval", default="gpu", help="conf/eval/<NAME>.yaml: the settings")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one EvalConfig key")
    parser.add_argument("--backend", choices=["auto", "cuda", "interpret"], default=None)
    parser.add_argument("--shape", choices=["small", "full"], default=None)
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--timed-runs", type=int, default=None)
    parser.add_argument("--prewarm", default="config", help="config (the settings' prewarm_workers), on (the mode's "
                        "concurrency), off, or a value for prewarm_workers (an int or e.g. auto)")
    parser.add_argument("--max-spread", type=float, default=0.02)
    parser.add_argument("--time-budget-s", type=float, default=None)
    parser.add_argument("--kill-after-s", type=float, default=30.0, help="a process still running this long after "
                        "the budget is killed (its verdicts so far are kept)")
    parser.add_argument("--out", default="benchmark-results/spread")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-spec", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    import torch
    import triton

    from benchmarks.eval_throughput import load_eval_config, parse_sets
    from kernelflow.tasks import TASKS

    t_start = time.time()
    deadline = t_start + args.time_budget_s if args.time_budget_s else float("inf")
    sets = parse_sets(args.set)
    for flag in ("backend", "shape", "seeds", "timed_runs"):
        if getattr(args, flag) is not None:
            sets[flag] = getattr(args, flag)
    config, dropped = load_eval_config(args.conf_eval, sets)
    if config.backend == "auto":
        config = replace(config, backend="cuda" if torch.cuda.is_available() else "interpret")
    tasks = args.tasks or list(TASKS)
    at_once = args.measured_at_once or 1 + args.others
    if not 1 <= at_once <= 1 + args.others:
        raise SystemExit(f"--measured-at-once {at_once}: give 1 .. {1 + args.others} (1 + --others)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cuda = config.backend == "cuda"
    result = {"meta": {"date": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
                       "cpus": os.cpu_count(), "platform": platform.platform(),
                       "device": torch.cuda.get_device_name(config.device_index) if cuda else "CPU (triton interpreter)",
                       "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
                       "python": platform.python_version(), "settings": f"conf/eval/{args.conf_eval}.yaml"
                       + (f" + {sets}" if sets else ""), "dropped_keys": dropped, "config": asdict(config),
                       "tasks": tasks, "modes": args.modes, "processes": args.processes, "others": args.others,
                       "measured_at_once": at_once, "separate_modes": args.separate_modes, "prewarm": args.prewarm,
                       "max_spread": args.max_spread, "time_budget_s": args.time_budget_s,
                       "evaluator_versions": [], "calibration_sources": []},
              "processes": [], "cuts": []}
    if dropped:
        log(f"warning: keys of conf/eval/{args.conf_eval}.yaml unknown to EvalConfig were dropped: {dropped}")

    def save():
        result["meta"]["elapsed_s"] = time.time() - t_start
        result["table"] = summarise(result, args.max_spread, args.processes)
        (out / "reward_spread.json").write_text(json.dumps(result, indent=1, default=str))
        (out / "reward_spread.md").write_text(markdown(result))

    groups = [[m] for m in args.modes] if args.separate_modes else [list(args.modes)]
    plan = [(i, g) for i in range(args.processes) for g in groups]
    filler_tasks = list(TASKS)
    log(f"{len(plan)} fresh processes ({args.processes} x {'+'.join(args.modes) if not args.separate_modes else 'each mode'}"
        f"), tasks {len(tasks)}, settings {result['meta']['settings']}, prewarm {args.prewarm}, budget "
        f"{args.time_budget_s or 'none'} s")
    longest = {}
    for n, (index, modes) in enumerate(plan):
        key = "+".join(modes)
        left = deadline - time.time()
        need = longest.get(key)
        if left <= 0 or (need is not None and need > left):
            rest = [f"#{i} {'+'.join(g)}" for i, g in plan[n:]]
            why = (f"estimated {need:.0f} s (the longest so far), {max(left, 0):.0f} s left" if need else "budget spent")
            result["cuts"].append(f"{len(rest)} process(es) not started ({', '.join(rest)}): {why}")
            log(f"CUT: {result['cuts'][-1]}")
            break
        spec = {"index": index, "config": asdict(config), "tasks": tasks, "modes": modes, "others": args.others,
                "measured_at_once": at_once, "prewarm": args.prewarm, "filler_tasks": filler_tasks,
                "deadline": deadline}
        stem = f"process{index}-{key.replace('+', '_')}"  # no "+": the device tool brings such names not back
        spec_path, child_out = out / f"{stem}.spec.json", out / f"{stem}.json"
        spec_path.write_text(json.dumps(spec, default=str))
        child_out.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        log(f"process {index} ({key}): starting")
        t0 = time.time()
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", "--child-spec", str(spec_path),
                                 "--child-out", str(child_out)], env=env, cwd=str(ROOT), start_new_session=True)
        try:
            rc = proc.wait(timeout=None if deadline == float("inf") else max(1.0, deadline - time.time() + args.kill_after_s))
        except subprocess.TimeoutExpired:
            log(f"process {index}: still running {args.kill_after_s:.0f} s after the budget; killing its process group")
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
            result["cuts"].append(f"process #{index} {key} killed {args.kill_after_s:.0f} s past the budget (its verdicts "
                                  "so far are kept)")
        wall = time.time() - t0
        longest[key] = max(longest.get(key, 0.0), wall)
        rec = json.loads(child_out.read_text()) if child_out.exists() else {"verdicts": []}
        rec.update(index=index, modes=modes, wall_s=wall, rc=rc)
        for row in rec["verdicts"]:  # a child killed before its loaded pass ended did not compute these
            if row["mode"] == "loaded" and row.get("others_mean") is None:
                row["others_mean"] = others_mean(tuple(row["interval"]), [tuple(x) for x in rec.get("intervals", [])])
        if rec.get("stopped_early"):
            result["cuts"].append(f"process #{index} {key} stopped at the budget before judging every control")
        info = rec.get("info") or {}
        for k, field in (("evaluator_versions", "evaluator_version"), ("calibration_sources", "calibration")):
            if info.get(field) is not None and info[field] not in result["meta"][k]:
                result["meta"][k].append(info[field])
        result["meta"]["process_settings"] = rec.get("settings")
        result["processes"].append(rec)
        save()
        log(f"process {index} ({key}): rc {rc}, {len(rec['verdicts'])} measured verdicts, {rec.get('fillers')} fillers, "
            f"{wall:.0f} s")
    save()
    print(markdown(result))
    log(f"done in {time.time() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
