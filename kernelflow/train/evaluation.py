"""Evaluation of a policy against the environment: greedy (one episode per task) and sampled (n per task).

Per task and episode: the first answer is generated from the prompt; when it is not correct and the
episode allows another turn, the second answer is generated after the first answer and its feedback
(same token layout as training). Episodes run in batches of `eval_batch_size`: one generation batch
and one concurrent round of submissions per turn. Every turn's verdict is kept, so a report can show
first-attempt and after-feedback numbers.

- `greedy_evaluate`: decoding without sampling, one episode per task: what the flow runs before and
  after training (and what the model card reports).
- `sample_evaluate`: `SampledEvalSettings.samples` episodes per task at a temperature, with the same
  episode structure, so pass@k (the unbiased estimator) and avg@n exist. Generation draws from a
  torch RNG seeded for the evaluation alone (`fork_rng`), so the same settings draw the same samples
  and the training RNG is not advanced: a run with a sampled evaluation trains exactly like one without.

Every result type has `to_dict()` (JSON, what the flow stores) and `from_dict()` (the same record
back as the typed result), so the flow reads stored results as these types, never by string keys.

This module does not aggregate across tasks or groups or compute pass@k (the flow does) and never
touches the evaluator except through the environment.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch

# SampledEvalSettings lives with the other settings (config.py, importable without torch); re-exported here
from kernelflow.train.config import SampledEvalSettings, TrainerConfig
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

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TurnVerdict:
        """The record `asdict` wrote (results.json), back as a TurnVerdict; unknown keys are ignored."""
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


@dataclass(frozen=True)
class TaskEvalResult:
    """A task's attempts in one episode, in order (up to `eval_attempts`; any number of turns)."""

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

    def correct_by(self, attempt: int) -> bool:
        """Correct at one of the first `attempt` attempts (an episode ends early only once correct or out
        of turns, so a missing later attempt never turns a correct episode into an incorrect one)."""
        return any(t.correct for t in self.turns[:attempt])

    @property
    def first_correct_turn(self) -> TurnVerdict | None:
        """The first correct attempt (its timing is what the report shows), or None."""
        return next((t for t in self.turns if t.correct), None)

    @property
    def best(self) -> TurnVerdict | None:
        return max(self.turns, key=lambda t: t.reward, default=None)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(first_correct=self.first_correct, correct=self.correct)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TaskEvalResult:
        """`to_dict()`'s record back (derived keys such as `correct` and added ones such as `group` are ignored)."""
        return cls(task_id=d["task_id"], seed=int(d.get("seed", 0)),
                   turns=tuple(TurnVerdict.from_dict(t) for t in d.get("turns") or ()))


@dataclass(frozen=True)
class EvalTiming:
    tasks: int
    generation_seconds: float
    generation_tokens: int
    evaluation_seconds: float
    seconds: float


def _run_batches(
    policy: Policy,
    factory: SessionFactory,
    task_ids: Sequence[str],
    env_seed: int,
    sampling: SamplingSettings,
    config: TrainerConfig,
    attempts: int,
) -> tuple[list[TaskEvalResult], EvalTiming]:
    """One episode per entry of `task_ids` (ids may repeat), `eval_batch_size` episodes per batch."""
    start = time.perf_counter()
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
            turn_limit=attempts,
        )
        results += [
            TaskEvalResult(ep.task_id, ep.seed, tuple(TurnVerdict.from_turn(t) for t in ep.turns))
            for ep in group.episodes
        ]
        gen_s += group.generation_seconds
        gen_tokens += group.generation_tokens
        eval_s += group.evaluation_seconds
    timing = EvalTiming(len(set(ids)), gen_s, gen_tokens, eval_s, time.perf_counter() - start)
    return results, timing


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
    env_seed = config.env_seed if seed is None else seed
    sampling = SamplingSettings(max_new_tokens=config.eval_tokens, do_sample=False)
    return _run_batches(policy, factory, task_ids, env_seed, sampling, config, config.eval_attempts)


@dataclass(frozen=True)
class SampledTaskResult:
    """A task's n sampled episodes, in the order they were generated."""

    task_id: str
    seed: int  # the environment seed (evaluation inputs)
    episodes: tuple[TaskEvalResult, ...]

    @property
    def samples(self) -> int:
        return len(self.episodes)

    @property
    def first_correct(self) -> int:
        """Episodes whose first attempt is correct: c for single-shot pass@k."""
        return sum(e.first_correct for e in self.episodes)

    @property
    def correct(self) -> int:
        """Episodes correct at some attempt: c for pass@k with feedback."""
        return sum(e.correct for e in self.episodes)

    def to_dict(self) -> dict:
        return {"task_id": self.task_id, "seed": self.seed, "samples": self.samples,
                "first_correct": self.first_correct, "correct": self.correct,
                "episodes": [e.to_dict() for e in self.episodes]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SampledTaskResult:
        """`to_dict()`'s record back; the counts are recomputed from the episodes."""
        return cls(task_id=d["task_id"], seed=int(d.get("seed", 0)),
                   episodes=tuple(TaskEvalResult.from_dict(e) for e in d.get("episodes") or ()))


def sample_evaluate(
    policy: Policy,
    factory: SessionFactory,
    task_ids: Sequence[str],
    config: TrainerConfig,
    settings: SampledEvalSettings,
    env_seed: int | None = None,
) -> tuple[list[SampledTaskResult], EvalTiming]:
    """`settings.samples` sampled episodes of every task in `task_ids`, one result per task in that order.

    Episodes of every task are batched together (`eval_batch_size` at a time); all are judged on
    environment seed `env_seed` (default config.env_seed), like the greedy evaluation.
    """
    if not settings.enabled:
        raise ValueError("sample_evaluate needs settings.samples >= 1 (0 means sampled evaluation is off)")
    ids = list(dict.fromkeys(task_ids))
    if len(ids) != len(task_ids):
        raise ValueError(f"sample_evaluate got repeated task ids {list(task_ids)}; name each task once")
    if not ids:
        return [], EvalTiming(0, 0.0, 0, 0.0, 0.0)
    attempts = settings.attempts or config.eval_attempts
    if attempts > config.max_turns:
        raise ValueError(f"attempts={attempts} > max_turns={config.max_turns}: an episode cannot hold more attempts "
                         "than turns; lower the attempts")
    seed = config.seed if settings.seed is None else settings.seed
    sampling = SamplingSettings(config.eval_tokens, do_sample=True, temperature=settings.temperature,
                                top_p=settings.top_p)
    episodes = [tid for tid in ids for _ in range(settings.samples)]
    devices = [policy.device] if policy.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        flat, timing = _run_batches(policy, factory, episodes, config.env_seed if env_seed is None else env_seed,
                                    sampling, config, attempts)
    by_task: dict[str, list[TaskEvalResult]] = {tid: [] for tid in ids}
    for r in flat:
        by_task[r.task_id].append(r)
    return [SampledTaskResult(tid, eps[0].seed, tuple(eps)) for tid, eps in by_task.items()], timing
