"""Judge a fixed set of corpus answers with the real evaluator and keep what it said (docs/learnability.md).

    python scripts/make_feedback_samples.py          # rewrites kernelflow/train/feedback_samples.json (~1 min, CPU)

Why: the SFT corpus' two-turn examples must show the policy the feedback the environment really sends
(several lines: the status, what failed and where), or the policy meets it first in training and
answers it with garbage (measured: no code fence after real feedback, turn 2 always `no_code`). The
corpus (kernelflow/train/corpus.py) may not import the evaluator (the trainer reaches it only through
the environment), so the evaluator's words are produced here, once, and checked in: for each corpus
task, three answers per mistake kind and three correct ones, drawn from the corpus' own templates with
a fixed seed, judged under the Triton interpreter at the small shape with one seed (what the CPU
learnability run's environment does). `tests/train/test_corpus.py` re-judges a few and fails when the
evaluator's wording drifts from the file; rerun this script then.
"""

from __future__ import annotations

import json
import os
import random
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelflow.eval import EVALUATOR_VERSION, EvalConfig, Evaluator  # noqa: E402
from kernelflow.train.corpus import FEEDBACK_SAMPLES_FILE, MISTAKES, answer, corpus_tasks  # noqa: E402

PER_KIND = 3
SEED = "kernelflow-feedback-samples:0"
# The CPU learnability environment's judging settings (conf/eval/interpret.yaml at the small shape).
JUDGE = EvalConfig(backend="interpret", shape="small", seeds=1, timed_runs=1, max_workers=2, verdict_cache_size=0)


def jobs() -> list[tuple[str, str, str]]:
    """(task_id, kind, answer text): `PER_KIND` per task and kind, kind "ok" for the correct ones."""
    rng = random.Random(SEED)
    return [(t, kind, answer(t, rng, None if kind == "ok" else kind)[0])
            for t in corpus_tasks() for kind in ("ok", *MISTAKES) for _ in range(PER_KIND)]


def judge(items: list[tuple[str, str, str]], config: EvalConfig = JUDGE) -> list[dict]:
    evaluator = Evaluator(config)
    try:
        with ThreadPoolExecutor(config.max_workers) as pool:
            verdicts = list(pool.map(lambda j: evaluator.evaluate(j[0], j[2]), items))
    finally:
        evaluator.close()
    return [{"task_id": t, "kind": k, "status": v.status, "answer": a, "feedback": v.feedback}
            for (t, k, a), v in zip(items, verdicts, strict=True)]


def main() -> int:
    entries = judge(jobs())
    wrong = [e for e in entries if (e["status"] == "ok") != (e["kind"] == "ok")]
    if wrong:
        print(f"{len(wrong)} answer(s) judged against their label, e.g. {wrong[0]['task_id']} {wrong[0]['kind']} "
              f"-> {wrong[0]['status']}: fix the corpus templates first", file=sys.stderr)
        return 1
    data = {"evaluator_version": EVALUATOR_VERSION, "judge": {"backend": JUDGE.backend, "shape": JUDGE.shape,
                                                               "seeds": JUDGE.seeds}, "entries": entries}
    FEEDBACK_SAMPLES_FILE.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {len(entries)} judged answers to {FEEDBACK_SAMPLES_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
