"""Batched generation: many token prompts in, one completion per prompt out, cut at its first eos.

Rows are left-padded with an attention mask (right padding shifts the model's view of turn 2 and the
sampled log-probabilities drift from the trainer's forward; notes/trl_multiturn.md section 4).
The model runs in eval mode without gradients; sampling draws from torch's global RNG, which the
trainer seeds and checkpoints. A fresh `GenerationConfig` is built per call, so nothing the hub
model ships as defaults (top_k, repetition penalty) changes what is sampled.

How it decodes follows `policy.generation` (config.GenerationSettings): with `merge_adapter` the
LoRA delta is folded into the weights for the call (merge.py; the update still runs unmerged), and
backend `static_compiled` hands the batch to the static-cache engine (static.py). The eager backend is
transformers' `generate` with its dynamic cache.

This module does not talk to the environment (rollout.py) or build the episode layout (transcript.py).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import torch

from kernelflow.train.policy import Policy


@dataclass(frozen=True)
class SamplingSettings:
    """How one turn is decoded: sampled (training) or greedy (evaluation)."""

    max_new_tokens: int
    do_sample: bool = True
    temperature: float = 1.0
    top_p: float = 1.0


@dataclass(frozen=True)
class Completion:
    """The ids one row generated, up to and including its first eos; `truncated` when no eos came."""

    ids: tuple[int, ...]
    truncated: bool
    ended_with: int | None  # the eos id that closed it, None when truncated
    # log-probability of each id under the distribution that sampled it (sampled decoding only): what
    # the sampler computed, kept for the importance-sampling correction (loss.py)
    logprobs: tuple[float, ...] | None = None


@dataclass(frozen=True)
class GenerationResult:
    """What one batched call produced, counted two ways.

    `tokens`: the ids the rows produced, each cut after its first eos (what is submitted and trained);
    `decode_steps`: the batch's forward passes after the prompt, one new token for every row still
    running (the longest row's length; rows that finished early idle as padding). Tokens/s is tokens
    over `seconds`; steps/s is the decoder's speed whatever the batch size.
    """

    completions: list[Completion]
    seconds: float
    decode_steps: int = 0

    @property
    def tokens(self) -> int:
        return sum(len(c.ids) for c in self.completions)


class _VocabLimit:
    """Logits processor: ids past the tokenizer (padded embedding rows) are never sampled."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores[:, self.limit :] = float("-inf")
        return scores


def left_pad(rows: list[list[int]] | list[tuple[int, ...]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), each (B, max_len), rows aligned to the right."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.as_tensor(list(r), dtype=torch.long)
            mask[i, width - len(r) :] = 1
    return ids.to(device), mask.to(device)


def cut_at_eos(row: list[int], eos_ids: tuple[int, ...], logprobs: list[float] | None = None) -> Completion:
    eos = set(eos_ids)
    for i, tok in enumerate(row):
        if tok in eos:
            lp = tuple(logprobs[: i + 1]) if logprobs is not None else None
            return Completion(tuple(row[: i + 1]), truncated=False, ended_with=tok, logprobs=lp)
    return Completion(tuple(row), truncated=True, ended_with=None,
                      logprobs=tuple(logprobs) if logprobs is not None else None)


class SampledLogprobs:
    """Logits processor, last in the list: records log pi_sample(x_t) of every sampled token.

    At step t it sees the final scores (after the vocabulary limit, temperature and top-p) but not yet
    the token drawn from them; that token is the last column of `input_ids` at step t + 1, and the
    last step's token is read from the output (`finish`). One (B, V) float32 tensor is kept between
    steps.
    """

    def __init__(self) -> None:
        self.previous: torch.Tensor | None = None
        self.values: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.previous is not None:
            self.values.append(self.previous.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.previous = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, new_ids: torch.Tensor) -> list[list[float]]:
        """(B, S) new ids -> per row, the S log-probabilities."""
        if self.previous is not None and len(self.values) < new_ids.shape[1]:
            self.values.append(self.previous.gather(-1, new_ids[:, -1:]).squeeze(-1))
        self.previous = None
        if not self.values:
            return [[] for _ in range(new_ids.shape[0])]
        return torch.stack(self.values, dim=1).tolist()


def _external(policy: Policy, prompts: list[list[int]], settings: SamplingSettings, start: float) -> GenerationResult:
    """The vllm backend (external.py): hand over the merged weights, then generate there."""
    from kernelflow.train.external import external_generator, merged_weights

    engine = external_generator(policy)
    with torch.no_grad():
        engine.load_weights(merged_weights(policy.model))
    rows = engine.generate(prompts, max_new_tokens=settings.max_new_tokens, do_sample=settings.do_sample,
                           temperature=settings.temperature, top_p=settings.top_p, eos_ids=policy.eos_ids,
                           vocab_limit=policy.vocab_limit)
    if policy.device.type == "cuda":
        torch.cuda.synchronize(policy.device)
    seconds = time.perf_counter() - start
    completions = [cut_at_eos(list(r.ids), policy.eos_ids, list(r.logprobs) if r.logprobs is not None else None)
                   for r in rows]
    return GenerationResult(completions, seconds, max((len(r.ids) for r in rows), default=0))


def adapter_context(policy: Policy):
    """The adapter merged into the weights for generation (merge.py), or nothing when not asked for."""
    if not policy.generation.merge_adapter:
        return contextlib.nullcontext()
    from kernelflow.train.merge import AdapterMerger

    persistent = policy.generation.backend == "static_compiled"  # CUDA graphs need fixed weight addresses
    merger = policy.runtime.get("merger")
    if merger is None or merger.persistent != persistent:
        merger = policy.runtime["merger"] = AdapterMerger(policy.model, persistent=persistent)
    return merger()


def generation_settings(policy: Policy, settings: SamplingSettings):
    """(GenerationConfig, logits processors) that `generate` decodes with; the loss mirrors them (loss.py).

    Sampling's temperature and top-p are given as processors here, not through the config (which is
    left at T 1, top_p 1, top_k 0, so transformers adds none of its own): the same warpers in the same
    order (vocabulary limit, temperature, top-p), with room for `SampledLogprobs` after them.
    """
    from transformers import GenerationConfig, LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

    kwargs = {
        "max_new_tokens": settings.max_new_tokens,
        "do_sample": settings.do_sample,
        "eos_token_id": list(policy.eos_ids),
        "pad_token_id": policy.pad_id,
        "bos_token_id": None,
        "use_cache": True,
    }
    processors = LogitsProcessorList([_VocabLimit(policy.vocab_limit)] if policy.vocab_limit else [])
    if settings.do_sample:
        kwargs.update(temperature=1.0, top_p=1.0, top_k=0)
        if settings.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(settings.temperature))
        if settings.top_p < 1.0:
            processors.append(TopPLogitsWarper(settings.top_p))
    return GenerationConfig(**kwargs), processors


def generate(policy: Policy, prompts: list[list[int]], settings: SamplingSettings) -> GenerationResult:
    """One completion per prompt, generated as one left-padded batch."""
    if not prompts:
        return GenerationResult([], 0.0)
    gen_config, processors = generation_settings(policy, settings)
    recorder = SampledLogprobs() if settings.do_sample else None
    if recorder is not None:
        processors.append(recorder)
    opts = policy.generation
    model = policy.model
    was_training = model.training
    model.eval()
    if policy.device.type == "cuda":
        torch.cuda.synchronize(policy.device)
    start = time.perf_counter()
    try:
        if opts.backend == "vllm":
            return _external(policy, prompts, settings, start)
        with adapter_context(policy), torch.no_grad():
            if opts.backend == "static_compiled":
                from kernelflow.train.static import static_engine

                new_ids = static_engine(policy).generate(prompts, settings, processors)
            else:
                input_ids, attention_mask = left_pad(prompts, policy.pad_id, policy.device)
                out = model.generate(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    generation_config=gen_config,
                    logits_processor=processors,
                )
                new_ids = out[:, input_ids.shape[1] :]
            logprobs = recorder.finish(new_ids)[: len(prompts)] if recorder is not None else None
            new = new_ids[: len(prompts)].tolist()
        if policy.device.type == "cuda":
            torch.cuda.synchronize(policy.device)
    finally:
        if was_training:
            model.train()
    seconds = time.perf_counter() - start
    steps = len(new[0]) if new else 0
    rows = [cut_at_eos(row, policy.eos_ids, logprobs[i] if logprobs else None) for i, row in enumerate(new)]
    return GenerationResult(rows, seconds, steps)
