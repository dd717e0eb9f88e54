"""The policy-gradient loss over multi-turn episodes: masked, per-token advantages, constant normaliser.

For a group of G episodes with token mask m (1 on the model's own tokens of every turn, 0 on prompt
and feedback tokens) and per-token advantage A (the estimator's value for that token's turn):

    loss = sum_i sum_t m_i,t * ( -A_i,t * log pi(x_i,t | x_i,<t)  +  beta * k3_i,t ) / (G * L)

with L the constant normaliser (default max_turns * max_new_tokens; Dr. GRPO's "generate max length"),
so neither the length of an answer nor the number of turns an episode reached rescales its tokens,
and k3 = exp(ref - logp) - (ref - logp) - 1 the usual non-negative KL estimate against the base model
(adapter disabled), used only when beta > 0 (default 0).

log pi is the log-probability under the distribution the rollouts were sampled from, not the raw
softmax: `sampling_logits` applies generation.py's logits processors in the order transformers
applies them (the vocabulary limit, then temperature, top-k, top-p), so at temperature 0.8 the
gradient is taken for pi_0.8 = softmax(z / 0.8), as TRL does by dividing the logits by T. The KL
reference goes through the same transform. A test compares both with `generate`'s processed scores.
The token that was sampled is never cut by top-k/top-p here: on-policy it is inside the kept set,
and a rounding difference at the nucleus edge would otherwise give log 0 and a NaN gradient.

The trainer makes one update per group from freshly sampled episodes, so the PPO ratio is exactly 1
and clipping never binds; the loss above has the same gradient and is what is computed.

Truncated importance sampling (`importance_sampling="token_truncate"`, off by default). The sampler's
numerics need not be the update's: merged bf16 weights and a static-cache kernel give slightly other
log-probabilities than the unmerged training forward. Generation records log pi_sample of every
sampled token (generation.py), and each token's term is then weighted by
w = min(exp(log pi_train - log pi_sample), cap) with pi_train detached (TRL's `token_truncate` with
C_max 3; Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training"):
-A * w * log pi_train. The stats report the ratio's mean and max, the share truncated and the largest
|log pi_train - log pi_sample| (how far the two numerics are apart).
This module does not own the optimiser (update.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kernelflow.train.advantages import Advantages
from kernelflow.train.rollout import EpisodeRecord


@dataclass(frozen=True)
class TrainingSequence:
    """One episode as the update sees it: ids, 0/1 mask and a per-token advantage (0 where masked)."""

    ids: tuple[int, ...]
    mask: tuple[int, ...]
    advantages: tuple[float, ...]
    sampling_logprobs: tuple[float, ...] | None = None  # the sampler's log-prob per id (0 where masked)


def training_sequences(episodes: Sequence[EpisodeRecord], advantages: Advantages) -> list[TrainingSequence]:
    """Spread each (episode, turn) advantage over that turn's tokens."""
    if len(episodes) != len(advantages.per_turn):
        raise ValueError(f"{len(episodes)} episodes but advantages for {len(advantages.per_turn)}")
    out = []
    for ep, adv in zip(episodes, advantages.per_turn, strict=True):
        lay = ep.token_layout()
        if len(adv) != len(ep.turns):
            raise ValueError(f"episode {ep.rollout}: {len(ep.turns)} turns but {len(adv)} advantages")
        per_token = tuple(adv[t] if t >= 0 else 0.0 for t in lay.turn)
        out.append(TrainingSequence(lay.ids, lay.mask, per_token, _sampling_logprobs(ep, len(lay.ids))))
    return out


def _sampling_logprobs(ep: EpisodeRecord, length: int) -> tuple[float, ...] | None:
    """The sampler's log-probs laid out like `token_layout` (prompt and feedback 0); None if any turn lacks them."""
    if any(t.completion_logprobs is None for t in ep.turns):
        return None
    out = [0.0] * len(ep.prompt_ids)
    for t in ep.turns:
        out += list(t.completion_logprobs) + [0.0] * len(t.feedback_ids)
    if len(out) != length:
        raise ValueError(f"episode {ep.rollout}: {len(out)} sampling log-probs for {length} ids")
    return tuple(out)


@dataclass
class TokenBatch:
    """Left-padded tensors; `targets`, `loss_mask` and `advantages` are aligned with input_ids[:, 1:]."""

    input_ids: torch.Tensor  # (B, T)
    attention_mask: torch.Tensor  # (B, T)
    position_ids: torch.Tensor  # (B, T): 0 at each row's first real token, as generate() numbers them
    loss_mask: torch.Tensor  # (B, T-1) float
    advantages: torch.Tensor  # (B, T-1) float
    sampling_logp: torch.Tensor | None = None  # (B, T-1) float, when every sequence carries them


