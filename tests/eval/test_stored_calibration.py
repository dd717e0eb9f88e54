"""The stored reference calibrations (clock/roofline.py, device_calibrations.json): CPU-testable parts.

What the GPU path does with them (calibrate() on a real device) is exercised by the GPU tests; here:
the file's entries are well-formed, a stored entry replaces this host's measured numbers where it has
them and keeps the measured ones where it has null, and EvalConfig refuses an unknown source.
"""

import json

import pytest

from kernelflow.eval import EvalConfig
from kernelflow.eval.clock.roofline import STORED_CALIBRATIONS, Calibration, stored_calibration, with_stored
from kernelflow.tasks import TASKS

MEASURED = Calibration(device_name="NVIDIA H200", copy_bandwidth=3.75e12, flop_rate_fp32=5.1e13,
                       datasheet_bandwidth=4.8e12, measured_at="2026-12-01T12:00:00+00:00", torch_version="x")


def test_every_stored_entry_has_a_bandwidth_below_its_datasheet_and_a_provenance():
    from kernelflow.eval.clock.roofline import datasheet_bandwidth

    entries = {k: v for k, v in json.loads(STORED_CALIBRATIONS.read_text()).items() if not k.startswith("_")}
    assert entries, "no stored calibration"
    for name, entry in entries.items():
        sheet = datasheet_bandwidth(name)
        assert sheet is not None and 0.5 * sheet < entry["copy_bandwidth"] <= sheet, name
        assert entry["provenance"] and entry["measured_at"] and entry["torch_version"], name


def test_a_stored_entry_replaces_the_measured_bandwidth_and_keeps_a_measured_flop_rate():
    cal = with_stored(MEASURED, stored_calibration("NVIDIA H200"))
    assert cal.copy_bandwidth == pytest.approx(4.2232e12)
    assert cal.flop_rate_fp32 == MEASURED.flop_rate_fp32  # null in the file: this host's number
    assert cal.source.startswith("stored: ") and "controls-2026-11-29-run9" in cal.source
    # The reference run's t_min for ReLU at full shape, whatever this host measured.
    assert cal.t_min_ms(TASKS["19_ReLU"], "full") == pytest.approx(3.051, abs=0.001)
    assert MEASURED.t_min_ms(TASKS["19_ReLU"], "full") > 3.4


def test_an_unknown_device_has_no_stored_entry():
    assert stored_calibration("NVIDIA H200 NVL") is None  # exact names only: another part, another bandwidth
    assert stored_calibration("_about") is None


def test_the_config_names_the_calibration_source():
    assert EvalConfig().calibration == "stored"
    with pytest.raises(ValueError, match="calibration='guess'"):
        EvalConfig(calibration="guess")
