"""`kernelflow eval TASK_ID FILE`: judge one submission file from the command line.

Exit status: 0 whenever a verdict exists (also for incorrect, timed-out or crashed submissions);
2 for usage errors (unknown task id, unreadable file, a backend this machine lacks). With `--json`
exactly one JSON verdict is printed on stdout; otherwise a short human summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from kernelflow.eval.config import EvalConfig
from kernelflow.eval.evaluator import Evaluator
from kernelflow.tasks import get_task


def _usage_error(message: str) -> int:
    print(f"kernelflow eval: {message}", file=sys.stderr)
    return 2


def run_eval(args: argparse.Namespace) -> int:
    try:
        task = get_task(args.task_id)
    except KeyError as exc:
        return _usage_error(str(exc.args[0]))
    path = Path(args.file)
    try:
        answer = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return _usage_error(f"cannot read submission file {path}: {exc.strerror or exc}")
    config = EvalConfig.one_shot(backend=args.backend)  # config.ONE_SHOT_DEFAULTS: one verdict, no pool to warm
    prewarm = getattr(args, "prewarm_workers", None)
    if prewarm is not None:
        try:
            config = replace(config, prewarm_workers=prewarm if prewarm == "auto" else int(prewarm))
        except ValueError as exc:
            return _usage_error(f"--prewarm-workers {prewarm!r}: give a number >= 0 or 'auto' ({exc})")
    if args.shape:
        config = replace(config, shape=args.shape)
    if args.seeds is not None:
        try:
            config = replace(config, seeds=args.seeds)
        except ValueError as exc:
            return _usage_error(str(exc))
    try:
        evaluator = Evaluator(config)
    except RuntimeError as exc:
        return _usage_error(str(exc))
    verdict = evaluator.evaluate(task, answer)
    if args.json:
        print(json.dumps(verdict.to_dict(), sort_keys=True))
    else:
        print(f"{verdict.task_id}: {verdict.status}  reward {verdict.reward:.3f}  ({verdict.backend}, {verdict.device})")
        print(verdict.feedback)
    return 0
