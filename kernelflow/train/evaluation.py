"""Greedy evaluation: each task answered without sampling, up to two attempts, all tasks in one batch.

Per task one environment episode: the first answer is generated greedily (do_sample off) from the
prompt; when it is not correct and the episode allows another turn, the second answer is generated
greedily after the first answer and its feedback (same token layout as training). Every task's turn
runs in one generation batch and one concurrent round of submissions. The result keeps every turn's
verdict, so a report can show first-attempt and after-feedback numbers.

This is the evaluation the flow runs before and after training (and what the model card reports);
it does not aggregate across tasks or groups (the flow does) and never touches the evaluator except
through the environment.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from kernelflow.train.config import TrainerConfig
from kernelflow.train.generation import SamplingSettings
from kernelflow.train.policy import Policy
from kernelflow.train.rollout import SessionFactory, TurnRecord, run_episodes


@dataclass(frozen=True)
class TurnVerdict:
    """One attempt's outcome; `verdict` is the environment's full verdict record."""

    turn: int  # 1-based
    status: str
    correct: bool
    reward: float
    runtime_ms: float | None
    roofline_fraction: float | None
    completion_tokens: int
    truncated: bool
    answer: str
    feedback: str
    verdict: dict

    @classmethod
    def from_turn(cls, t: TurnRecord) -> TurnVerdict:
        return cls(
            turn=t.turn + 1, status=t.status, correct=t.correct, reward=t.reward, runtime_ms=t.runtime_ms,
            roofline_fraction=t.roofline_fraction, completion_tokens=len(t.completion_ids), truncated=t.truncated,
            answer=t.answer, feedback=t.feedback, verdict=t.verdict,
        )


@dataclass(frozen=True)
class TaskEvalResult:
    """A task's greedy attempts, in order (one or two)."""

    task_id: str
    seed: int
    turns: tuple[TurnVerdict, ...]

    @property
    def first_correct(self) -> bool:
        return bool(self.turns) and self.turns[0].correct

    @property
    def correct(self) -> bool:
        """Correct at some attempt."""
        return any(t.correct for t in self.turns)

    @property
    def best(self) -> TurnVerdict | None:
        return max(self.turns, key=lambda t: t.reward, default=None)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(first_correct=self.first_correct, correct=self.correct)
        return d


@dataclass(frozen=True)
class EvalTiming:
    tasks: int
    generation_seconds: float
    generation_tokens: int
    evaluation_seconds: float
    seconds: float


def greedy_evaluate(
    policy: Policy,
    factory: SessionFactory,
    task_ids: Sequence[str],
    config: TrainerConfig,
    seed: int | None = None,
) -> tuple[list[TaskEvalResult], EvalTiming]:
    """Greedy attempts for every task in `task_ids` (environment seed `seed`, default config.env_seed)."""
    if not task_ids:
        return [], EvalTiming(0, 0.0, 0, 0.0, 0.0)
    start = time.perf_counter()
    env_seed = config.env_seed if seed is None else seed
    sampling = SamplingSettings(max_new_tokens=config.eval_tokens, do_sample=False)
    ids = list(task_ids)
    results: list[TaskEvalResult] = []
    gen_s = eval_s = 0.0
    gen_tokens = 0
    for begin in range(0, len(ids), config.eval_batch_size):
        batch = ids[begin : begin + config.eval_batch_size]
        group = run_episodes(
            policy,
            factory,
            batch,
            [env_seed] * len(batch),
            sampling,
            max_turns=config.max_turns,
            shape=config.env_shape,
            stop_when_correct=config.eval_stop_when_correct,
            turn_limit=config.eval_attempts,
        )
        results += [
            TaskEvalResult(ep.task_id, ep.seed, tuple(TurnVerdict.from_turn(t) for t in ep.turns))
            for ep in group.episodes
        ]
        gen_s += group.generation_seconds
        gen_tokens += group.generation_tokens
        eval_s += group.evaluation_seconds
    timing = EvalTiming(len(ids), gen_s, gen_tokens, eval_s, time.perf_counter() - start)
    return results, timing
