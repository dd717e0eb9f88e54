"""The LoRA adapter folded into the base weights for generation, without ever writing the base weights.

Generating through an unmerged PEFT model runs two extra small matmuls per linear layer per decode
step (x A, then (x A) B), which doubles the kernel launches of a launch-bound decoder (issue #18:
40 vs 147 tokens/s on a 0.5B shape). `merged_adapter(model)` gives generation W' = W + s B A instead:

    for every LoRA linear layer:  W' = (W + scaling * B @ A) rounded to W's dtype, in a new tensor;
                                  the layer's weight is pointed at W' (`weight.data = W'`)
    inside, the adapter is disabled (`disable_adapter()`), so the layer computes x W'^T only
    on exit (always, also on error): every weight points back at its original tensor W

Why not peft's `merge_adapter()` / `unmerge_adapter()`: unmerging subtracts the delta again, and in
bf16 (W + d) - d is not W. Measured with peft 0.21: after 32 merge/unmerge cycles (one pilot epoch
pair's turns) of a 256x256 bf16 layer with a trained-size adapter, 15% of the frozen base weights
had moved, by up to 2e-3. Here the original tensors are never written, so the frozen base stays
bit-identical, and so does everything the update depends on: LoRA parameters (only read), their
`.grad` and the optimiser state (untouched). The cost is memory for W' while generating (the size
of the adapted layers' weights: ~13 GB for a 7B with LoRA on every linear layer; freed afterwards
and reused by the caching allocator).

W' is rounded once to bf16, so merged generation's log-probabilities differ from the unmerged
training forward by bf16 rounding (tests/train/test_merged_generation.py bounds it). This module does
not generate (generation.py) and covers LoRA on `nn.Linear` layers only (the trainer's targets);
an adapter on another layer type is refused with its name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def _lora_linears(model) -> list:
    from peft.tuners.lora import LoraLayer
    from peft.tuners.lora.layer import Linear as LoraLinear

    layers = []
    for name, module in model.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        if not isinstance(module, LoraLinear):
            raise NotImplementedError(
                f"merged generation covers LoRA on nn.Linear layers only; {name} is a {type(module).__name__} "
                "(set trainer.generation.merge_adapter=false)"
            )
        layers.append((name, module))
    return layers


class AdapterMerger:
    """`with merger():` runs the PeftModel with W + s B A in every adapted linear layer (module doc).

    `persistent=True` keeps the W' tensors between calls and refills them in place, so their
    addresses never change: CUDA graphs captured by the static-cache path (static.py) read the
    weights through fixed pointers, and a fresh allocation per call would force a re-capture. It
    holds their memory for the whole run; `persistent=False` frees it after each call.
    """

    def __init__(self, model, persistent: bool = False) -> None:
        self.model = model
        self.persistent = persistent
        self._buffers: dict[str, torch.Tensor] = {}

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        layers = _lora_linears(self.model)
        swapped: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        try:
            with torch.no_grad():
                for name, layer in layers:
                    if getattr(layer, "merged", False):
                        raise RuntimeError(f"{name} is already merged by peft; unmerge it before merged generation")
                    weight = layer.get_base_layer().weight
                    delta = None
                    for adapter in layer.active_adapters:
                        if adapter not in layer.lora_A:
                            continue
                        d = layer.get_delta_weight(adapter).float()
                        delta = d if delta is None else delta + d
                    if delta is None:
                        continue
                    merged = self._buffers.get(name) if self.persistent else None
                    if merged is None:
                        merged = torch.empty_like(weight)
                        if self.persistent:
                            self._buffers[name] = merged
                    merged.copy_(weight.float() + delta)
                    swapped.append((weight, weight.data))
                    weight.data = merged
            with self.model.disable_adapter():
                yield
        finally:
            for weight, original in swapped:
                weight.data = original


@contextlib.contextmanager
def merged_adapter(model) -> Iterator[None]:
    """Inside: `model` (a PeftModel) computes with W + s B A in every adapted linear layer (see module doc)."""
    with AdapterMerger(model)():
        yield
