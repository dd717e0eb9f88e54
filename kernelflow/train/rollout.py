"""Episodes against the environment: G rollouts of one task, generated as a batch, judged concurrently.

`collect_group` opens one environment session per rollout (one WebSocket session = one episode),
resets them all, and then per turn: generates every still-running rollout's answer in one left-padded
batch, submits the raw answers concurrently (a thread per session; the evaluator pool behind the
server judges them in parallel), and for each rollout whose episode is not done appends the
environment's feedback as the next user turn by concatenating ids (transcript.py). Rewards, per-turn
returns and the episode return are read from the observations, never recomputed.

Sessions come from a factory (`SessionFactory`), by default `KernelEnvSession(url, token)` from
kernelflow.env.client, so tests can substitute an in-process fake. This module does not compute
advantages or update the model.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Protocol

from kernelflow.tasks import feedback_message
from kernelflow.train.generation import SamplingSettings, generate
from kernelflow.train.policy import Policy
from kernelflow.train.transcript import TokenLayout, feedback_ids, layout, prompt_ids

log = logging.getLogger("kernelflow.train")


class EnvSession(Protocol):
    """What the trainer needs of an environment session (kernelflow.env.client.KernelEnvSession)."""

    def reset(self, task_id: str, seed: int = 0, shape: str | None = None) -> Any: ...
    def step(self, code: str) -> Any: ...
    def close(self) -> None: ...


SessionFactory = Callable[[], EnvSession]


def env_session_factory(base_url: str, token: str | None = None, message_timeout_s: float = 900.0) -> SessionFactory:
    """Sessions on a running environment server (the trainer's only way to the evaluator)."""
    from kernelflow.env.client import KernelEnvSession

    def factory() -> EnvSession:
        return KernelEnvSession(base_url, token=token, message_timeout_s=message_timeout_s)

    return factory


@dataclass(frozen=True)
class TurnRecord:
    """One submission: what the model generated and what the environment said about it."""

    turn: int
    completion_ids: tuple[int, ...]
    feedback_ids: tuple[int, ...]  # appended after this turn (empty when the episode ended here)
    answer: str
    truncated: bool
    status: str
    correct: bool
    reward: float
    feedback: str
    runtime_ms: float | None
    roofline_fraction: float | None
    verdict: dict = field(default_factory=dict)
    completion_logprobs: tuple[float, ...] | None = None  # the sampler's log-probs of completion_ids


@dataclass(frozen=True)
class EpisodeRecord:
    """One rollout, with the environment's per-turn rewards and returns."""

    task_id: str
    rollout: int
    seed: int
    prompt_ids: tuple[int, ...]
    turns: tuple[TurnRecord, ...]
    rewards: tuple[float, ...]
    returns: tuple[float, ...]  # G_t per turn, from the environment
    episode_return: float  # from the environment

    def token_layout(self) -> TokenLayout:
        return layout(self.prompt_ids, [(t.completion_ids, t.feedback_ids) for t in self.turns])


@dataclass(frozen=True)
class GroupRollout:
    """A task's G episodes plus where the time went."""

    task_id: str
    episodes: tuple[EpisodeRecord, ...]
    generation_seconds: float
    generation_tokens: int  # produced, each row cut at its first eos (generation.py)
    evaluation_seconds: float
    turn_timings: tuple[dict, ...] = ()
    generation_decode_steps: int = 0  # the batches' forward passes after the prompt, summed over turns


def _attr(obs: Any, name: str, default: Any = None) -> Any:
    if isinstance(obs, dict):
        return obs.get(name, default)
    return getattr(obs, name, default)


def check_max_turns(observation: Any, max_turns: int) -> None:
    env_turns = _attr(observation, "max_turns")
    if env_turns is not None and int(env_turns) != max_turns:
        raise ValueError(
            f"the environment allows {env_turns} turns per episode but trainer.max_turns={max_turns}; "
            "set trainer.max_turns to the server's max_turns (returns are only final after the last turn)"
        )


def run_episodes(
    policy: Policy,
    factory: SessionFactory,
    task_ids: Sequence[str],
    seeds: Sequence[int],
    sampling: SamplingSettings,
    max_turns: int,
    shape: str | None = None,
    stop_when_correct: bool = False,
    turn_limit: int | None = None,
) -> GroupRollout:
    """One episode per entry of `task_ids` (a group: the same id G times; evaluation: distinct ids).

    Every turn is one generation batch over the episodes still running, then one concurrent round of
    submissions. `stop_when_correct` ends an episode after a correct turn even if the environment
    would allow another (greedy evaluation's second attempt is only for failures); `turn_limit`
    stops every episode after that many turns (evaluation with fewer attempts than the server allows).
    """
    n = len(task_ids)
    tok = policy.tokenizer
    gen_s = eval_s = 0.0
    gen_tokens = gen_steps = 0
    timings: list[dict] = []
    last = min(max_turns, turn_limit or max_turns) - 1
    with ExitStack() as stack, ThreadPoolExecutor(max_workers=max(n, 1), thread_name_prefix="env") as pool:
        sessions = []
        for _ in range(n):
            s = factory()
            stack.callback(s.close)
            sessions.append(s)
        t0 = time.perf_counter()
        first = list(pool.map(lambda s, t, sd: s.reset(t, seed=sd, shape=shape), sessions, task_ids, seeds))
        reset_s = time.perf_counter() - t0
        for obs in first:
            check_max_turns(obs, max_turns)
        prompts = [prompt_ids(tok, list(_attr(obs, "messages"))) for obs in first]
        contexts = [list(p) for p in prompts]
        turns: list[list[TurnRecord]] = [[] for _ in range(n)]
        final: list[Any] = [None] * n
        running = list(range(n))
        for turn in range(last + 1):
            if not running:
                break
            gen = generate(policy, [contexts[i] for i in running], sampling)
            gen_s += gen.seconds
            gen_tokens += gen.tokens
            gen_steps += gen.decode_steps
            answers = [tok.decode(list(c.ids), skip_special_tokens=True) for c in gen.completions]
            t0 = time.perf_counter()
            active = [sessions[i] for i in running]
            observations = list(pool.map(lambda s, a: s.step(a), active, answers))
            step_s = time.perf_counter() - t0
            eval_s += step_s
            timings.append(
                {"turn": turn, "episodes": len(running), "generation_s": gen.seconds, "tokens": gen.tokens,
                 "decode_steps": gen.decode_steps, "evaluation_s": step_s}
            )
            still = []
            for k, i in enumerate(running):
                obs, comp = observations[k], gen.completions[k]
                correct = bool(_attr(obs, "correct", False))
                done = bool(_attr(obs, "done", False))
                ends_here = done or turn == last or (stop_when_correct and correct)
                fb_text = _attr(obs, "feedback", "") or ""
                fb: tuple[int, ...] = ()
                if not ends_here:
                    turn_ended = comp.ended_with == policy.turn_end_id
                    fb = tuple(feedback_ids(tok, feedback_message(fb_text), turn_ended, policy.turn_end_id))
                turns[i].append(
                    TurnRecord(
                        turn=turn,
                        completion_ids=comp.ids,
                        feedback_ids=fb,
                        answer=answers[k],
                        truncated=comp.truncated,
                        status=str(_attr(obs, "status", "")),
                        correct=correct,
                        reward=float(_attr(obs, "reward", 0.0) or 0.0),
                        feedback=fb_text,
                        runtime_ms=_attr(obs, "runtime_ms"),
                        roofline_fraction=_attr(obs, "roofline_fraction"),
                        verdict=dict(_attr(obs, "verdict", None) or {}),
                        completion_logprobs=comp.logprobs,
                    )
                )
                if ends_here:
                    final[i] = obs
                else:
                    contexts[i] += list(comp.ids) + list(fb)
                    still.append(i)
            label = task_ids[0] if len(set(task_ids)) == 1 else f"{len(set(task_ids))} tasks"
            statuses = dict(Counter(str(_attr(o, "status", "")) for o in observations))
            log.info(
                "%s turn %d: %d answer(s), %d tokens in %d decode steps, %.1f s (%.1f tok/s, %.1f steps/s); "
                "judged in %.1f s: %s",
                label, turn + 1, len(observations), gen.tokens, gen.decode_steps, gen.seconds,
                gen.tokens / gen.seconds if gen.seconds else 0.0,
                gen.decode_steps / gen.seconds if gen.seconds else 0.0, step_s, statuses,
            )
            running = still
    episodes = []
    for i in range(n):
        obs = final[i]
        rewards = tuple(float(r) for r in (_attr(obs, "rewards", None) or [t.reward for t in turns[i]]))
        returns = _attr(obs, "returns", None)
        ep_return = _attr(obs, "episode_return", None)
        episodes.append(
            EpisodeRecord(
                task_id=task_ids[i],
                rollout=i,
                seed=seeds[i],
                prompt_ids=tuple(prompts[i]),
                turns=tuple(turns[i]),
                rewards=rewards,
                returns=tuple(float(g) for g in returns) if returns is not None else (),
                episode_return=float(ep_return) if ep_return is not None else float("nan"),
            )
        )
    return GroupRollout(
        task_id=task_ids[0] if len(set(task_ids)) == 1 else "*",
        episodes=tuple(episodes),
        generation_seconds=gen_s,
        generation_tokens=gen_tokens,
        evaluation_seconds=eval_s + reset_s,
        turn_timings=tuple(timings),
        generation_decode_steps=gen_steps,
    )


def split_groups(batch: GroupRollout, task_ids: Sequence[str], group_size: int) -> list[GroupRollout]:
    """One GroupRollout per task from a batch of len(task_ids) x group_size episodes (task-major order).

    Episodes are renumbered 0..G-1 within their group. The batch's generation and evaluation time,
    shared by all its groups, is attributed by each group's share of the tokens (generation) and of the
    episodes (evaluation); decode steps likewise by token share.
    """
    total = batch.generation_tokens or 1
    out = []
    for j, task_id in enumerate(task_ids):
        eps = tuple(dataclasses.replace(ep, rollout=k) for k, ep in
                    enumerate(batch.episodes[j * group_size : (j + 1) * group_size]))
        tokens = sum(len(t.completion_ids) for ep in eps for t in ep.turns)
        share = tokens / total
        out.append(GroupRollout(
            task_id=task_id, episodes=eps, generation_seconds=batch.generation_seconds * share,
            generation_tokens=tokens, evaluation_seconds=batch.evaluation_seconds / len(task_ids),
            turn_timings=batch.turn_timings, generation_decode_steps=round(batch.generation_decode_steps * share),
        ))
    return out


def collect_groups(
    policy: Policy,
    factory: SessionFactory,
    task_ids: Sequence[str],
    group_size: int,
    sampling: SamplingSettings,
    max_turns: int,
    seeds: Sequence[int],
    shape: str | None = None,
) -> list[GroupRollout]:
    """G sampled episodes of each of `task_ids`, all generated together: one batch of len(task_ids) x G
    rows per turn (static-cache generation is fastest at 16 rows; a pilot group has 4). Group j is
    judged on environment seed `seeds[j]`. Every episode must end with the environment's returns (the
    trainer has nothing to learn from otherwise), so a missing return is an error naming the episode.
    """
    ids = [t for t in task_ids for _ in range(group_size)]
    env_seeds = [sd for sd in seeds for _ in range(group_size)]
    batch = run_episodes(policy, factory, ids, env_seeds, sampling, max_turns, shape)
    for ep in batch.episodes:
        if len(ep.returns) != len(ep.turns) or ep.episode_return != ep.episode_return:
            raise RuntimeError(
                f"task {ep.task_id} rollout {ep.rollout % group_size}: the environment returned no final returns "
                f"after {len(ep.turns)} turn(s) (returns={ep.returns}, episode_return={ep.episode_return}); "
                "is the server's max_turns equal to trainer.max_turns?"
            )
    if len(task_ids) == 1:
        return [batch]
    return split_groups(batch, task_ids, group_size)


def collect_group(
    policy: Policy,
    factory: SessionFactory,
    task_id: str,
    group_size: int,
    sampling: SamplingSettings,
    max_turns: int,
    seed: int = 0,
    shape: str | None = None,
) -> GroupRollout:
    """G sampled episodes of `task_id`, all judged on the same environment seed (a fair comparison)."""
    return collect_groups(policy, factory, [task_id], group_size, sampling, max_turns, [seed], shape)[0]
