"""An external generation engine (vLLM) behind a small interface, fed the merged policy weights.

`trainer.generation.backend: vllm` hands each generation batch to an `ExternalGenerator`: before the
call the engine receives the policy's current weights with the adapter merged, under the base model's
own parameter names (`merged_weights`), then generates ids and the sampler's log-probabilities. The
trainer never trains through the engine: the update runs on the PEFT model as always, and the
recorded log-probabilities feed the importance-sampling correction (loss.py), which is what such an
engine's other kernels call for (TRL does the same with vLLM).

What is covered here: the interface, the weight hand-over (names and values tested against a fake
engine) and the plumbing into `generate` (ids cut at eos, log-probs carried). What is not: vLLM
itself. It is an optional extra (`pip install 'kernelflow[vllm]'`) that cannot be installed on the
CPU machines the tests run on; `VLLMGenerator` is written against vLLM's offline `LLM` API
(`LLM.generate` with `SamplingParams(logprobs=0)`, and weights loaded into the colocated model
through `collective_rpc`, as TRL's colocate mode does) and has not been run yet.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from kernelflow.train.merge import AdapterMerger


@dataclass(frozen=True)
class GeneratedRow:
    ids: tuple[int, ...]  # new ids, possibly ending with an eos
    logprobs: tuple[float, ...] | None  # log pi_sample of each id, when the engine reports them


class ExternalGenerator(Protocol):
    """What the trainer needs of an external engine."""

    def load_weights(self, weights: Iterator[tuple[str, torch.Tensor]]) -> None: ...

    def generate(
        self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, do_sample: bool, temperature: float,
        top_p: float, eos_ids: Sequence[int], vocab_limit: int | None,
    ) -> list[GeneratedRow]: ...


def merged_weights(model) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of the base model with every LoRA delta folded in, named as the base's state dict.

    Yields inside the merge (merge.py), so the tensors are valid only while the caller consumes them:
    an engine must copy them into its own storage (load_weights does).
    """
    base = model.get_base_model()
    with AdapterMerger(model)():
        for name, tensor in base.state_dict().items():
            if "lora_" in name:
                continue
            yield name.replace(".base_layer.", "."), tensor


class VLLMGenerator:
    """vLLM's offline engine, colocated on the trainer's GPU (optional extra; not run yet, see module doc)."""

    def __init__(self, model_path: str, dtype: str = "bfloat16", gpu_memory_utilization: float = 0.3,
                 max_model_len: int = 8192, seed: int = 0) -> None:
        try:
            from vllm import LLM
        except ImportError as exc:  # pragma: no cover - vLLM is not installable here
            raise RuntimeError(
                "trainer.generation.backend=vllm needs vLLM: pip install 'kernelflow[vllm]' on a GPU host"
            ) from exc
        self.llm = LLM(model=model_path, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                       max_model_len=max_model_len, seed=seed, enable_prefix_caching=True)

    def load_weights(self, weights: Iterator[tuple[str, torch.Tensor]]) -> None:  # pragma: no cover
        batch = list(weights)
        self.llm.collective_rpc("load_weights", args=(batch,))

    def generate(self, prompts, *, max_new_tokens, do_sample, temperature, top_p, eos_ids, vocab_limit):  # pragma: no cover
        from vllm import SamplingParams, TokensPrompt

        params = SamplingParams(
            max_tokens=max_new_tokens, temperature=temperature if do_sample else 0.0, top_p=top_p if do_sample else 1.0,
            top_k=-1, stop_token_ids=list(eos_ids), logprobs=0,
            allowed_token_ids=list(range(vocab_limit)) if vocab_limit else None,
        )
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)
        rows = []
        for out in outs:
            c = out.outputs[0]
            lps = tuple(float(step[t].logprob) for step, t in zip(c.logprobs, c.token_ids, strict=True)) if c.logprobs else None
            rows.append(GeneratedRow(tuple(c.token_ids), lps if do_sample else None))
        return rows


def external_generator(policy) -> ExternalGenerator:
    """The policy's engine: `policy.runtime["external_generator"]` (tests put a fake there), else vLLM."""
    engine = policy.runtime.get("external_generator")
    if engine is None:
        opts = policy.generation
        engine = policy.runtime["external_generator"] = VLLMGenerator(
            policy.base_id, dtype=policy.config.dtype, gpu_memory_utilization=opts.vllm_gpu_memory_utilization)
    return engine
