"""The client side of kernelflow.env (what the trainer imports) must not load the evaluator, nor
must the env layer reach the trainer or the flows."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # each test starts a Python that imports openenv (seconds)

CHECK = """
import sys
import kernelflow.env, kernelflow.env.client, kernelflow.env.models, kernelflow.env.returns
bad = sorted(m for m in sys.modules if m.startswith(("kernelflow.eval", "kernelflow.env.server", "kernelflow.train",
                                                      "flows", "trl", "peft", "transformers")))
print(",".join(bad))
"""


def test_client_side_loads_no_evaluator_or_server():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "", f"client-side imports pulled in: {out.stdout.strip()}"


def test_server_side_loads_no_trainer():
    code = CHECK.replace("kernelflow.env.returns", "kernelflow.env.returns, kernelflow.env.server.app, "
                         "kernelflow.env.server.launch").replace('"kernelflow.eval", "kernelflow.env.server", ', "")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "", f"server-side imports pulled in: {out.stdout.strip()}"
