"""The roofline floor t_min and the physical floor below which a time is impossible.

t_min = max(bytes_min / bandwidth, flops / flop_rate), with bandwidth and flop rate calibrated once
per device (a 2 GiB device-to-device copy counting bytes read plus written; an 8192^3 matmul in the
task's dtype) and cached per device name in the cache directory. A kernel time below
`impossible_factor * bytes_min / datasheet_bandwidth` cannot be real (the datasheet is the
hardware's own ceiling), so such a verdict gets `impossible_time` and reward 0.

This module does not time kernels; it only turns byte and flop counts into times.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import torch

from kernelflow.eval.timing import cache_dir, device_lock, measure_copy_bandwidth, measure_matmul_rate
from kernelflow.tasks import Task

# Peak HBM bandwidth from vendor datasheets, bytes/s, matched by substring of the device name.
DATASHEET_BANDWIDTH = {
    "H200": 4.8e12,
    "H100 SXM": 3.35e12,
    "H100 PCIe": 2.0e12,
    "H100": 3.35e12,
    "B200": 8.0e12,
    "A100-SXM4-80GB": 2.039e12,
    "A100": 1.555e12,
    "L40S": 0.864e12,
    "L4": 0.3e12,
    "A10G": 0.6e12,
}


@dataclass(frozen=True)
class Calibration:
    device_name: str
    copy_bandwidth: float  # bytes/s, read + written
    flop_rate_fp32: float  # flop/s
    datasheet_bandwidth: float | None
    measured_at: str
    torch_version: str

    def t_min_ms(self, task: Task, profile: str) -> float:
        t_bytes = task.bytes_min(profile) / self.copy_bandwidth
        t_flops = task.flops(profile) / self.flop_rate_fp32
        return max(t_bytes, t_flops) * 1e3

    def impossible_below_ms(self, task: Task, profile: str, factor: float) -> float:
        """Times under this are physically impossible (datasheet, else 1.25 x measured, bandwidth)."""
        ceiling = self.datasheet_bandwidth or 1.25 * self.copy_bandwidth
        return factor * task.bytes_min(profile) / ceiling * 1e3


def datasheet_bandwidth(device_name: str) -> float | None:
    for key, value in DATASHEET_BANDWIDTH.items():
        if key in device_name:
            return value
    return None


def calibrate(device: torch.device, configured_dir: str | None = None, refresh: bool = False) -> Calibration:
    """The device's calibration, measured once (under the device lock) and cached by device name."""
    name = torch.cuda.get_device_name(device)
    path = cache_dir(configured_dir) / f"calibration-{name.replace(' ', '_').replace('/', '_')}.json"
    if path.exists() and not refresh:
        data = json.loads(path.read_text())
        if data.get("torch_version") == torch.__version__:
            return Calibration(**data)
    sheet = datasheet_bandwidth(name)
    with device_lock(device.index or 0, configured_dir):
        bandwidth = measure_copy_bandwidth(device)
        if sheet is not None and bandwidth > 1.05 * sheet:
            # A copy faster than the hardware's ceiling was mis-timed (e.g. measured beside other work):
            # measure once more rather than cache a floor that would cap every kernel's reward wrongly.
            bandwidth = measure_copy_bandwidth(device)
            if bandwidth > 1.05 * sheet:
                raise RuntimeError(f"calibrated copy bandwidth {bandwidth / 1e12:.2f} TB/s exceeds the datasheet's "
                                   f"{sheet / 1e12:.2f} TB/s for {name}: the GPU is shared or the timer is broken; "
                                   "free the GPU and evaluate again")
        rate = measure_matmul_rate(device)
    torch.cuda.empty_cache()
    cal = Calibration(
        device_name=name,
        copy_bandwidth=bandwidth,
        flop_rate_fp32=rate,
        datasheet_bandwidth=sheet,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        torch_version=torch.__version__,
    )
    path.write_text(json.dumps(asdict(cal), indent=2))
    return cal
