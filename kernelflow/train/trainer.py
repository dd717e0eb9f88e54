"""The training loop the flow calls: multi-turn GRPO (Dr. GRPO or TRLOO) with LoRA against the environment.

    policy = load_policy(config.policy, config.lora, seed=config.seed)
    loop = GRPOLoop(config, policy, env_url, token, total_updates=plan(config, len(tasks))["updates"])
    for epoch in range(1, config.epochs + 1):
        metrics = loop.train_epoch(epoch, tasks)          # one update per task: G episodes, then a step
        loop.save_checkpoint(run_dir / f"epoch-{epoch}")
    results = loop.greedy_evaluate(all_tasks)
    loop.save_checkpoint(run_dir / "final", eval_results={"trained": results})

One update = one task group: G episodes of the task (rollout.py; generation batched over the group,
submissions judged concurrently), advantages from the environment's returns (advantages.py), one
optimiser step on the LoRA weights (loss.py, update.py), one `UpdateMetrics` record (metrics.py).
Given `data_parallel` (distributed.py; one process per GPU), each rank generates its share of every
group, all ranks compute the whole group's advantages and metrics, DDP averages the gradients, and
only rank 0 writes checkpoints: the same update as one process on the same episodes.

Why plain torch + PEFT and not TRL's GRPOTrainer. TRL 1.16 can express the pilot's Dr. GRPO
(rollout_func + env_mask + loss_type="dr_grpo", scale_rewards off; notes/trl_multiturn.md), but:
- TRLOO needs a per-token (per-turn) advantage, and TRL has no public API for it: the only way in is
  overriding the private `_generate_and_score_completions`, and `rollout_func` itself is flagged
  experimental ("may change or be removed at any time");
- an exact resume (the same next update after a restart) needs the RNG, optimiser and scheduler
  states under our control, and a checkpoint layout the flow owns, while TRL's Trainer checkpoints
  by global step with its own data-loader and sampler state around a dataset we do not have;
- TRL silently pads a short env_mask with 1s (trains feedback tokens) and counts only the last turn
  for truncation; the per-turn layout here is checked instead.
What the loop needs from TRL is small (a masked token-sum loss with a constant normaliser), so it is
written here in ~100 lines and tested on fixed batches. With one on-policy update per group the PPO
ratio is 1 and TRL's clipped objective has the same gradient as this loss.

This module does not choose tasks, track experiments or start servers (the flows layer does), and it
reaches the evaluator only through the environment.
"""

from __future__ import annotations

import logging
import random
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from kernelflow.train.advantages import estimate
from kernelflow.train.checkpoint import CheckpointInfo, load_checkpoint, package_versions, save_checkpoint
from kernelflow.train.config import TrainerConfig
from kernelflow.train.distributed import DataParallel, check_world
from kernelflow.train.evaluation import (
    EvalTiming,
    SampledEvalSettings,
    SampledTaskResult,
    TaskEvalResult,
    greedy_evaluate,
    sample_evaluate,
)
from kernelflow.train.generation import SamplingSettings
from kernelflow.train.loss import training_sequences
from kernelflow.train.metrics import UpdateMetrics, update_metrics
from kernelflow.train.model_card import model_card
from kernelflow.train.policy import Policy
from kernelflow.train.rollout import GroupRollout, SessionFactory, collect_group, collect_groups, env_session_factory
from kernelflow.train.update import apply_update, build_optimizer, build_scheduler

log = logging.getLogger("kernelflow.train")


def check_server(env_url: str, token: str | None, config: TrainerConfig) -> dict:
    """The server's settings, after checking that its episodes fit this trainer (fails fast, before any rollout)."""
    from kernelflow.env.client import fetch_server_info

    info = fetch_server_info(env_url, token=token)
    if info.get("max_turns") is not None and int(info["max_turns"]) != config.max_turns:
        raise ValueError(
            f"the environment server at {env_url} runs {info['max_turns']}-turn episodes but "
            f"trainer.max_turns={config.max_turns}; make them equal"
        )
    slots = info.get("max_sessions")
    if slots is not None and int(slots) < config.group_size:
        raise ValueError(
            f"the environment server at {env_url} allows {slots} concurrent sessions but a group needs "
            f"{config.group_size}; start it with max_sessions >= group_size (and >= the evaluation task count)"
        )
    log.info("environment %s: %s backend on %s, %s-turn episodes, gamma %s, stop_on_correct %s",
             env_url, info.get("backend"), info.get("device"), info.get("max_turns"), info.get("gamma"),
             info.get("stop_on_correct"))
    return info


