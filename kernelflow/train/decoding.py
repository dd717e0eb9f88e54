"""How rollouts are decoded: the generation path's settings (`trainer.generation`), not what is sampled.

`GenerationSettings` lives apart from config.py's protocol settings because it changes the speed and the
numerics of sampling (merged bf16 weights, a static-cache kernel, an external engine), never the
sampling distribution itself (temperature, top_p and the vocabulary limit are the trainer's). It is
read by generation.py, merge.py, static.py and external.py; config.py re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass

GENERATION_BACKENDS = ("eager", "static_compiled", "vllm")


def _fail(kind: str, problems: list[str]) -> None:
    if problems:
        raise ValueError(f"invalid {kind}: " + "; ".join(problems))


@dataclass(frozen=True)
class GenerationSettings:
    """How rollouts are decoded (generation.py, merge.py, static.py); what is sampled stays the same.

    `merge_adapter`: generate with W + s B A folded into the weights (the base tensors are never
    written; merge.py), 2-4x faster than the unmerged PEFT model on a GPU; the update always runs
    unmerged. `backend`: `eager` is transformers' `generate` with its dynamic KV cache;
    `static_compiled` decodes with a static KV cache through a `torch.compile`d step (CUDA graphs on
    a GPU), the context padded on the left to a multiple of `length_bucket` and the batch to
    `batch_bucket` rows so that few shapes are ever compiled (static.py). `compile` false runs the
    static path uncompiled (CPU tests). `vllm` hands generation to vLLM (optional extra; external.py),
    which is given the merged weights before every call (merge_adapter does not apply to it).
    """

    merge_adapter: bool = True
    backend: str = "eager"
    length_bucket: int = 512  # static_compiled: context lengths rounded up to a multiple of this
    # static_compiled: batches padded up to a multiple of this many rows; 4 is the pilot's group (turn 2's
    # smaller batches pad to it); batching several groups per call (16 rows) is where the speed is
    batch_bucket: int = 4
    compile: bool = True  # static_compiled: torch.compile the decode step (mode reduce-overhead on cuda)
    # static_compiled: KV cache positions (context + new tokens) allocated from the first call, so a run
    # compiles once; None: the cache grows to the longest context seen (one compile per growth)
    max_context: int | None = None
    # vllm (optional extra, external.py): the share of GPU memory vLLM's colocated engine may take
    vllm_gpu_memory_utilization: float = 0.3

    def __post_init__(self) -> None:
        p = []
        if self.backend not in GENERATION_BACKENDS:
            p.append(f"backend={self.backend!r} (choose one of {GENERATION_BACKENDS})")
        if self.backend == "static_compiled" and not self.merge_adapter:
            p.append("backend=static_compiled needs merge_adapter=true (the compiled step runs the merged weights)")
        if not 0 < self.vllm_gpu_memory_utilization < 1:
            p.append(f"vllm_gpu_memory_utilization={self.vllm_gpu_memory_utilization} (must be in (0, 1))")
        if self.max_context is not None and self.max_context < 1:
            p.append(f"max_context={self.max_context} (must be >= 1, or null to grow with the contexts seen)")
        for name in ("length_bucket", "batch_bucket"):
            if getattr(self, name) < 1:
                p.append(f"{name}={getattr(self, name)} (must be >= 1)")
        _fail("GenerationSettings", p)
