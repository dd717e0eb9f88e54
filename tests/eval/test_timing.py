"""The timing protocol's corrections (kernelflow/eval/clock/timing.py): overhead subtraction and its bounds.

The arithmetic runs anywhere; the measurement of an empty region needs a GPU (marked `gpu`).
"""

from __future__ import annotations

import pytest
import torch

from kernelflow.eval.clock.timing import MAX_TIMER_OVERHEAD_MS, MIN_RESOLVABLE_MS, measure_timer_overhead, net_time_ms, time_cuda


def test_net_time_subtracts_the_overhead():
    assert net_time_ms(0.150, 0.008) == pytest.approx(0.142)


def test_net_time_never_reaches_zero():
    # A 3 us kernel at small shape can read below the protocol overhead from noise: the reported time
    # stays positive, so speedups and roofline fractions remain defined.
    assert net_time_ms(0.005, 0.010) == MIN_RESOLVABLE_MS
    assert net_time_ms(0.010, 0.010) == MIN_RESOLVABLE_MS


@pytest.mark.gpu
@pytest.mark.gpu_alone
def test_empty_region_overhead_is_small_and_capped():
    overhead = measure_timer_overhead(torch.device("cuda"))
    assert 0 <= overhead <= MAX_TIMER_OVERHEAD_MS


@pytest.mark.gpu
@pytest.mark.gpu_alone
def test_launch_cover_hides_host_latency_of_a_tiny_kernel():
    # 1 MiB of zeros takes ~1 us on the device; the host takes tens of us to launch it. With the GPU
    # spinning while the host launches and the overhead subtracted, the time reads near the device time.
    x = torch.empty(1 << 18, device="cuda")
    result = time_cuda(lambda t: t.zero_(), lambda _: x, runs=20)
    assert result.median_ms < 0.02
