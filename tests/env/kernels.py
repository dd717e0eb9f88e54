"""Submissions the environment tests send: an honest Triton ReLU, a wrong one, and answers without code.

Written here (not shared with the evaluator's fixtures) so the environment tests depend on nothing
but the evaluator's public API. Each is the text a model would answer, fenced like a model's reply.
"""

HONEST_RELU = '''```python
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0).to(tl.int64)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK_SIZE=4096)
        return out
```'''

# Compiles and runs, but copies x through unchanged: negative inputs come out wrong.
WRONG_RELU = HONEST_RELU.replace("tl.maximum(x, 0.0)", "x").replace("def relu_kernel", "def copy_kernel").replace(
    "relu_kernel[", "copy_kernel["
)

NO_CODE = "I am not sure how to write this kernel."


def no_code(tag: str) -> str:
    """A distinct answer without code (judged instantly as no_code)."""
    return f"{NO_CODE} ({tag})"
