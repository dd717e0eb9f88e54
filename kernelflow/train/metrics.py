"""Per-update metrics: what one group's rollouts earned and what the step did, as one frozen record.

`UpdateMetrics` holds the loss and gradient norm, reward and return statistics, correct rate per turn,
the count of every verdict status (so no-code answers and rejected hacks show up), completion lengths
and truncation, group size per turn, learning rate, generation throughput and where the update's time
went (generation, evaluation, optimisation), plus a few sampled kernels with their verdicts.
Generation is counted two ways: `generation_tokens` are the ids produced (each row cut after its
first eos: what was submitted), `generation_decode_steps` the batches' forward passes after the
prompt (one token for every row still running); `generation_tokens_per_s` and
`generation_steps_per_s` divide them by the generation seconds. `update_skipped` is 1 when every
advantage was 0 and the update ran no forward, backward or optimiser step (update.py).
`scalars()` flattens it into name -> float for a tracker; `to_dict()` keeps everything and
`from_dict()` reads it back.
This module only summarises; it logs nothing and imports no tracker.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from kernelflow.train.advantages import Advantages
from kernelflow.train.rollout import EpisodeRecord, GroupRollout
from kernelflow.train.update import UpdateResult


@dataclass(frozen=True)
class SampledKernel:
    """One submission kept for inspection."""

    task_id: str
    rollout: int
    turn: int
    status: str
    correct: bool
    reward: float
    advantage: float
    answer: str  # possibly shortened to sample_chars
    feedback: str


@dataclass(frozen=True)
class UpdateMetrics:
    epoch: int
    update: int  # 1-based count of updates made so far, across epochs
    task_id: str
    estimator: str
    credit: str  # dr_grpo's credit assignment: episode (the pilot's) or turn (advantages.py)
    loss: float
    grad_norm: float
    lr: float
    reward_mean: float  # over every submission of the group
    reward_std: float
    return_mean: float  # over episode returns
    return_std: float
    advantage_abs_mean: float
    correct_rate_per_turn: tuple[float, ...]
    group_size_per_turn: tuple[int, ...]
    status_counts: dict[str, int]
    completion_tokens_mean: float
    completion_tokens_max: int
    truncation_rate: float
    trained_tokens: int
    mean_logp: float
    kl: float
    generation_tokens: int
    generation_seconds: float
    generation_tokens_per_s: float  # produced tokens (cut at eos) per second of generation
    generation_decode_steps: int
    generation_steps_per_s: float  # decode steps (batch forward passes) per second of generation
    update_skipped: bool  # all advantages 0: no forward, backward or optimiser step
    is_ratio_mean: float  # truncated importance sampling (loss.py): pi_train / pi_sample over trained tokens
    is_ratio_max: float
    is_truncated_fraction: float
    logp_diff_max: float  # largest |log pi_train - log pi_sample| (0 when importance sampling is off)
    rollout_staleness: int  # updates made between sampling this group and training on it (rollout_groups)
    evaluation_seconds: float
    optimisation_seconds: float
    update_seconds: float  # wall time of the whole group: rollouts, advantages, step, bookkeeping
    samples: tuple[SampledKernel, ...] = ()

    def scalars(self) -> dict[str, float]:
        """Flat numeric metrics (turns and statuses spelt into the names), for MLflow and logs."""
        out: dict[str, float] = {}
        for key in (
            "loss", "grad_norm", "lr", "reward_mean", "reward_std", "return_mean", "return_std",
            "advantage_abs_mean", "completion_tokens_mean", "completion_tokens_max", "truncation_rate",
            "trained_tokens", "mean_logp", "kl", "generation_tokens", "generation_seconds",
            "generation_tokens_per_s", "generation_decode_steps", "generation_steps_per_s", "update_skipped",
            "is_ratio_mean", "is_ratio_max", "is_truncated_fraction", "logp_diff_max", "rollout_staleness",
            "evaluation_seconds", "optimisation_seconds", "update_seconds",
        ):
            out[key] = float(getattr(self, key))
        for t, rate in enumerate(self.correct_rate_per_turn):
            out[f"correct_rate_turn{t + 1}"] = rate
        for t, n in enumerate(self.group_size_per_turn):
            out[f"group_size_turn{t + 1}"] = float(n)
        for status, n in self.status_counts.items():
            out[f"status_{status}"] = float(n)
        return out

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> UpdateMetrics:
        """`to_dict()`'s record (updates.json) back: tuples and sampled kernels restored, unknown keys ignored."""
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        kw["correct_rate_per_turn"] = tuple(kw.get("correct_rate_per_turn", ()))
        kw["group_size_per_turn"] = tuple(kw.get("group_size_per_turn", ()))
        kw["status_counts"] = dict(kw.get("status_counts", {}))
        kw["samples"] = tuple(SampledKernel(**s) for s in kw.get("samples", ()))
        return cls(**kw)

    def summary(self, total_updates: int | None = None) -> str:
        """One progress line."""
        of = f"/{total_updates}" if total_updates else ""
        correct = " ".join(f"t{t + 1} {r:.0%}" for t, r in enumerate(self.correct_rate_per_turn))
        return (
            f"update {self.update}{of} (epoch {self.epoch}, {self.task_id}): reward {self.reward_mean:.3f}"
            f"±{self.reward_std:.3f}, return {self.return_mean:.3f}, correct {correct}, "
            f"statuses {dict(sorted(self.status_counts.items()))}, loss {self.loss:.4g}, grad {self.grad_norm:.3g}, "
            f"gen {self.generation_tokens} tok @ {self.generation_tokens_per_s:.1f} tok/s "
            f"({self.generation_seconds:.1f} s), eval {self.evaluation_seconds:.1f} s, "
            f"optim {self.optimisation_seconds:.1f} s{' (skipped: all advantages 0)' if self.update_skipped else ''}"
        )


