"""`make_evaluator(kind, config, ray)`: the evaluator's public way to build a judge (the environment server's
only way in), without importing Ray unless asked for the Ray backend."""

import subprocess
import sys

import pytest

pytest.importorskip("openenv", reason="needs kernelflow[env] (a GPU host with the eval bundle only lacks it)")

import kernelflow.eval.cluster.ray_backend as ray_backend
from kernelflow.env.config import EnvServerConfig
from kernelflow.env.server.environment import build_evaluator
from kernelflow.eval import EVAL_BACKENDS, EvalConfig, Evaluator, RayConfig, make_evaluator

CONFIG = EvalConfig(backend="interpret", shape="small", seeds=1, timed_runs=1, max_workers=1, verdict_cache_size=0)


class FakeRayEvaluator:
    def __init__(self, config, ray):
        self.args = (config, ray)


def test_local_builds_this_hosts_evaluator():
    evaluator = make_evaluator("local", CONFIG)
    try:
        assert isinstance(evaluator, Evaluator)
    finally:
        evaluator.close()


def test_ray_builds_the_ray_backend_with_its_config(monkeypatch):
    monkeypatch.setattr(ray_backend, "RayEvaluator", FakeRayEvaluator)
    assert make_evaluator("ray", CONFIG).args == (CONFIG, RayConfig())
    assert make_evaluator("ray", CONFIG, RayConfig(num_actors=3)).args == (CONFIG, RayConfig(num_actors=3))
    # the server picks the backend by its config, through make_evaluator
    server = EnvServerConfig(eval=CONFIG, eval_backend="ray", ray=RayConfig(num_actors=2))
    assert build_evaluator(server).args == (CONFIG, RayConfig(num_actors=2))


def test_an_unknown_kind_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown evaluator kind 'dask'.*\('local', 'ray'\)"):
        make_evaluator("dask", CONFIG)
    assert EVAL_BACKENDS == ("local", "ray")


def test_the_public_api_does_not_import_ray():
    code = "import sys, kernelflow.eval, kernelflow.env.config; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
