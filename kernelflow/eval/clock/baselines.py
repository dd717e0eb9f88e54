"""What a timed submission is measured against: the device's calibration and the reference's own times.

`Baselines(device, config)` belongs to one `Evaluator` (one device). For a submission the judge
timed on CUDA, `timed_fields` returns the verdict's timing fields (runtime, t_min and the roofline
fraction from the device calibration, eager PyTorch's time and the speedup over it, and with
`compile_baseline` the same against `torch.compile`) and the physical floor below which the
median is impossible. The calibration is measured (or read from `clock/roofline.py`'s stored table)
once; each baseline is timed once per task, shape, input distribution and compiled-or-eager, on
the same device, under this GPU's exclusive lock, and cached until `clear`.

It does not time the submission (the judge's clock, `session/`), decide the status or the reward
(`evaluator.py`, `reward.py`), or run anything untrusted: the baselines are the task's reference
`Model`, in the judge's own process.
"""

from __future__ import annotations

import logging
import statistics
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import torch

from kernelflow.eval.clock.roofline import Calibration, calibrate
from kernelflow.eval.clock.timing import TimingResult, time_cuda
from kernelflow.eval.config import EvalConfig
from kernelflow.eval.reward import roofline_fraction
from kernelflow.tasks import Task, generate_inputs

log = logging.getLogger(__name__)

GpuLock = Callable[..., AbstractContextManager]  # the evaluator's `_gpu_lock(shared=False)`


class Baselines:
    """The device calibration and cached baseline timings of one evaluator (see the module docstring)."""

    def __init__(self, device: torch.device, config: EvalConfig, lock: threading.Lock | None = None):
        self.device = device
        self.config = config
        # The evaluator passes its own state lock, so a calibration or cache update excludes the same
        # work it always did; it is held while calibrating, never while a baseline is timed.
        self._lock = lock or threading.Lock()
        self._calibration: Calibration | None = None
        self._times: dict[tuple, TimingResult] = {}

    @property
    def calibration_source(self) -> str:
        """Where the calibration came from once measured; until then the configured source."""
        return self.config.calibration if self._calibration is None else self._calibration.source

    def timed_fields(self, task: Task, config: EvalConfig, times_ms: Sequence[float], compile_s: float | None,
                     gpu_lock: GpuLock) -> tuple[dict, float]:
        """The verdict's timing fields for a submission timed at `times_ms`, and the physical floor (ms)."""
        runtime = statistics.median(times_ms)
        cal = self.calibration()
        t_min = cal.t_min_ms(task, config.shape)
        eager = self.eager_time(task, config, gpu_lock)
        timing = dict(timed=True, runtime_ms=runtime, runtime_min_ms=min(times_ms),
                      runtime_max_ms=max(times_ms), t_min_ms=t_min,
                      roofline_fraction=roofline_fraction(t_min, runtime), eager_ms=eager.median_ms,
                      speedup_vs_eager=eager.median_ms / runtime,
                      compile_ms=None if compile_s is None else compile_s * 1e3)
        if config.compile_baseline:
            compiled = self.compile_time(task, config, gpu_lock)
            if compiled is not None:
                timing.update(torch_compile_ms=compiled.median_ms, speedup_vs_compile=compiled.median_ms / runtime)
        return timing, cal.impossible_below_ms(task, config.shape, config.impossible_factor)

    def calibration(self) -> Calibration:
        with self._lock:
            if self._calibration is None:
                self._calibration = calibrate(self.device, self.config.cache_dir, source=self.config.calibration)
            return self._calibration

    def eager_time(self, task: Task, config: EvalConfig, gpu_lock: GpuLock) -> TimingResult:
        """Eager PyTorch on the same device, timed like the submission (cached per task/shape/inputs)."""
        return self._time(task, config, compiled=False, gpu_lock=gpu_lock)

    def compile_time(self, task: Task, config: EvalConfig, gpu_lock: GpuLock) -> TimingResult | None:
        """The reference under `torch.compile` (what a user would pick instead of a hand-written kernel).

        Compilation and autotuning happen in the untimed warm-up calls; cached like eager timing. A
        reference that fails to compile is logged and gives no baseline (None), never a failed verdict.
        """
        try:
            return self._time(task, config, compiled=True, gpu_lock=gpu_lock)
        except Exception as exc:  # noqa: BLE001 - a baseline must not fail a submission's verdict
            log.warning("torch.compile baseline of %s failed: %s", task.task_id, exc)
            return None

    def clear(self) -> None:
        self._times.clear()

    def _time(self, task: Task, config: EvalConfig, compiled: bool, gpu_lock: GpuLock) -> TimingResult:
        distribution = config.distribution or task.distribution
        key = (task.task_id, config.shape, distribution, compiled)
        with self._lock:
            if key in self._times:
                return self._times[key]
        model = task.load_module().Model(*task.init_inputs).to(self.device)
        fn = torch.compile(model) if compiled else model
        shapes = task.input_shapes(config.shape)
        bufs = [torch.empty(s, dtype=getattr(torch, task.dtype), device=self.device) for s in shapes]

        def make_input(i: int) -> list[torch.Tensor]:
            return generate_inputs(shapes, 10_000 + i, distribution, self.device, out=bufs)

        with gpu_lock():
            result = time_cuda(fn, make_input, runs=config.timed_runs, device=self.device,
                               l2_flush_mb=config.l2_flush_mb, warmup=3 if compiled else 2)
        bufs = None  # free the 6 GB inputs before the next verdict
        torch.cuda.empty_cache()
        with self._lock:
            self._times[key] = result
        return result