def _mean_std(xs: Sequence[float]) -> tuple[float, float]:
    xs = [x for x in xs if not math.isnan(x)]
    if not xs:
        return float("nan"), float("nan")
    return statistics.fmean(xs), (statistics.pstdev(xs) if len(xs) > 1 else 0.0)


def pick_samples(
    episodes: Sequence[EpisodeRecord], advantages: Advantages, count: int, chars: int
) -> tuple[SampledKernel, ...]:
    """The best and worst submissions by reward (then the rest in order), up to `count`."""
    subs = [(ep, t, advantages.per_turn[i][t.turn]) for i, ep in enumerate(episodes) for t in ep.turns]
    if not subs or count <= 0:
        return ()
    ranked = sorted(subs, key=lambda s: s[1].reward, reverse=True)
    chosen, seen = [], set()
    for cand in [ranked[0], ranked[-1], *ranked[1:-1]]:
        key = (cand[0].rollout, cand[1].turn)
        if key not in seen:
            seen.add(key)
            chosen.append(cand)
        if len(chosen) == count:
            break
    return tuple(
        SampledKernel(
            task_id=ep.task_id, rollout=ep.rollout, turn=t.turn + 1, status=t.status, correct=t.correct,
            reward=t.reward, advantage=a, answer=t.answer[:chars], feedback=t.feedback[:chars],
        )
        for ep, t, a in chosen
    )


def update_metrics(
    *,
    epoch: int,
    update: int,
    estimator: str,
    group: GroupRollout,
    credit: str = "episode",
    staleness: int = 0,
    advantages: Advantages,
    result: UpdateResult,
    samples: int = 2,
    sample_chars: int = 4000,
    wall_seconds: float | None = None,
) -> UpdateMetrics:
    episodes = group.episodes
    turns = [t for ep in episodes for t in ep.turns]
    rewards = [t.reward for t in turns]
    reward_mean, reward_std = _mean_std(rewards)
    return_mean, return_std = _mean_std([ep.episode_return for ep in episodes])
    sizes = advantages.group_size_per_turn
    correct = tuple(
        sum(1 for ep in episodes if len(ep.turns) > t and ep.turns[t].correct) / n if n else 0.0
        for t, n in enumerate(sizes)
    )
    lengths = [len(t.completion_ids) for t in turns]
    flat = advantages.flat()
    update_s = wall_seconds if wall_seconds is not None else (
        group.generation_seconds + group.evaluation_seconds + result.seconds
    )
    return UpdateMetrics(
        epoch=epoch,
        update=update,
        task_id=group.task_id,
        estimator=estimator,
        credit=credit,
        loss=result.loss,
        grad_norm=result.grad_norm,
        lr=result.lr,
        reward_mean=reward_mean,
        reward_std=reward_std,
        return_mean=return_mean,
        return_std=return_std,
        advantage_abs_mean=statistics.fmean(abs(a) for a in flat) if flat else 0.0,
        correct_rate_per_turn=correct,
        group_size_per_turn=sizes,
        status_counts=dict(Counter(t.status for t in turns)),
        completion_tokens_mean=statistics.fmean(lengths) if lengths else 0.0,
        completion_tokens_max=max(lengths, default=0),
        truncation_rate=sum(t.truncated for t in turns) / len(turns) if turns else 0.0,
        trained_tokens=result.tokens,
        mean_logp=result.mean_logp,
        kl=result.kl,
        generation_tokens=group.generation_tokens,
        generation_seconds=group.generation_seconds,
        generation_tokens_per_s=group.generation_tokens / group.generation_seconds if group.generation_seconds else 0.0,
        generation_decode_steps=group.generation_decode_steps,
        generation_steps_per_s=(
            group.generation_decode_steps / group.generation_seconds if group.generation_seconds else 0.0
        ),
        update_skipped=result.skipped,
        is_ratio_mean=result.is_ratio_mean,
        is_ratio_max=result.is_ratio_max,
        is_truncated_fraction=result.is_truncated_fraction,
        logp_diff_max=result.logp_diff_max,
        rollout_staleness=staleness,
        evaluation_seconds=group.evaluation_seconds,
        optimisation_seconds=result.seconds,
        update_seconds=update_s,
        samples=pick_samples(episodes, advantages, samples, sample_chars),
    )
