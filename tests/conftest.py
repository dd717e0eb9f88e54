"""Test-wide settings: the one `gpu` gate, offline hubs, a fixed input salt, and the Triton interpreter on CPU-only hosts.

TRITON_INTERPRET must be set before `@triton.jit` decorates anything, so it is set here, before any
test module imports a kernel. Evaluator workers get it through their own environment instead.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The judge's secret input salt fixed at 0 (the declared seeds exactly): tests compare verdicts of
# different evaluators value for value. tests/eval/test_input_salt.py sets its own.
os.environ.setdefault("KERNELFLOW_INPUT_SALT", "0")

import pytest  # noqa: E402
import torch  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_runtest_logreport(report):
    """With KF_FAILURES_LOG set (the GPU gate), each failure's report is written there as it happens: a run cut by
    its time limit never prints its failures' details, which pytest keeps for the end."""
    path = os.environ.get("KF_FAILURES_LOG")
    if path and report.failed:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"== {report.nodeid} ({report.when})\n{report.longreprtext[-6000:]}\n\n")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `pytest -m gpu` on a GPU host)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory):
    """One directory for the locally built policies of the whole test session.

    Builds are keyed by a hash of their settings and guarded by a file lock (kernelflow/train/tiny.py,
    sft.py), so tests that need the same policy (the smoke flow, the seed comparison, the learnability
    test) build it once instead of once per module.
    """
    return tmp_path_factory.mktemp("model-cache")
