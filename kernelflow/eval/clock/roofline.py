"""The roofline floor t_min and the physical floor below which a time is impossible.

t_min = max(bytes_min / bandwidth, flops / flop_rate), with bandwidth and flop rate calibrated once
per device (a 2 GiB device-to-device copy counting bytes read plus written; an 8192^3 matmul in the
task's dtype) and cached per device name in the cache directory. With `EvalConfig.calibration =
"stored"` (the default) a device named in `device_calibrations.json` takes its numbers from there,
with their provenance, so every process and host of that device computes the same t_min (a fresh
calibration moved ReLU's t_min between 3.05 and 3.51 ms on H200 hosts, and every reward with it);
what the file leaves out (null) is measured and cached as before. A kernel time below
`impossible_factor * bytes_min / datasheet_bandwidth` cannot be real (the datasheet is the
hardware's own ceiling), so such a verdict gets `impossible_time` and reward 0.

This module does not time kernels; it only turns byte and flop counts into times.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch

from kernelflow.eval.clock.timing import cache_dir, device_lock, measure_copy_bandwidth, measure_matmul_rate
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
    source: str = "measured"  # "measured" on this host, or "stored: <provenance>" (device_calibrations.json)

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


STORED_CALIBRATIONS = Path(__file__).with_name("device_calibrations.json")


def stored_calibration(device_name: str, path: Path = STORED_CALIBRATIONS) -> dict | None:
    """The reference calibration of exactly this device name, or None (see the module docstring)."""
    entries = json.loads(path.read_text())
    entry = entries.get(device_name)
    return dict(entry) if isinstance(entry, dict) else None


def with_stored(measured: Calibration, entry: dict) -> Calibration:
    """`measured` with the stored entry's numbers where it has them, and the entry's provenance."""
    return Calibration(
        device_name=measured.device_name,
        copy_bandwidth=float(entry.get("copy_bandwidth") or measured.copy_bandwidth),
        flop_rate_fp32=float(entry.get("flop_rate_fp32") or measured.flop_rate_fp32),
        datasheet_bandwidth=measured.datasheet_bandwidth,
        measured_at=str(entry.get("measured_at", measured.measured_at)),
        torch_version=str(entry.get("torch_version", measured.torch_version)),
        source="stored: " + str(entry.get("provenance", "device_calibrations.json")),
    )


def calibrate(device: torch.device, configured_dir: str | None = None, refresh: bool = False,
              source: str = "stored") -> Calibration:
    """The device's calibration: this host's measurement (once, cached by device name), with the stored
    reference numbers of the device laid over it when `source` is "stored" and the device has some."""
    measured = measure_calibration(device, configured_dir, refresh)
    entry = stored_calibration(measured.device_name) if source == "stored" else None
    return with_stored(measured, entry) if entry else measured


def measure_calibration(device: torch.device, configured_dir: str | None = None, refresh: bool = False) -> Calibration:
    """This host's calibration, measured once (under the device lock) and cached by device name."""
    name = torch.cuda.get_device_name(device)
    path = cache_dir(configured_dir) / f"calibration-{name.replace(' ', '_').replace('/', '_')}.json"
    if path.exists() and not refresh:
        data = json.loads(path.read_text())
        if data.get("torch_version") == torch.__version__:
            data.pop("source", None)
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