def collate(seqs: Sequence[TrainingSequence], pad_id: int, device) -> TokenBatch:
    width = max(len(s.ids) for s in seqs)
    b = len(seqs)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    att = torch.zeros((b, width), dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.float32)
    adv = torch.zeros((b, width), dtype=torch.float32)
    have_sampling = all(s.sampling_logprobs is not None for s in seqs)
    samp = torch.zeros((b, width), dtype=torch.float32) if have_sampling else None
    for i, s in enumerate(seqs):
        n = len(s.ids)
        ids[i, width - n :] = torch.as_tensor(s.ids, dtype=torch.long)
        att[i, width - n :] = 1
        mask[i, width - n :] = torch.as_tensor(s.mask, dtype=torch.float32)
        adv[i, width - n :] = torch.as_tensor(s.advantages, dtype=torch.float32)
        if samp is not None:
            samp[i, width - n :] = torch.as_tensor(s.sampling_logprobs, dtype=torch.float32)
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    return TokenBatch(
        input_ids=ids.to(device),
        attention_mask=att.to(device),
        position_ids=pos.to(device),
        loss_mask=mask[:, 1:].to(device),
        advantages=adv[:, 1:].to(device),
        sampling_logp=samp[:, 1:].to(device) if samp is not None else None,
    )


def sampling_logits(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0
) -> torch.Tensor:
    """float32 logits (K, V) transformed as sampling transformed them: / T, then top-k, then top-p.

    Mirrors transformers' TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper (min 1 token
    kept); `targets` (K,) are the sampled ids, always kept (see the module doc). The vocabulary limit
    is applied by the caller (slicing the padded rows off, which is the same as -inf there).
    """
    z = logits.float()
    if temperature != 1.0:
        z = z / temperature
    cut = None
    if top_k and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        cut = z < kth
        z = z.masked_fill(cut, float("-inf"))
    if top_p < 1.0:
        sorted_z, order = torch.sort(z, descending=False)
        cumulative = sorted_z.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative <= (1 - top_p)
        drop_sorted[..., -1:] = False
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        cut = drop if cut is None else cut | drop
    if cut is not None:
        keep_target = torch.zeros_like(cut).scatter_(-1, targets.unsqueeze(-1), True)
        unscaled = logits.float() / temperature if temperature != 1.0 else logits.float()
        z = torch.where(cut & ~keep_target, torch.full_like(z, float("-inf")), unscaled)
    return z


def token_logprobs(
    model,
    batch: TokenBatch,
    vocab_limit: int | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
) -> tuple[torch.Tensor, int]:
    """log pi(x_t | x_<t) for the targets from the first masked position on: ((B, K), offset into T-1).

    pi is the sampling distribution: logits past `vocab_limit` dropped, then `sampling_logits`
    (temperature, top-k, top-p) as generation.py sampled with. Only the logits the loss needs are
    materialised (`logits_to_keep`), and the softmax runs per row in float32, which bounds memory on
    long two-turn sequences (top_p < 1 also sorts each row's (K, V) logits: more memory and time).
    """
    nz = batch.loss_mask.nonzero()
    first = int(nz[:, 1].min()) if len(nz) else batch.loss_mask.shape[1] - 1
    keep = batch.input_ids.shape[1] - first  # logits at positions first .. T-1 (the last one is unused)
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=keep,
        use_cache=False,
    )
    logits = out.logits[:, :-1, :]
    if vocab_limit is not None:
        logits = logits[..., :vocab_limit]
    targets = batch.input_ids[:, first + 1 :]
    rows = []
    for row_logits, row_targets in zip(logits, targets, strict=True):
        z = sampling_logits(row_logits, row_targets, temperature, top_p, top_k)
        lp = torch.log_softmax(z, dim=-1)
        rows.append(lp.gather(-1, row_targets.unsqueeze(-1)).squeeze(-1))
    return torch.stack(rows), first


def policy_gradient_loss(
    logp: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    denominator: float,
    ref_logp: torch.Tensor | None = None,
    kl_weight: float = 0.0,
    sampling_logp: torch.Tensor | None = None,
    is_cap: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Masked token-sum of -A * w * logp (+ beta * k3), divided by the constant `denominator`.

    w = min(exp(logp.detach() - sampling_logp), is_cap) when `is_cap` is given (truncated importance
    sampling, module doc), else 1.
    """
    is_stats: dict[str, float] = {}
    if is_cap is not None:
        if sampling_logp is None:
            raise ValueError("importance sampling needs the sampler's log-probabilities (generation records them)")
        diff = logp.detach() - sampling_logp
        ratio = torch.exp(diff)
        weight = ratio.clamp(max=is_cap)
        on = mask > 0
        is_stats = {
            "is_ratio_sum": float(ratio[on].sum()),
            "is_ratio_max": float(ratio[on].max()) if on.any() else 1.0,
            "is_truncated": float((ratio[on] > is_cap).sum()),
            "logp_diff_max": float(diff[on].abs().max()) if on.any() else 0.0,
        }
        per_token = -advantages * weight * logp
    else:
        per_token = -advantages * logp
    kl_sum = 0.0
    if kl_weight > 0:
        if ref_logp is None:
            raise ValueError("kl_weight > 0 needs the reference log-probabilities")
        delta = ref_logp - logp
        k3 = torch.exp(delta) - delta - 1.0
        per_token = per_token + kl_weight * k3
        kl_sum = float((k3.detach() * mask).sum())
    loss = (per_token * mask).sum() / denominator
    stats = {
        "tokens": float(mask.sum()),
        "logp_sum": float((logp.detach() * mask).sum()),
        "kl_sum": kl_sum,
        **is_stats,
    }
    return loss, stats
