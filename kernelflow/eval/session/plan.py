"""The call plan of one session, and which hold of the GPU lock each step runs under.

`build_plan` lists the calls: the correctness seeds, the odd shape, a repeat (determinism), then
`timed_runs` fresh calls. Every call is checked the same way and, on CUDA, timed the same way by the
judge's clock, so a submission cannot tell a check from a measurement; only the last `timed_runs`
calls' times feed the median. `LockHolds` keeps the per-GPU readers-writer lock (clock/gpu_lock.py) as each
step needs it: in "shared_checks" (the default) only the timed calls hold it exclusively, so a slow
or hostile submission's compilation and correctness calls never keep the GPU from other verdicts'
timed calls; in "exclusive" the first hold is exclusive and kept to the end (the old behaviour).
`call_limit_s` is each call's own wall-clock limit, so a hold never outlasts a bounded step.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass

from kernelflow.eval.config import EvalConfig, salted_seed
from kernelflow.tasks import Task, distribution_for_call, split_distribution


@dataclass(frozen=True)
class CallSpec:
    label: str  # "seed 3", "odd shape", "repeat of seed 0", "timed call 4"
    shapes: tuple[tuple[int, ...], ...]  # every input's shape, in forward's argument order
    seed: int
    main: bool  # main shape: its times feed the median
    timed: bool  # one of the final `timed_runs` calls
    repeat_of: int | None = None  # index of the call whose output this one must reproduce bit for bit
    distribution: str | None = None  # what the inputs are drawn from (Task.check_distributions); None: the base


def build_plan(task: Task, config: EvalConfig, seeds: list[int], backend: str = "cuda", salt: int = 0) -> list[CallSpec]:
    """The calls of one session: seeds, the odd shape, a repeat, then `timed_runs` fresh calls.

    `seeds` are the declared ones (they name the calls in the feedback); every call's `seed`, which
    its inputs are drawn from, has the judge's secret `salt` mixed in (config.salted_seed).

    Under the interpreter nothing is timed, so only two of the final calls are made: they still
    check that fresh inputs in the same buffers give fresh, correct outputs.
    """
    main_shape = tuple(task.input_shapes(config.shape))
    final_calls = config.timed_runs if backend == "cuda" else min(2, config.timed_runs)
    base = config.distribution or task.distribution
    plan: list[CallSpec] = []

    def check(label: str, shapes: tuple, seed: int, main: bool) -> CallSpec:
        # The seed calls and the odd shape cycle through the inputs the task's reference is valid under
        # (Task.check_distributions), so a kernel right only on the usual inputs fails; the label names them.
        dist = distribution_for_call(task, base, len(plan))
        suffix = "" if dist == base else f" ({split_distribution(dist)[1]} inputs)"
        return CallSpec(label + suffix, shapes, salted_seed(seed, salt), main=main, timed=False, distribution=dist)

    for s in seeds:
        plan.append(check(f"seed {s}", main_shape, s, main=True))
    if config.check_odd_shape:
        plan.append(check("odd shape", tuple(task.input_shapes(config.shape, odd=True)), seeds[-1] + 1000, main=False))
    if config.check_determinism:
        plan.append(CallSpec(f"repeat of seed {seeds[0]}", main_shape, salted_seed(seeds[0], salt), main=True,
                             timed=False, repeat_of=0,
                             distribution=plan[0].distribution))
    for j in range(final_calls):  # the base inputs: timings stay comparable across tasks and with eager
        plan.append(CallSpec(f"timed call {j + 1}", main_shape, salted_seed(seeds[-1] + 1 + j, salt), main=True, timed=True,
                             distribution=base))
    return plan


def call_limit_s(config: EvalConfig, index: int, spec: CallSpec, cuda: bool) -> float:
    """How long call `index` may take: compilation in the first, a bounded timed call, the rest between.

    These limits exist to bound how long one submission holds the GPU lock (a sleep in forward held it
    for the whole timeout before v2), so they apply on CUDA; under the interpreter no lock is held and
    only the session's `timeout_s` applies (CI machines are slow and shared).
    """
    if not cuda:
        return config.timeout_s
    if index == 0:
        return config.first_call_limit_s
    return config.timed_call_limit_s if spec.timed else config.call_limit_s


class LockHolds:
    """Which hold of the GPU lock a session's calls run under (see the module docstring).

    "shared_checks": each step asks for what it needs (`hold(exclusive)`); changing mode releases one
    hold and queues for the other (no upgrade in place: that deadlocks two upgraders). `gpu_lock` is
    the evaluator's context factory, `gpu_lock(shared=...)`.
    """

    def __init__(self, gpu_lock, mode: str) -> None:
        self.gpu_lock = gpu_lock
        self.mode = mode
        self.held: str | None = None  # "exclusive" or "shared"
        self.stack = ExitStack()
        self.waited_s = 0.0  # all waits for the lock, summed

    def hold(self, exclusive: bool) -> float:
        """Hold the lock in the mode this step needs; returns the seconds spent waiting for it."""
        want = "shared" if self.mode == "shared_checks" and not exclusive else "exclusive"
        if self.held == want or (self.mode == "exclusive" and self.held is not None):
            return 0.0
        self.stack.close()
        self.held = None
        t = time.monotonic()
        self.stack.enter_context(self.gpu_lock(shared=want == "shared"))
        self.held = want
        waited = time.monotonic() - t
        self.waited_s += waited
        return waited

    def close(self) -> None:
        self.stack.close()
        self.held = None