class GRPOLoop:
    """Owns the policy's optimiser, scheduler, RNG and counters; runs epochs, evaluation and checkpoints.

    `env_url`/`token` reach a running environment server; tests pass `session_factory` instead.
    `total_updates` (epochs x training tasks) is needed only by decaying learning-rate schedules and
    for progress ETAs.
    """

    def __init__(
        self,
        config: TrainerConfig,
        policy: Policy,
        env_url: str | None = None,
        token: str | None = None,
        *,
        session_factory: SessionFactory | None = None,
        total_updates: int | None = None,
        data_parallel: DataParallel | None = None,
    ) -> None:
        self.server_info: dict | None = None
        if data_parallel is not None:
            check_world(config, data_parallel.world_size)
        if session_factory is None:
            if not env_url:
                raise ValueError("GRPOLoop needs env_url (a running environment server) or a session_factory")
            self.server_info = check_server(env_url, token, config)
            session_factory = env_session_factory(env_url, token, config.message_timeout_s)
        self.config = config
        self.policy = policy
        policy.generation = config.generation  # how rollouts and evaluations decode (generation.py)
        self.sessions = session_factory
        self.total_updates = total_updates
        self.updates = 0
        self.epochs_completed = 0
        self.train_tasks: tuple[str, ...] = ()
        self.history: list[UpdateMetrics] = []
        self.last_eval_timing: EvalTiming | None = None
        self._seed_everything(config.seed)
        self.optimizer = build_optimizer(policy, config)
        self.scheduler = build_scheduler(self.optimizer, config, total_updates)
        # Data-parallel rank (distributed.py): forward/backward go through the DDP wrapper, which
        # shares the policy's parameters; generation and checkpoints use the policy's own model.
        self.dp = data_parallel
        self.train_model = data_parallel.wrap(policy.model) if data_parallel is not None else None

    @staticmethod
    def _seed_everything(seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    def task_order(self, epoch: int, task_ids: Sequence[str]) -> list[str]:
        """The epoch's task order: shuffled from (seed, epoch) alone, so a resumed run draws the same."""
        order = list(task_ids)
        if self.config.shuffle_tasks:
            random.Random(f"{self.config.seed}:{epoch}").shuffle(order)
        return order

    def sampling(self) -> SamplingSettings:
        c = self.config
        return SamplingSettings(c.max_new_tokens, do_sample=True, temperature=c.temperature, top_p=c.top_p)

    def env_seed(self, update: int) -> int:
        """The environment seed of the group trained as update `update` (0-based)."""
        return self.config.env_seed + (update if self.config.env_seed_per_update else 0)

    def train_group(self, epoch: int, task_id: str, group: GroupRollout | None = None,
                    staleness: int = 0) -> UpdateMetrics:
        """G episodes of `task_id`, then one update. Returns that update's metrics.

        `group`: episodes already collected (rollout_groups > 1: `train_epoch` generates several groups
        together), sampled `staleness` updates ago.
        """
        c = self.config
        start = time.perf_counter()
        env_seed = self.env_seed(self.updates)
        shared = 0.0
        if group is not None:  # collected with the others of its chunk (single process)
            shared = group.generation_seconds + group.evaluation_seconds  # its share of the batch's time
        elif self.dp is None:
            group = collect_group(
                self.policy, self.sessions, task_id, c.group_size, self.sampling(), c.max_turns, env_seed, c.env_shape
            )
        else:  # this rank's share of the group, then the whole group from every rank
            share = self.dp.share(c.group_size)
            self.dp.seed_rollouts(c.seed, self.updates)
            local = collect_group(
                self.policy, self.sessions, task_id, len(share), self.sampling(), c.max_turns, env_seed, c.env_shape
            )
            group = self.dp.gather_group(local)
        episodes = group.episodes
        adv = estimate(c.estimator, [ep.episode_return for ep in episodes], [ep.returns for ep in episodes], c.credit)
        sequences = training_sequences(episodes, adv)
        if self.dp is None:
            result = apply_update(self.policy, self.optimizer, self.scheduler, sequences, c)
        else:
            mine = [sequences[i] for i in share]
            local_result = apply_update(self.policy, self.optimizer, self.scheduler, mine, c, model=self.train_model,
                                        all_zero=not any(adv.flat()))
            result = self.dp.combine(local_result)
        self.updates += 1
        metrics = update_metrics(
            epoch=epoch, update=self.updates, estimator=c.estimator, credit=c.credit, group=group, advantages=adv,
            result=result, staleness=staleness,
            samples=c.samples_per_update, sample_chars=c.sample_chars, wall_seconds=time.perf_counter() - start + shared,
        )
        self.history.append(metrics)
        return metrics

    def train_epoch(self, epoch: int, task_ids: Sequence[str]) -> list[UpdateMetrics]:
        """One pass over `task_ids` (1-based `epoch`, following the last completed or loaded one)."""
        if epoch != self.epochs_completed + 1:
            raise ValueError(
                f"train_epoch({epoch}) but {self.epochs_completed} epoch(s) are complete; run epoch "
                f"{self.epochs_completed + 1} next, or load the checkpoint of epoch {epoch - 1} first"
            )
        if not task_ids:
            raise ValueError("train_epoch needs at least one task id")
        self.train_tasks = tuple(dict.fromkeys((*self.train_tasks, *task_ids)))
        order = self.task_order(epoch, task_ids)
        log.info("epoch %d: %d task group(s) x %d episodes: %s", epoch, len(order), self.config.group_size, order)
        out = []
        start = time.perf_counter()
        k = 0
        chunk = self.config.rollout_groups
        for begin in range(0, len(order), chunk):
            tasks = order[begin : begin + chunk]
            groups: list = [None] * len(tasks)
            if chunk > 1:  # one generation batch for the chunk's groups, then their updates in order
                g0 = time.perf_counter()
                groups = collect_groups(
                    self.policy, self.sessions, tasks, self.config.group_size, self.sampling(), self.config.max_turns,
                    [self.env_seed(self.updates + j) for j in range(len(tasks))], self.config.env_shape,
                )
                log.info("rollouts of %d groups (%s) in one batch: %.1f s", len(tasks), tasks, time.perf_counter() - g0)
            for j, (task_id, group) in enumerate(zip(tasks, groups, strict=True)):
                k += 1
                m = self.train_group(epoch, task_id, group, staleness=j)
                out.append(m)
                self._progress(m, k, len(order), start)
        self.epochs_completed = epoch
        rewards = [m.reward_mean for m in out]
        log.info("epoch %d done in %.1f s: mean reward %.3f", epoch, time.perf_counter() - start,
                 statistics.fmean(rewards))
        return out

    def _progress(self, m: UpdateMetrics, k: int, n: int, start: float) -> None:
        elapsed = time.perf_counter() - start
        eta = ""
        if self.total_updates:
            left = self.total_updates - self.updates
            eta = f", ~{left * elapsed / k:.0f} s for the {left} update(s) left"
        log.info("%s [%d/%d this epoch, %.2f updates/min%s]", m.summary(self.total_updates), k, n,
                 60 * k / elapsed if elapsed else 0.0, eta)

    def greedy_evaluate(self, task_ids: Sequence[str], seed: int | None = None) -> list[TaskEvalResult]:
        """Greedy attempts (up to `eval_attempts`) for every task, batched across tasks."""
        results, timing = greedy_evaluate(self.policy, self.sessions, task_ids, self.config, seed)
        self.last_eval_timing = timing
        first = sum(r.first_correct for r in results)
        anyc = sum(r.correct for r in results)
        log.info("greedy evaluation of %d task(s): correct first %d, after feedback %d (%.1f s; %d tokens in %.1f s)",
                 len(results), first, anyc, timing.seconds, timing.generation_tokens, timing.generation_seconds)
        return results

    def sample_evaluate(
        self, task_ids: Sequence[str], settings: SampledEvalSettings, seed: int | None = None
    ) -> list[SampledTaskResult]:
        """`settings.samples` sampled episodes per task (environment seed `seed`); the training RNG is untouched."""
        results, timing = sample_evaluate(self.policy, self.sessions, task_ids, self.config, settings, seed)
        self.last_eval_timing = timing
        n = sum(r.samples for r in results)
        log.info("sampled evaluation of %d task(s) x %d at T %s: %d of %d episode(s) correct first, %d by any attempt "
                 "(%.1f s; %d tokens in %.1f s)", len(results), settings.samples, settings.temperature,
                 sum(r.first_correct for r in results), n, sum(r.correct for r in results), timing.seconds,
                 timing.generation_tokens, timing.generation_seconds)
        return results

    def save_checkpoint(
        self, directory: str | Path, eval_results: Mapping[str, Sequence[TaskEvalResult]] | None = None
    ) -> CheckpointInfo:
        """Adapter (PEFT format, with a model card) + optimiser/scheduler/RNG state + metadata."""
        def card(weight_sha256: dict[str, str]) -> str:
            return model_card(
                self.config, self.policy.base_id, self.policy.base_revision, weight_sha256,
                updates=self.updates, epochs_completed=self.epochs_completed, train_tasks=self.train_tasks,
                eval_results=eval_results, versions=package_versions(),
            )

        if self.dp is not None and not self.dp.is_main:
            # Data-parallel: every rank holds the same weights and optimiser state; rank 0 alone writes.
            return self.dp.broadcast(None)
        info = save_checkpoint(
            directory, self.policy, self.optimizer, self.scheduler, self.config,
            epochs_completed=self.epochs_completed, updates=self.updates, train_tasks=self.train_tasks, card=card,
        )
        log.info("checkpoint %s: %d update(s), %d epoch(s)", info.path, info.updates, info.epochs_completed)
        return info if self.dp is None else self.dp.broadcast(info)

    def load_checkpoint(self, directory: str | Path) -> CheckpointInfo:
        """Continue from `directory`: the next update equals the one the saved run would have made."""
        info = load_checkpoint(directory, self.policy, self.optimizer, self.scheduler)
        self.updates = info.updates
        self.epochs_completed = info.epochs_completed
        self.train_tasks = info.train_tasks
        log.info("resumed from %s: %d update(s), %d epoch(s)", info.path, info.updates, info.epochs_completed)
        return info
