"""The GPU gate's verdict: one summary of `scripts/gpu_session.sh OUT gate` (pytest -m gpu, the ten honest
controls at full shape, a short throughput smoke), green only if every part is.

    python benchmarks/gpu_gate.py OUT/gate [--expected benchmarks/gate_expected.json]

Reads what the gate's three parts left in the folder (`gpu-tests.log`: pytest's verbose output, read line by
line so that a run cut short by its limit still counts what finished; `controls/controls.json`;
`throughput/eval_throughput.json`) and writes `summary.md` and `summary.json` beside them. The parts:

- gpu-tests: both pytest runs (`gpu-tests.log`: the gpu tests 12 at a time; `gpu-alone.log`: those that read
  the clock, alone) finished, with every collected test passed or skipped and none failed or errored;
- controls: all ten `ok`, each reward within the stored tolerance of `gate_expected.json`;
- throughput: the mixed batch finished with exactly the expected statuses (verdicts/min and p50 reported).

Exit status 0 when the gate is green, 1 when any part is red or missing. It judges nothing itself.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

# "[gw3] [ 10%] PASSED tests/x.py::t" (xdist -v) or "tests/x.py::t PASSED" (plain -v)
_RESULT = re.compile(r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b\s+(tests/\S+)"
                     r"|(tests/\S+::\S+)\s+(PASSED|FAILED|ERROR|SKIPPED)")
_FINAL = re.compile(r"=+ (.*\d+ (passed|failed|error|skipped).*) in ([\d.]+)s")


def read_pytest(log: Path) -> dict:
    """Per-test outcomes from a `pytest -v` log (xdist or not), and whether pytest printed its final line."""
    if not log.is_file():
        return {"ok": False, "why": f"{log.name} is missing (the tests did not run)"}
    text = log.read_text(errors="replace")
    outcomes: dict[str, str] = {}
    for m in _RESULT.finditer(text):
        outcome, node = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
        outcomes[node] = outcome
    final = _FINAL.search(text)
    counts: dict[str, int] = {}
    for outcome in outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    bad = sorted(node for node, o in outcomes.items() if o in ("FAILED", "ERROR"))
    ok = bool(final) and not bad and counts.get("PASSED", 0) > 0
    why = "" if ok else ("failed: " + ", ".join(bad[:10]) if bad else "pytest did not finish (cut by its limit?)")
    return {"ok": ok, "why": why, "counts": counts, "failed": bad, "final": final.group(1) if final else None,
            "seconds": float(final.group(3)) if final else None}


def merge_pytest(*runs: dict) -> dict:
    """One result of several pytest runs: green only if each is."""
    counts: dict[str, int] = {}
    for run in runs:
        for outcome, n in run.get("counts", {}).items():
            counts[outcome] = counts.get(outcome, 0) + n
    whys = [r["why"] for r in runs if not r["ok"]]
    return {"ok": all(r["ok"] for r in runs), "why": "; ".join(whys), "counts": counts,
            "failed": [n for r in runs for n in r.get("failed", [])],
            "final": " + ".join(r.get("final") or "not finished" for r in runs),
            "seconds": sum(r.get("seconds") or 0 for r in runs)}


def read_controls(path: Path, expected: dict) -> dict:
    if not path.is_file():
        return {"ok": False, "why": f"{path} is missing (the controls did not finish)"}
    data = json.loads(path.read_text())
    rows, problems = [], []
    for row in data["rows"]:
        want = expected["rewards"].get(row["task_id"])
        change = None if not want else (row["reward"] - want) / want
        good = row["status"] == "ok" and change is not None and abs(change) <= expected["tolerance"]
        if not good:
            problems.append(f"{row['task_id']}: {row['status']} reward {row['reward']:.3f} (stored {want})")
        rows.append({"task_id": row["task_id"], "status": row["status"], "reward": row["reward"], "stored": want,
                     "change": change, "runtime_ms": row.get("runtime_ms"), "ok": good})
    missing = sorted(set(expected["rewards"]) - {r["task_id"] for r in rows})
    problems += [f"{t}: not judged" for t in missing]
    return {"ok": not problems, "why": "; ".join(problems), "rows": rows, "meta": data.get("meta", {})}


def read_throughput(path: Path, expected: dict) -> dict:
    if not path.is_file():
        return {"ok": False, "why": f"{path} is missing (the throughput smoke did not finish)"}
    data = json.loads(path.read_text())
    runs = [r for r in data.get("runs", []) if r.get("judge") == "kernelflow"]
    if not runs:
        return {"ok": False, "why": "no kernelflow batch in the throughput results"}
    s = runs[-1]["summary"]
    statuses = s.get("statuses", {})
    ok = statuses == expected["throughput_statuses"]
    return {"ok": ok, "why": "" if ok else f"statuses {statuses}, expected {expected['throughput_statuses']}",
            "pool": runs[-1].get("pool"), "verdicts_per_min": s.get("throughput_per_min"), "p50_s": s.get("p50_s"),
            "statuses": statuses, "meta": data.get("meta", {})}


def render(summary: dict) -> str:
    def mark(part):
        return "green" if part["ok"] else f"**red**: {part['why']}"

    meta = summary["controls"].get("meta") or summary["throughput"].get("meta") or {}
    lines = [f"# GPU gate: {'GREEN' if summary['ok'] else 'RED'}", "",
             f"Device {meta.get('device', '?')}, torch {meta.get('torch', '?')}, triton {meta.get('triton', '?')}, "
             f"evaluator {meta.get('evaluator_version', '?')}, date {meta.get('date', '?')}.", "",
             "| part | result | detail |", "|---|---|---|"]
    t = summary["gpu_tests"]
    lines.append(f"| pytest -m gpu | {mark(t)} | {t.get('final') or t.get('counts')} |")
    c = summary["controls"]
    lines.append(f"| ten honest controls (full shape) | {mark(c)} | within {summary['tolerance']:.1%} of stored |")
    h = summary["throughput"]
    detail = ""
    if h.get("statuses"):
        detail = f"P={h.get('pool')}: {h.get('verdicts_per_min') or 0:.1f} verdicts/min, p50 {h.get('p50_s') or 0:.2f} s"
    lines.append(f"| throughput smoke (mixed batch of 13) | {mark(h)} | {detail} |")
    if c.get("rows"):
        lines += ["", "| control | status | reward | stored | change |", "|---|---|---|---|---|"]
        for r in c["rows"]:
            change = "-" if r["change"] is None else f"{r['change']:+.1%}"
            lines.append(f"| {r['task_id']} | {r['status']} | {r['reward']:.3f} | {r['stored']} | {change} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--expected", type=Path, default=Path(__file__).with_name("gate_expected.json"))
    args = parser.parse_args(argv)
    expected = json.loads(args.expected.read_text())
    summary = {
        "gpu_tests": merge_pytest(read_pytest(args.folder / "gpu-tests.log"), read_pytest(args.folder / "gpu-alone.log")),
        "controls": read_controls(args.folder / "controls" / "controls.json", expected),
        "throughput": read_throughput(args.folder / "throughput" / "eval_throughput.json", expected),
        "tolerance": expected["tolerance"],
    }
    summary["ok"] = all(summary[k]["ok"] for k in ("gpu_tests", "controls", "throughput"))
    failures = args.folder / "failures.log"  # written as each test fails (tests/conftest.py, KF_FAILURES_LOG)
    summary["failures_log"] = failures.read_text(errors="replace")[:20000] if failures.is_file() else ""
    (args.folder / "summary.json").write_text(json.dumps(summary, indent=1))
    text = render(summary)
    (args.folder / "summary.md").write_text(text)
    print(text)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
