"""The tables of the submission language (`static/language.py`): every name host code may use, with why.

Each entry maps a name to `(result, reason)`: `result` is what the expression yields, `"tensor"` (a
tensor whose values the checker then keeps out of arithmetic) or `"value"` (a Python number, shape,
dtype, device, config: metadata that carries no tensor values); `reason` is the one line that says
why a kernel wrapper needs it and why it computes nothing. A name missing here is outside the language.

What is deliberately absent, and why:
- value-computing torch ops and tensor methods (`torch.relu`, `x.clamp()`, `x.to(dtype)` (a cast is a
  computation), `x.clone()`, `x.copy_()`, `x.zero_()`, `x.item()`, `x.tolist()`): values come from kernels;
- `torch.full` / `torch.ones_like` / `torch.tensor`: an output filled on the host with a value of the
  host's choosing; zeros (accumulators for atomics) and ones (parameter init, as the references do) suffice;
- probes that differ between the interpreter and a GPU (`x.is_cuda`, `x.device.type`, `x.data_ptr()`,
  `torch.cuda.*`): a verdict must not depend on where it is judged;
- `print`, `open`, `getattr`, `isinstance` and every other builtin: not needed to allocate and launch.
"""

from __future__ import annotations

_ALLOC = "allocates a tensor; its values come only from the kernels that write it"
_META = "tensor metadata: reads sizes or layout, never values"
_VIEW = "a view or layout change of the same values (a copy at most), no arithmetic"

# Modules host code may import, under any alias (`import triton.language as tl`).
MODULES = {
    "torch": "tensors, dtypes and allocation",
    "torch.nn": "nn.Module, the base class of ModelNew, and nn.Parameter",
    "triton": "the kernel decorator, launch helpers and autotune configs",
    "triton.language": "tl: dtypes and tl.constexpr (kernel bodies are checked elsewhere)",
    "math": "arithmetic on Python numbers (block sizes, grids)",
}

# Calls on a module member, by the member's full name.
MODULE_CALLS = {
    "torch.empty": ("tensor", _ALLOC),
    "torch.empty_like": ("tensor", _ALLOC),
    "torch.empty_strided": ("tensor", _ALLOC),
    "torch.zeros": ("tensor", _ALLOC + " (zeroed: accumulators for atomic adds)"),
    "torch.zeros_like": ("tensor", _ALLOC + " (zeroed: accumulators for atomic adds)"),
    "torch.ones": ("tensor", "initial value of an nn.Parameter (a norm's weight), as the reference sets it"),
    "torch.nn.Parameter": ("tensor", "registers a weight the judge may copy from the reference"),
    "triton.cdiv": ("value", "ceil division of sizes, for grids"),
    "triton.next_power_of_2": ("value", "block sizes from a size"),
    "triton.Config": ("value", "one autotune configuration (block sizes, warps, stages)"),
    "triton.language.constexpr": ("value", "a compile-time constant for kernels"),
    **{f"math.{f}": ("value", "arithmetic on Python numbers") for f in
       "ceil floor log2 log sqrt exp isqrt gcd prod".split()},
}

# Module members read without a call: dtypes, constants, annotation types.
_DTYPES = "float32 float16 bfloat16 float64 int8 int16 int32 int64 uint8 bool float half long int double".split()
MODULE_VALUES = {
    **{f"torch.{d}": "a dtype, to allocate with" for d in _DTYPES},
    **{f"triton.language.{d}": "a dtype, to pass to a kernel" for d in _DTYPES if d not in ("half", "long", "double")},
    "torch.Tensor": "an annotation (`x: torch.Tensor`)",
    "math.pi": "a number", "math.e": "a number", "math.inf": "a number",
}

# Decorators: of a kernel (outermost first: heuristics / autotune, then jit) and none on host functions.
KERNEL_DECORATORS = {
    "triton.jit": "marks the kernel; its body is checked by pure_triton_kernels, not by this grammar",
    "triton.autotune": "picks a config per key; its arguments are host code and checked here",
    "triton.heuristics": "derives meta-parameters; its lambdas are host code and checked here",
}

# Tensor methods, by name, called on a value.
TENSOR_METHODS = {
    **{m: ("value", _META) for m in
       "size stride numel dim element_size is_contiguous nelement ndimension".split()},
    **{m: ("tensor", _VIEW) for m in
       "contiguous view view_as reshape flatten unsqueeze squeeze permute transpose t expand expand_as".split()},
    "new_empty": ("tensor", _ALLOC),
}

# Tensor attributes, read without a call.
TENSOR_ATTRS = {"shape": _META, "dtype": _META, "device": _META, "ndim": _META}

# Builtins, by name. `len` and `tuple` may take a tensor's metadata; none may take a tensor.
BUILTIN_CALLS = {
    "min": "sizes and block sizes", "max": "sizes and block sizes", "abs": "sizes and strides",
    "int": "a Python int from a size", "float": "a Python float from a scalar argument",
    "len": "the number of dimensions", "range": "the only loop host code has", "tuple": "a shape as a tuple",
    "round": "sizes", "bool": "flags",
}
# Exceptions host code may raise (an unsupported shape or argument, with a message).
RAISABLE = {"ValueError", "NotImplementedError", "RuntimeError", "TypeError", "AssertionError"}
# Names usable in annotations only.
ANNOTATION_NAMES = {"int", "float", "bool", "str", "tuple", "list", "None"}

DOC = "docs/submission_language.md"
HINT = ("host code may only import torch/triton/math, allocate tensors, read their metadata, reshape them, do "
        f"arithmetic on sizes and launch @triton.jit kernels; see {DOC}")
