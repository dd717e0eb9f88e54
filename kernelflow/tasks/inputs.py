"""Seeded evaluation inputs, drawn on the target device.

Distributions:
- `signed_wide` (default): N(0, 3^2) with a small share of outliers of magnitude 50..100, so every
  branch (negative and positive, both clamps of HardTanh/HardSigmoid) and every overflow path (exp of
  +-100 in sigmoid, tanh and a softmax without max subtraction) is exercised. Under it, returning
  the input or all zeros is far outside every task's tolerance.
- `kernelbench`: uniform [0, 1), as KernelBench's `get_inputs()` draws (for exact replication only;
  under it returning the input passes ReLU, LeakyReLU and HardTanh).

Check transformations (`TRANSFORMS`): a task may declare (`Task.check_transforms`) a few named
functions of a `signed_wide` draw under which its reference stays valid and finite and its tolerance
stays achievable by an honest fp32 kernel. They catch kernels that are correct only on the base
distribution (a softmax that subtracts a constant instead of the row max, a norm without its epsilon,
a max whose masked lanes load 0). A transformed distribution is named `"<base>+<transform>"`
(e.g. `"signed_wide+row_shift"`, see `distribution_name`); it is the base draw, bit for bit, with the
transform applied in place to the **first** input only (a matmul's B or a loss's targets are never
transformed), its own randomness drawn from a separate CPU generator seeded by the seed.

The same (seed, shape, distribution, device type) always gives the same tensor. Generation uses an
explicit `torch.Generator`, never the global RNG, and writes outliers by index so a 6.4 GB input
needs no second full-size temporary (the transforms work in place too).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernelflow.tasks.spec import DISTRIBUTIONS, TRANSFORM_NAMES

SIGMA = 3.0
OUTLIER_SHARE = 2e-4
OUTLIER_MIN, OUTLIER_MAX = 50.0, 100.0

# row_shift: each leading-dim slice gets one offset of magnitude U(SHIFT_MIN, SHIFT_MAX), signs alternating.
SHIFT_MIN, SHIFT_MAX = 250.0, 1000.0
LARGE_SCALE = 100.0  # large_magnitude: bulk N(0, 300^2), outliers 5e3..1e4
TINY_SCALE = 1e-3  # tiny_magnitude: bulk N(0, 0.003^2), so mean(x^2) ~ 9e-6 is of the order of eps = 1e-5
TIE_LEVELS = 2  # ties: round(x / 3) clamped to [-2, 2], five values


def _row_shift(x: torch.Tensor, gen: torch.Generator) -> None:
    """Add one constant per index of dim 0, |c| in [250, 1000], sign alternating by row (+, -, +, ...).

    Fair for ops invariant under (or exactly equivariant with) a per-row constant along the dims they
    reduce over: softmax and log-softmax over dim 1, max/min/argmax/argmin over dim 1, max pooling
    over the last dim. x - max is exact in fp32 (Sterbenz), so an honest kernel loses nothing; a
    constant in place of the row max overflows (+) or underflows to 0/0 (-), and a masked lane or
    padding loaded as 0 instead of -inf (+inf) wins every negative (positive) row.
    """
    rows = x.shape[0]
    mag = torch.empty(rows, dtype=torch.float64).uniform_(SHIFT_MIN, SHIFT_MAX, generator=gen)
    sign = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(rows)], dtype=torch.float64)
    offsets = (mag * sign).to(x.dtype).to(x.device)
    x.add_(offsets.view(rows, *([1] * (x.dim() - 1))))


def _large_magnitude(x: torch.Tensor, gen: torch.Generator) -> None:
    """Scale by 100: bulk |x| up to ~1e3, outliers 5e3..1e4.

    Fair for elementwise activations: their float64 references stay finite (saturating at 0, 1, -1 or
    x) and an honest fp32 kernel that never exponentiates a positive number is exact there. Catches
    kernels correct only on |x| <= 100: an input clamped to +-100 "against overflow", an exp of a
    positive argument done in float64 (overflows past 709 / 2 = 354 for tanh's exp(2x)).
    """
    x.mul_(LARGE_SCALE)


def _tiny_magnitude(x: torch.Tensor, gen: torch.Generator) -> None:
    """Scale by 1e-3: mean(x^2) ~ 9e-6, of the order of the norms' eps = 1e-5.

    Fair for the epsilon norms (RMS, instance, group, batch): the float64 reference includes eps, the
    outputs stay O(1) and an fp32 kernel has no underflow at these sizes. Catches a norm that drops
    eps (or adds it outside the square root): both pass at var ~ 9, where eps is 1e-6 relative.
    """
    x.mul_(TINY_SCALE)


def _ties(x: torch.Tensor, gen: torch.Generator) -> None:
    """round(x / 3) clamped to [-2, 2]: every reduced slice holds many exact ties of its extremum.

    Fair for argmax/argmin, whose references return the first index of the extremum (documented by
    torch.argmax and in the task description); every value is exact in every dtype. Catches a
    kernel that keeps the last index (>= instead of >) or combines blocks without a tie rule.
    """
    x.div_(SIGMA).round_().clamp_(-TIE_LEVELS, TIE_LEVELS)


TRANSFORMS: dict[str, Callable[[torch.Tensor, torch.Generator], None]] = {
    "row_shift": _row_shift,
    "large_magnitude": _large_magnitude,
    "tiny_magnitude": _tiny_magnitude,
    "ties": _ties,
}
assert tuple(TRANSFORMS) == TRANSFORM_NAMES  # spec.py holds the names (it must not import torch here)
# A distinct stream per transform, so adding one never changes another's draws.
_SALT = {"row_shift": 0x5EED_0001, "large_magnitude": 0x5EED_0002, "tiny_magnitude": 0x5EED_0003, "ties": 0x5EED_0004}


def split_distribution(distribution: str) -> tuple[str, str | None]:
    """`"signed_wide+row_shift"` -> ("signed_wide", "row_shift"); a base name -> (base, None)."""
    base, sep, transform = distribution.partition("+")
    if base not in DISTRIBUTIONS or (sep and transform not in TRANSFORMS):
        raise ValueError(f"unknown input distribution {distribution!r}; choose one of {DISTRIBUTIONS}, "
                         f"optionally with '+<transform>' for a transform of {tuple(TRANSFORMS)}")
    return base, (transform if sep else None)


def generate_input(
    shape: tuple[int, ...],
    seed: int,
    distribution: str = "signed_wide",
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """One input tensor of `shape`; writes into `out` (same shape and dtype) when given.

    `distribution` is a base name or `"<base>+<transform>"` (the base draw, then the transform).
    """
    base, transform = split_distribution(distribution)
    device = torch.device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    if out is None:
        out = torch.empty(shape, device=device, dtype=dtype)
    elif tuple(out.shape) != tuple(shape) or out.dtype != dtype:
        raise ValueError(f"out has shape {tuple(out.shape)} / {out.dtype}, expected {tuple(shape)} / {dtype}")
    if base == "kernelbench":
        out.uniform_(0.0, 1.0, generator=gen)
    else:
        out.normal_(0.0, SIGMA, generator=gen)
        flat = out.view(-1)
        n = flat.numel()
        # unique() because index assignment with repeated indices is nondeterministic on CUDA: the same
        # seed must give the same tensor bit for bit (the judge regenerates inputs to check them).
        idx = torch.unique(torch.randint(0, n, (max(1, int(n * OUTLIER_SHARE)),), generator=gen, device=device))
        k = idx.numel()
        mag = torch.empty(k, device=device, dtype=torch.float32).uniform_(OUTLIER_MIN, OUTLIER_MAX, generator=gen)
        sign = torch.randint(0, 2, (k,), generator=gen, device=device, dtype=torch.int8).to(torch.float32) * 2 - 1
        flat[idx] = (mag * sign).to(dtype)
    if transform is not None:
        tgen = torch.Generator()  # CPU: the transforms draw a few numbers, the same on every device type
        tgen.manual_seed((int(seed) ^ _SALT[transform]) & 0x7FFF_FFFF_FFFF_FFFF)
        TRANSFORMS[transform](out, tgen)
    return out


def input_seed(seed: int, index: int) -> int:
    """The seed of a call's `index`-th input: the call's seed for the first, a distinct stream for the others.

    The first input keeps the call's own seed, so single-input tasks draw exactly what they always did.
    """
    return int(seed) if index == 0 else int(seed) + 1_000_003 * index


def generate_inputs(
    shapes: list[tuple[int, ...]] | tuple[tuple[int, ...], ...],
    seed: int,
    distribution: str = "signed_wide",
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    out: list[torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """Every input of one call (`shapes` in forward's argument order); writes into `out` when given.

    A transformed distribution transforms the first input only; the others get the base draw.
    """
    if out is not None and len(out) != len(shapes):
        raise ValueError(f"out has {len(out)} tensors for {len(shapes)} input shapes")
    base, _ = split_distribution(distribution)
    return [generate_input(tuple(s), input_seed(seed, i), distribution if i == 0 else base, device, dtype=dtype,
                           out=None if out is None else out[i]) for i, s in enumerate(shapes)]
