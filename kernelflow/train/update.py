"""One optimisation step on the LoRA parameters from a group's training sequences.

The group's sequences are split into micro-batches (`micro_batch_size`); each micro-batch's loss uses
the same constant denominator (G * normaliser), so accumulating their gradients gives exactly the
gradient of the whole group's loss, whatever the micro-batch size. Then: clip the global gradient
norm, AdamW step, scheduler step. Only parameters with `requires_grad` (the adapter) are given to the
optimiser; the base model's weights are frozen by PEFT and never change.

Data-parallel training (distributed.py) passes each rank's equal share of the group (G / N
sequences) and the policy's DistributedDataParallel wrapper as `model`. The denominator is then
(G / N) * normaliser per rank and DDP averages the N ranks' gradients, so the gradient is
sum over all G episodes / (G * normaliser): exactly the single-process one. Under DDP every rank
must run the same backward passes (the last one all-reduces), so an all-masked micro-batch is not
skipped there, and the earlier micro-batches run under `no_sync` (one all-reduce per update).

An update whose advantages are all zero (every episode of the group earned the same return, e.g. all
`no_code`) has a zero policy gradient: with `kl_weight` 0 it runs no forward, no backward and no
optimiser step (AdamW would still move the weights by its momentum and weight decay on a zero
gradient), and returns `skipped=True`; the scheduler still steps, so the learning rate follows the
update count whether or not a step was skipped (and a resumed run sees the same schedule). Under DDP
the ranks hold different shares of the group, so the caller decides from the whole group
(`all_zero`) and every rank skips together.

The optimiser and scheduler are built here too, so checkpoint.py can restore them to the same state.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kernelflow.train.config import TrainerConfig
from kernelflow.train.loss import TrainingSequence, collate, policy_gradient_loss, token_logprobs
from kernelflow.train.policy import Policy


@dataclass(frozen=True)
class UpdateResult:
    loss: float
    grad_norm: float  # before clipping
    lr: float  # the rate this step used
    tokens: int  # masked (trained) tokens
    mean_logp: float  # over trained tokens, before the step
    kl: float  # mean k3 over trained tokens (0 when kl_weight is 0)
    seconds: float
    skipped: bool = False  # every advantage was 0 (and no KL): no forward, backward or optimiser step
    # truncated importance sampling (loss.py), over trained tokens; 1 / 0 when it is off
    is_ratio_mean: float = 1.0
    is_ratio_max: float = 1.0
    is_truncated_fraction: float = 0.0
    logp_diff_max: float = 0.0  # largest |log pi_train - log pi_sample|


def build_optimizer(policy: Policy, config: TrainerConfig) -> torch.optim.Optimizer:
    params = [p for _, p in policy.trainable_parameters()]
    if not params:
        raise ValueError("the policy has no trainable parameters; was the LoRA adapter attached?")
    return torch.optim.AdamW(
        params,
        lr=config.learning_rate,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
    )


def build_scheduler(optimizer: torch.optim.Optimizer, config: TrainerConfig, total_updates: int | None):
    """LambdaLR: linear warmup over `warmup_updates`, then constant, linear decay or cosine to 0."""
    if config.lr_scheduler != "constant" and not total_updates:
        raise ValueError(f"lr_scheduler={config.lr_scheduler!r} needs total_updates (epochs * train tasks)")
    warm = config.warmup_updates
    total = total_updates or 1

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / (warm + 1)
        if config.lr_scheduler == "constant":
            return 1.0
        progress = min(1.0, (step - warm) / max(1, total - warm))
        if config.lr_scheduler == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def apply_update(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    scheduler,
    sequences: Sequence[TrainingSequence],
    config: TrainerConfig,
    *,
    model=None,
    all_zero: bool | None = None,
) -> UpdateResult:
    """Accumulate the group's gradient over micro-batches, clip, and step once.

    `model`: what forward and backward run through; None is the policy's own model, a
    DistributedDataParallel wrapper of it averages the gradients over the ranks (see the module doc).
    `all_zero`: whether every advantage of the whole group is 0; None decides from `sequences`
    (single process only: under DDP the caller must say, so that all ranks agree).
    """
    start = time.perf_counter()
    peft_model = policy.model
    model = peft_model if model is None else model
    synced = model is not peft_model
    if all_zero is None:
        all_zero = not synced and not any(a for s in sequences for a in s.advantages)
    if all_zero and config.kl_weight == 0:
        lr = float(optimizer.param_groups[0]["lr"])
        with warnings.catch_warnings():  # "scheduler.step() before optimizer.step()": skipping it is the point
            warnings.simplefilter("ignore", UserWarning)
            scheduler.step()
        return UpdateResult(loss=0.0, grad_norm=0.0, lr=lr, tokens=0, mean_logp=0.0, kl=0.0,
                            seconds=time.perf_counter() - start, skipped=True)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    denominator = float(len(sequences) * config.normalizer)
    loss_total = tokens = logp_sum = kl_sum = 0.0
    is_cap = config.importance_sampling_cap if config.importance_sampling == "token_truncate" else None
    is_sum = is_trunc = 0.0
    is_max: float | None = None
    diff_max = 0.0
    mb = config.micro_batch_size
    dist = (config.temperature, config.top_p)  # the distribution the rollouts were sampled from (loss.py)
    begins = range(0, len(sequences), mb)
    for k, begin in enumerate(begins):
        batch = collate(sequences[begin : begin + mb], policy.pad_id, policy.device)
        if not synced and float(batch.loss_mask.sum()) == 0:
            continue
        accumulate = model.no_sync() if synced and k < len(begins) - 1 else contextlib.nullcontext()
        with accumulate:
            logp, first = token_logprobs(model, batch, policy.vocab_limit, *dist)
            mask, adv = batch.loss_mask[:, first:], batch.advantages[:, first:]
            ref = None
            if config.kl_weight > 0:
                with torch.no_grad(), peft_model.disable_adapter():
                    ref, _ = token_logprobs(peft_model, batch, policy.vocab_limit, *dist)
            samp = batch.sampling_logp[:, first:] if batch.sampling_logp is not None else None
            loss, stats = policy_gradient_loss(logp, mask, adv, denominator, ref, config.kl_weight, samp, is_cap)
            loss.backward()
        loss_total += float(loss.detach())
        tokens += stats["tokens"]
        logp_sum += stats["logp_sum"]
        kl_sum += stats["kl_sum"]
        if is_cap is not None:
            is_sum += stats["is_ratio_sum"]
            is_trunc += stats["is_truncated"]
            is_max = stats["is_ratio_max"] if is_max is None else max(is_max, stats["is_ratio_max"])
            diff_max = max(diff_max, stats["logp_diff_max"])
    params = [p for _, p in policy.trainable_parameters()]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm))
    lr = float(optimizer.param_groups[0]["lr"])
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if policy.device.type == "cuda":
        torch.cuda.synchronize(policy.device)
    return UpdateResult(
        loss=loss_total,
        grad_norm=grad_norm,
        lr=lr,
        tokens=int(tokens),
        mean_logp=logp_sum / tokens if tokens else 0.0,
        kl=kl_sum / tokens if tokens else 0.0,
        seconds=time.perf_counter() - start,
        is_ratio_mean=is_sum / tokens if is_cap is not None and tokens else 1.0,
        is_ratio_max=is_max if is_max is not None else 1.0,
        is_truncated_fraction=is_trunc / tokens if tokens else 0.0,
        logp_diff_max=diff_max,
    )
