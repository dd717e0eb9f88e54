"""The judge's knowledge of the task in one session: the float64 reference, expected outputs, comparison.

`ReferenceSide` loads the task's reference `Model` in float64 on the judge's device, says which shape
and dtype forward must return for each input shape set (from the reference on the meta device), takes
a call's inputs and float64 reference from the evaluator's `ReferenceCache` (computing and storing them
on a miss), and compares a candidate's output with the task's tolerance. None of it ever reaches the
worker: the worker gets inputs only.
"""

from __future__ import annotations

import copy
import math
import secrets

import torch

from kernelflow.eval.cache import Reference, ReferenceCache, reference_key
from kernelflow.eval.config import EvalConfig
from kernelflow.eval.correctness import CompareResult, as_reference_input, check_against_reference, compare, in_whole
from kernelflow.tasks import KERNELBENCH_TOLERANCE, Task, generate_inputs


class ReferenceSide:
    """See the module docstring; `load()` before anything else."""

    def __init__(self, task: Task, config: EvalConfig, device: torch.device, cache: ReferenceCache | None,
                 evaluator_version: str):
        self.task, self.device, self.cache, self.evaluator_version = task, device, cache, evaluator_version
        self.tolerance = KERNELBENCH_TOLERANCE if config.tolerance_mode == "kernelbench" else task.tolerance
        self.distribution = config.distribution or task.distribution
        self.dtype = getattr(torch, task.dtype)
        self.model = None
        self.output_specs: dict[tuple, tuple[tuple[int, ...], torch.dtype]] = {}

    def load(self) -> None:
        self.model = self.task.load_module().Model(*self.task.init_inputs).to(self.device).to(torch.float64)

    def output_spec(self, shapes: tuple) -> tuple[tuple[int, ...], torch.dtype]:
        """The shape and dtype forward must return for inputs of `shapes`.

        A floating reference result means the task's dtype (the reference runs in float64); an integer
        one (argmax indices) keeps its dtype.
        """
        if shapes not in self.output_specs:
            meta_model = copy.deepcopy(self.model).to("meta")
            with torch.no_grad():
                out = meta_model(*[torch.empty(s, dtype=torch.float64, device="meta") for s in shapes])
            self.output_specs[shapes] = (tuple(out.shape), self.dtype if out.dtype.is_floating_point else out.dtype)
        return self.output_specs[shapes]

    def cached(self, spec) -> Reference | None:
        """The call's inputs and float64 reference from the cache (computed and stored on a miss).

        Kept on the CPU even for a CUDA session: a tensor of ours in device memory could share an
        allocator segment with the buffers the worker maps, and a kernel can read past its arguments.
        None when the cache is off or the entry exceeds its whole budget.
        """
        if self.cache is None:
            return None
        out_shape, _ = self.output_spec(spec.shapes)
        numel_in = sum(math.prod(s) for s in spec.shapes)
        if not self.cache.fits(numel_in * self.dtype.itemsize + math.prod(out_shape) * 8):
            return None
        distribution = spec.distribution or self.distribution
        key = reference_key(task_id=self.task.task_id, shapes=spec.shapes, seed=spec.seed,
                            distribution=distribution, dtype=self.task.dtype, device=str(self.device),
                            evaluator_version=self.evaluator_version)
        ref = self.cache.get(key)
        if ref is None:
            xs = generate_inputs(spec.shapes, spec.seed, distribution, self.device, dtype=self.dtype)
            with torch.no_grad():
                expected = self.model(*[as_reference_input(x) for x in xs])
            ref = Reference(tuple(x.cpu() for x in xs), expected.cpu())
            del xs, expected
            self.cache.put(key, ref)
        return ref

    def compare(self, out: torch.Tensor, given: list[torch.Tensor], ref: Reference | None,
                sample_rows: int = 0) -> CompareResult:
        """The candidate's output against float64: the cached reference of the pristine inputs, or computed now.

        `sample_rows` > 0 compares only that many rows, drawn here from the OS's randomness after the
        call (a timed call, EvalConfig.timed_check_rows), where output row i depends on row i of the
        first input alone; otherwise, or when the output has no more rows than that, every row.
        """
        rows = self._sampled_rows(out, given, sample_rows)
        if rows is not None:
            return self._compare_rows(out, given, ref, rows)
        if ref is not None:
            return compare(out.cpu(), ref.expected, self.tolerance)
        return check_against_reference(self.model, given, out, self.tolerance,
                                       rows_independent=self.task.rows_independent)

    def _sampled_rows(self, out: torch.Tensor, given: list[torch.Tensor], k: int) -> list[int] | None:
        first = given[0]
        if (k <= 0 or not self.task.rows_independent or out.dim() == 0 or first.dim() < 2
                or out.shape[0] != first.shape[0] or out.shape[0] <= k):
            return None
        return sorted(secrets.SystemRandom().sample(range(out.shape[0]), k))

    def _compare_rows(self, out: torch.Tensor, given: list[torch.Tensor], ref: Reference | None,
                      rows: list[int]) -> CompareResult:
        index = torch.tensor(rows, device=out.device)
        if ref is not None:
            expected = ref.expected.index_select(0, index.cpu())
            got = out.index_select(0, index).cpu()
        else:
            xs = [given[0].index_select(0, index.to(given[0].device)), *given[1:]]
            with torch.no_grad():
                expected = self.model(*[as_reference_input(x) for x in xs])
            got = out.index_select(0, index)
        return in_whole(compare(got, expected, self.tolerance), rows.__getitem__)  # rows of the whole output
