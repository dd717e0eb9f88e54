"""Where a verdict's first call spends its time (issue 7): the judge's side and the worker's, per call.

    python benchmarks/first_call_profile.py --backend cuda --shape full --verdicts 3 --out results/   # GPU host
    python benchmarks/first_call_profile.py --backend interpret --shape small --verdicts 1 --out /tmp/p

On the H200 the first call of a full-shape ReLU verdict took 5.5-7.4 s (`compile_s`), against 1.5 s for
the same kernel's first call in a KernelBench-style process (docs/eval_speed.md), and it is most of a
warm verdict's time. This splits it, without changing what is judged: the judge's methods are wrapped
in this process (mapping the shared buffers, the whole call as the judge sees it, its reference work)
and the worker's reply says how long it spent before the forward (`setup_ms`: poisoning freed memory,
the timer-overhead measurement, the L2 flush), in the forward (`host_ms`: Triton's compilation and the
run on the first call) and copying the output back (`copy_ms`). What is left of the judge's wall is
messaging, input generation and the NaN fill of the output buffer.

Verdicts are judged one at a time with one pre-warmed worker (`prewarm_workers=1`) and the verdict
cache off, so each is a fresh worker with a cold Triton cache, as in training. Writes
`first_call_profile.json` and `.md` under `--out`.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks run from a checkout; tests/helpers holds the controls

from kernelflow.eval import EVALUATOR_VERSION, EvalConfig, Evaluator  # noqa: E402
from kernelflow.eval import session as session_module  # noqa: E402
from kernelflow.eval.session.buffers import SharedInputs  # noqa: E402
from tests.helpers.solutions import solution_source  # noqa: E402

SESSIONS: dict[int, dict] = {}  # id(session's worker link) -> what was measured in it


def _empty() -> dict:
    return {"map_s": 0.0, "calls": [], "reference_s": []}


def _record(session) -> dict:
    return SESSIONS.setdefault(id(session), _empty())


def instrument() -> None:
    """Wrap the judge's per-call methods so each session's calls are timed (this process only)."""
    cls = session_module.JudgeSession
    run_call, reference = cls._run_call, cls._reference
    for_shapes = SharedInputs.for_shapes

    def timed_for_shapes(self, shapes, link):
        miss = shapes not in self.slots
        t = time.monotonic()
        try:
            return for_shapes(self, shapes, link)
        finally:
            if miss:
                _record(link)["map_s"] += time.monotonic() - t

    def timed_run_call(self, index, spec, ref=None):
        t = time.monotonic()
        out = run_call(self, index, spec, ref)
        reply = out[0]
        _record(self.link)["calls"].append({
            "label": spec.label, "first": index == 0, "judge_s": time.monotonic() - t,
            "host_ms": getattr(reply, "host_ms", None), "ms": out[3],
        })
        return out

    def timed_reference(self, spec):
        t = time.monotonic()
        try:
            return reference(self, spec)
        finally:
            _record(self.link)["reference_s"].append(time.monotonic() - t)

    cls._run_call, cls._reference = timed_run_call, timed_reference
    SharedInputs.for_shapes = timed_for_shapes


def summarise(measured: dict, verdict) -> dict:
    calls = measured["calls"]
    first = next((c for c in calls if c["first"]), None)
    rest = [c for c in calls if not c["first"]]

    def ms(c, key):
        return (c.get(key) or 0.0) / 1e3

    row = {"status": verdict.status, "wall_time": verdict.wall_time.__dict__ if verdict.wall_time else None,
           "map_s": measured["map_s"], "calls": len(calls), "reference_s_total": sum(measured["reference_s"])}
    if first is not None:
        worker = ms(first, "setup_ms") + ms(first, "host_ms") + ms(first, "copy_ms")
        row["first"] = {
            "judge_s": first["judge_s"], "map_s": measured["map_s"], "worker_setup_s": ms(first, "setup_ms"),
            "forward_s": ms(first, "host_ms"), "copy_s": ms(first, "copy_ms"),
            "rest_s": first["judge_s"] - measured["map_s"] - worker,
        }
    if rest:
        row["later_median"] = {k: statistics.median(v for v in vals) for k, vals in {
            "judge_s": [c["judge_s"] for c in rest], "worker_setup_s": [ms(c, "setup_ms") for c in rest],
            "forward_s": [ms(c, "host_ms") for c in rest], "copy_s": [ms(c, "copy_ms") for c in rest],
        }.items()}
    return row


def markdown(result: dict) -> str:
    m = result["meta"]
    lines = [f"# First-call profile ({m['date']})", "",
             f"backend `{m['backend']}`, shape `{m['shape']}`, task `{m['task']}`, device {m['device']}, "
             f"torch {m['torch']}, triton {m['triton']}, evaluator {m['evaluator_version']}; one pre-warmed "
             "worker, verdict cache off, verdicts judged one at a time.", "",
             "| verdict | status | compile_s (verdict) | first call, judge s | map buffers s | worker setup s | "
             "forward s (compile + run) | copy out s | rest s | later calls: judge s (median) | forward s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(result["verdicts"], 1):
        f, later = r.get("first", {}), r.get("later_median", {})
        wt = r.get("wall_time") or {}

        def g(d, k):
            v = d.get(k)
            return f"{v:.3f}" if isinstance(v, (int, float)) else "-"
        lines.append(f"| {i} | {r['status']} | {g(wt, 'compile_s')} | {g(f, 'judge_s')} | {g(f, 'map_s')} | "
                     f"{g(f, 'worker_setup_s')} | {g(f, 'forward_s')} | {g(f, 'copy_s')} | {g(f, 'rest_s')} | "
                     f"{g(later, 'judge_s')} | {g(later, 'forward_s')} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("cuda", "interpret"), default="cuda")
    parser.add_argument("--shape", choices=("full", "small"), default="full")
    parser.add_argument("--task", default="19_ReLU")
    parser.add_argument("--verdicts", type=int, default=3)
    parser.add_argument("--out", default="benchmark-results")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    instrument()
    evaluator = Evaluator(EvalConfig(backend=args.backend, shape=args.shape, max_workers=1, prewarm_workers=1,
                                     verdict_cache_size=0))
    info = evaluator.info()
    source = solution_source(args.task)
    rows = []
    for i in range(args.verdicts):
        before = set(SESSIONS)
        # A nonce keeps every source unique, as in a GRPO group of different answers.
        verdict = evaluator.evaluate(args.task, f"{source}\n# profile {i} {time.time_ns()}\n")
        new = [SESSIONS[k] for k in SESSIONS if k not in before]
        rows.append(summarise(new[0] if new else _empty(), verdict))
        print(json.dumps(rows[-1].get("first")), flush=True)
    evaluator.close()
    result = {"meta": {"date": datetime.now(UTC).isoformat(timespec="seconds"), "backend": args.backend,
                       "shape": args.shape, "task": args.task, "device": info["device"], "torch": torch.__version__,
                       "triton": triton.__version__, "python": platform.python_version(),
                       "evaluator_version": EVALUATOR_VERSION},
              "verdicts": rows}
    (out / "first_call_profile.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "first_call_profile.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
