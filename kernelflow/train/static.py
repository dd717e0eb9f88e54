"""The static-cache generation backend: one preallocated KV cache, a compiled decode step, few shapes.

transformers decodes with a `StaticCache` through `torch.compile(mode="reduce-overhead")` (CUDA graphs)
when it is handed a compileable cache on a GPU: the decode step then replays a captured graph instead
of launching ~2,300 kernels from Python (issue #18: 218 -> 1,387 tokens/s at batch 16 on a 7B shape).
A graph is specialised on the cache's shape, so this engine keeps that shape fixed:

- the context is left-padded to a multiple of `length_bucket` (prefill, which runs uncompiled, sees a
  few lengths; the attention mask hides the padding, as in the eager path);
- the batch is padded to the engine's row count (a multiple of `batch_bucket`) with copies of the
  first prompt that are forced to end at their first step (`_FinishRows`), then dropped;
- one `StaticCache` of (rows, cache_len) is kept on the policy and reset before every call; it only
  grows (a longer context or more rows than ever before: a new cache, hence one more compile), so a
  run compiles once per growth, at most a couple of times; `max_context` sizes it for the whole run
  from the first call (one compile per run). `allocations` counts them.

Sampling is transformers' own loop with the same GenerationConfig and logits processors as the eager
backend (generation.py), so the same distribution is sampled; the random draws differ (the padded
batch draws more). `compile=False` runs the same path uncompiled (CPU tests: inductor's CPU compile is
too slow for a unit test). This module does not merge the adapter (merge.py; the caller enters it).
"""

from __future__ import annotations

import logging
import warnings

import torch

from kernelflow.train.generation import SamplingSettings, generation_settings, left_pad
from kernelflow.train.policy import Policy

log = logging.getLogger("kernelflow.train")


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


class _FinishRows:
    """Logits processor: rows from `first` on (batch padding) can only emit `eos`, so they stop at once."""

    def __init__(self, first: int, eos: int) -> None:
        self.first, self.eos = first, eos

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores[self.first :, :] = float("-inf")
        scores[self.first :, self.eos] = 0.0
        return scores


class StaticEngine:
    """Generates through one reusable StaticCache (module doc); `allocations` counts cache shapes made."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.cache = None
        self.rows = 0
        self.cache_len = 0
        self.allocations = 0

    def _ensure_cache(self, rows: int, need: int) -> None:
        opts = self.policy.generation
        if self.cache is not None and rows <= self.rows and need <= self.cache_len:
            self.cache.reset()
            return
        from transformers import StaticCache

        self.rows = max(rows, self.rows)
        self.cache_len = max(round_up(max(need, opts.max_context or 0), opts.length_bucket), self.cache_len)
        self.cache = None  # free the old one before allocating the new
        model = self.policy.model
        self.cache = StaticCache(config=model.config, max_cache_len=self.cache_len)
        self.allocations += 1
        log.info("static generation cache %d: %d rows x %d positions (a new shape compiles once)",
                 self.allocations, self.rows, self.cache_len)

    def generate(self, prompts: list[list[int]], settings: SamplingSettings, processors) -> torch.Tensor:
        """(rows, steps) new ids, not yet cut at eos; the first len(prompts) rows are the prompts'."""
        from transformers import CompileConfig, LogitsProcessorList

        opts = self.policy.generation
        n = len(prompts)
        width = round_up(max(len(p) for p in prompts), opts.length_bucket)
        self._ensure_cache(round_up(n, opts.batch_bucket), width + settings.max_new_tokens)
        rows = [list(p) for p in prompts] + [list(prompts[0])] * (self.rows - n)
        ids, mask = left_pad(rows, self.policy.pad_id, self.policy.device)
        extra = width - ids.shape[1]
        if extra:
            ids = torch.nn.functional.pad(ids, (extra, 0), value=self.policy.pad_id)
            mask = torch.nn.functional.pad(mask, (extra, 0), value=0)
        gen_config, _ = generation_settings(self.policy, settings)
        gen_config.disable_compile = not opts.compile
        if opts.compile:
            gen_config.compile_config = CompileConfig()
        procs = LogitsProcessorList(list(processors))
        if self.rows > n:
            procs.append(_FinishRows(n, self.policy.eos_ids[0]))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*past_key_values.*", category=FutureWarning)
            out = self.policy.model.generate(
                input_ids=ids, attention_mask=mask, generation_config=gen_config, logits_processor=procs,
                # `past_key_values`: the name up to transformers ~5.2x, a deprecated alias of `cache` after (until 6.0)
                past_key_values=self.cache,
            )
        return out[:, width:]


def static_engine(policy: Policy) -> StaticEngine:
    """The policy's engine (made on first use, kept in `policy.runtime` with its cache and graphs)."""
    engine = policy.runtime.get("static_engine")
    if engine is None:
        engine = policy.runtime["static_engine"] = StaticEngine(policy)
    return engine
