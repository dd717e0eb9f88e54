"""Verdicts for submissions the evaluator itself never finished judging (public helper).

`failure_verdict(...)` builds the one verdict a submission gets when something *around* the
`Evaluator` gave up on it: a Ray backend whose actors died under the submission too often
(`crashed`), or that has no live actor left (`evaluator_error`). It builds the record the same way
`Evaluator` does for its own early exits (reward through `compute_reward`, feedback through
`build_feedback`, the hash of the extracted code), so a caller outside `evaluator.py` never writes
a verdict by hand and no second copy of the reward formula exists.

It judges nothing and runs nothing; a successful judgement always comes from `Evaluator.evaluate`.
"""

from __future__ import annotations

from dataclasses import replace

from kernelflow.eval.config import EvalConfig
from kernelflow.eval.evaluator import EVALUATOR_VERSION
from kernelflow.eval.feedback import build_feedback
from kernelflow.eval.reward import compute_reward
from kernelflow.eval.verdict import Check, Status, Verdict, WallTime, code_sha256
from kernelflow.tasks import Task, extract_code


def failure_verdict(
    task: Task | str,
    answer: str | None,
    status: str,
    detail: str,
    *,
    config: EvalConfig,
    backend: str,
    device: str,
    seed: int | None = None,
    shape: str | None = None,
    check_name: str = "evaluator",
    wall_s: float | None = None,
    evaluator_version: str = EVALUATOR_VERSION,
) -> Verdict:
    """The verdict of a submission that could not be judged (`status` is any status but `ok`).

    `detail` says what happened (shown to the model in `feedback` and recorded in
    `checks[check_name]`); `seed`/`shape` are the overrides the submission was sent with, as for
    `Evaluator.evaluate`, so the verdict names the same seeds and shape a judged one would.
    """
    if status == Status.OK.value or status not in Status._value2member_map_:
        raise ValueError(f"failure_verdict needs a failing status, one of {[s.value for s in Status if s != Status.OK]}; "
                         f"got {status!r}")
    task_id = task if isinstance(task, str) else task.task_id
    if seed is not None or shape is not None:
        config = replace(config, base_seed=config.base_seed if seed is None else int(seed),
                         shape=config.shape if shape is None else shape)
    code = extract_code(answer) if isinstance(answer, str) else None
    hashed = code if code is not None else answer  # as Evaluator: the extracted code, else the raw answer
    checks = {check_name: Check(False, detail[:500])}
    feedback = build_feedback(status, detail, checks, max_chars=config.feedback_max_chars)
    return Verdict(
        task_id=task_id, status=status, correct=False, reward=compute_reward(False, None, None, config.reward),
        feedback=feedback, code_sha256=code_sha256(hashed), evaluator_version=evaluator_version, backend=backend,
        device=device, shape=config.shape, seeds=config.seed_list(), checks=checks,
        wall_time=WallTime(total_s=wall_s), cached=False,
    )
