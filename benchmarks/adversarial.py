"""Judge every file of the adversarial corpus on one backend and print one line per file as it finishes.

The pytest version (tests/eval/test_adversarial.py) reports only at the end; on a lent GPU with a hard
time limit a run cut short must still say which fixtures passed and why the others failed. Each
fixture is judged, then the honest ReLU control is judged by the same evaluator (it must be `ok`).
Fixtures run `--parallel` at a time: the per-GPU timing lock still serialises their timed phases.
Writes `adversarial.json` and `adversarial.md` under `--out`, updated after every fixture.

    python benchmarks/adversarial.py --backend cuda --out results/adversarial
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from kernelflow.eval import EvalConfig, Evaluator, Status
from tests.eval.test_adversarial import DEFAULT_TIMEOUT_S, FIXTURES, FULL_SHAPE_ON_CUDA, HANG_TIMEOUT_S
from tests.eval.test_static_checks import HONEST_RELU


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["cuda", "interpret"], default="cuda")
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--only", nargs="*", default=None, help="fixture names (default: all for the backend)")
    parser.add_argument("--out", default="benchmark-results/adversarial")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fixtures = [f for f in FIXTURES if args.backend in f.expect and (not args.only or f.name in args.only)]
    evaluators: dict[tuple, Evaluator] = {}

    def evaluator(static: bool, timeout: float) -> Evaluator:
        key = (static, timeout)
        if key not in evaluators:
            evaluators[key] = Evaluator(EvalConfig(backend=args.backend, shape="small", seeds=2, timed_runs=2,
                                                   static_checks=static, timeout_s=timeout, max_workers=args.parallel,
                                                   verdict_cache_size=0))
        return evaluators[key]

    def judge(fixture) -> dict:
        ev = evaluator(fixture.static_checks, HANG_TIMEOUT_S if fixture.name == "hang_forever" else DEFAULT_TIMEOUT_S)
        t0 = time.monotonic()
        v = ev.evaluate(fixture.task_id, fixture.source)
        control = ev.evaluate("19_ReLU", HONEST_RELU)
        expected = fixture.expect[args.backend]
        passed = v.status == expected and v.reward == 0 and control.status == Status.OK
        if args.backend == "cuda" and fixture.name in FULL_SHAPE_ON_CUDA:  # their hack is about the real sizes
            full = evaluator(fixture.static_checks, 300.0).evaluate(fixture.task_id, fixture.source, shape="full")
            passed = passed and full.status == expected and full.reward == 0
            v = full if full.status != expected else v
        return {"fixture": fixture.name, "task": fixture.task_id, "expected": expected, "got": v.status,
                "reward": v.reward, "control": control.status, "passed": passed, "wall_s": round(time.monotonic() - t0, 1),
                "feedback": v.feedback[:600], "control_feedback": "" if control.status == Status.OK else control.feedback[:600]}

    rows = []
    with ThreadPoolExecutor(args.parallel) as pool:
        futures = [pool.submit(judge, f) for f in fixtures]
        for fut in as_completed(futures):
            row = fut.result()
            rows.append(row)
            print(f"{'PASS' if row['passed'] else 'FAIL'} {row['fixture']:<36} expected {row['expected']:<22} "
                  f"got {row['got']:<22} control {row['control']} {row['wall_s']}s", flush=True)
            if not row["passed"]:
                print("    " + row["feedback"].replace("\n", "\n    ")[:600], flush=True)
            (out / "adversarial.json").write_text(json.dumps(rows, indent=1))
    rows.sort(key=lambda r: r["fixture"])
    lines = ["| fixture | task | expected | got | reward | control after |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['fixture']} | {r['task']} | {r['expected']} | {r['got']} | {r['reward']:g} | {r['control']} |"
              for r in rows]
    (out / "adversarial.md").write_text("\n".join(lines) + "\n")
    failed = [r["fixture"] for r in rows if not r["passed"]]
    print(f"{len(rows) - len(failed)}/{len(rows)} fixtures as declared; failed: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
