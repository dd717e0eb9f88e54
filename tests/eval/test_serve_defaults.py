"""Issue #19: `prewarm_workers="auto"` and the one home of the served speed defaults.

`auto_prewarm_workers` sizes the pool from given cores and memory (POOL_PER_VERDICT per concurrent verdict); the
Evaluator resolves "auto" at start and reports both the setting and the size; the environment server
(its default config and a partial JSON config) takes `EvalConfig.served()` (SERVE_DEFAULTS over the
field defaults), `kernelflow eval` (one submission per process) `EvalConfig.one_shot()`, and a plain
`EvalConfig()` keeps no pool (tests and one-off evaluators stay cheap). None of this is in
`config_hash`. No worker is spawned here: resolution is forced to 0 where an Evaluator is built. The
Hydra side is in tests/flows/test_configs.py, the live server in tests/env/test_server.py.
"""

from __future__ import annotations

import argparse

import pytest

pytest.importorskip("fastapi", reason="needs kernelflow[env] (a GPU host with the eval bundle only lacks it)")

from kernelflow.env.config import EnvServerConfig
from kernelflow.env.server.app import load_server_config
from kernelflow.eval import EVALUATOR_VERSION, EvalConfig
from kernelflow.eval.config import (
    AUTO,
    ONE_SHOT_DEFAULTS,
    POOL_MEMORY_SHARE,
    SERVE_DEFAULTS,
    WORKER_CUDA_CONTEXT_MB,
    WORKER_HOST_MB,
    auto_prewarm_workers,
    config_hash,
)
from kernelflow.eval.session import prewarm as prewarm_module

PLENTY = 1 << 20  # MB


def test_auto_keeps_several_workers_per_concurrent_verdict_bounded_by_cores():
    # every verdict uses up a worker and a replacement warms slower than a verdict runs: 4 per verdict
    assert auto_prewarm_workers(backend="interpret", max_workers=2, cores=16, host_available_mb=PLENTY) == 8
    assert auto_prewarm_workers(backend="interpret", max_workers=1, cores=16, host_available_mb=PLENTY) == 4
    assert auto_prewarm_workers(backend="interpret", max_workers=8, cores=3, host_available_mb=PLENTY) == 3
    assert auto_prewarm_workers(backend="interpret", max_workers=2, cores=2, host_available_mb=PLENTY) == 2  # this VM
    assert auto_prewarm_workers(backend="interpret", max_workers=1, cores=1, host_available_mb=PLENTY) == 1


def test_auto_is_bounded_by_host_memory():
    # a quarter of the available memory, WORKER_HOST_MB per idle worker
    room_for_three = 3 * WORKER_HOST_MB / POOL_MEMORY_SHARE + 1
    assert auto_prewarm_workers(backend="interpret", max_workers=8, cores=8, host_available_mb=room_for_three) == 3
    assert auto_prewarm_workers(backend="interpret", max_workers=8, cores=8, host_available_mb=WORKER_HOST_MB) == 0


def test_auto_on_cuda_is_bounded_by_free_device_memory():
    per_worker = WORKER_CUDA_CONTEXT_MB + 256
    two = 2 * per_worker / POOL_MEMORY_SHARE + 1
    assert auto_prewarm_workers(backend="cuda", max_workers=8, cores=16, host_available_mb=PLENTY,
                                device_free_mb=two, l2_flush_mb=256) == 2
    # a larger L2-flush buffer per worker: fewer fit
    assert auto_prewarm_workers(backend="cuda", max_workers=8, cores=16, host_available_mb=PLENTY,
                                device_free_mb=two, l2_flush_mb=2048) == 0
    # an H200 host (16 cores, ~140 GB free): four per concurrent verdict
    assert auto_prewarm_workers(backend="cuda", max_workers=2, cores=16, host_available_mb=PLENTY,
                                device_free_mb=140_000) == 8
    with pytest.raises(ValueError, match="device_free_mb"):
        auto_prewarm_workers(backend="cuda", max_workers=2, cores=16, host_available_mb=PLENTY)


@pytest.mark.parametrize("bad", ["many", -1, True, 1.5])
def test_prewarm_setting_is_an_int_or_auto(bad):
    with pytest.raises(ValueError, match="prewarm_workers"):
        EvalConfig(prewarm_workers=bad)
    assert EvalConfig(prewarm_workers=AUTO).prewarm_workers == "auto"


def test_the_library_default_has_no_pool_and_served_configs_take_serve_defaults():
    assert EvalConfig().prewarm_workers == 0  # hundreds of one-off evaluators in tests spawn nothing
    served = EvalConfig.served()
    assert {k: getattr(served, k) for k in SERVE_DEFAULTS} == SERVE_DEFAULTS
    assert SERVE_DEFAULTS["prewarm_workers"] == AUTO
    assert EvalConfig.served(prewarm_workers=0, backend="interpret").prewarm_workers == 0  # explicit wins


def test_speed_settings_do_not_change_the_config_hash():
    hashes = {config_hash(EvalConfig(prewarm_workers=p), EVALUATOR_VERSION) for p in (0, 3, AUTO)}
    assert hashes == {config_hash(EvalConfig.served(), EVALUATOR_VERSION)}


def test_the_server_reads_the_served_defaults(tmp_path):
    assert EnvServerConfig().eval == EvalConfig.served()
    assert load_server_config(None).eval == EvalConfig.served()  # `kernelflow serve` without --config
    partial = tmp_path / "server.json"
    partial.write_text('{"eval": {"backend": "interpret", "shape": "small"}}')
    assert load_server_config(partial).eval == EvalConfig.served(backend="interpret", shape="small")
    explicit = EnvServerConfig.from_dict({"eval": {"prewarm_workers": 0}})
    assert explicit.eval.prewarm_workers == 0
    # what start_local_server writes (to_dict) comes back unchanged
    assert EnvServerConfig.from_dict(EnvServerConfig().to_dict()).eval == EvalConfig.served()


def _no_resources(monkeypatch):
    monkeypatch.setattr(prewarm_module, "host_available_mb", lambda: 0.0)


def test_kernelflow_eval_reads_the_one_shot_defaults(monkeypatch, tmp_path):
    from kernelflow.eval import cli

    seen = {}

    class Capture:
        def __init__(self, config):
            seen["config"] = config
            raise RuntimeError("stop here")  # run_eval reports it as a usage error

    monkeypatch.setattr(cli, "Evaluator", Capture)
    source = tmp_path / "k.py"
    source.write_text("x = 1\n")
    args = argparse.Namespace(task_id="19_ReLU", file=str(source), backend="interpret", shape=None, seeds=None,
                              json=True)
    assert cli.run_eval(args) == 2
    # one submission per process: the one-shot defaults (same home; a pool would only cost there)
    assert seen["config"] == EvalConfig.one_shot(backend="interpret")
    assert {k: getattr(seen["config"], k) for k in ONE_SHOT_DEFAULTS} == ONE_SHOT_DEFAULTS
    assert seen["config"].prewarm_workers == 0
    assert cli.run_eval(argparse.Namespace(**{**vars(args), "prewarm_workers": "auto"})) == 2
    assert seen["config"] == EvalConfig.served(backend="interpret")
    assert cli.run_eval(argparse.Namespace(**{**vars(args), "prewarm_workers": "lots"})) == 2


def test_the_evaluator_resolves_auto_at_start_and_reports_it(monkeypatch):
    from kernelflow.eval import Evaluator

    calls = []

    def fake_auto(**kw):
        calls.append(kw)
        return 0  # no worker is spawned in this test

    monkeypatch.setattr(prewarm_module, "auto_prewarm_workers", fake_auto)
    ev = Evaluator(EvalConfig.served(backend="interpret", max_workers=3))
    try:
        info = ev.info()
        assert info["prewarm_workers"] == 0 and info["prewarm_workers_setting"] == AUTO and ev._pool is None
        assert ev.stats()["judge_warm"] is True  # no pool: nothing is warmed in the background
        assert calls and calls[0]["max_workers"] == 3 and calls[0]["backend"] == "interpret"
        assert calls[0]["cores"] >= 1 and calls[0]["host_available_mb"] > 0 and calls[0]["device_free_mb"] is None
    finally:
        ev.close()
    # an explicit number is taken as it is, never sized
    calls.clear()
    assert prewarm_module.pool_size(EvalConfig(prewarm_workers=3), "interpret", "cpu") == 3 and not calls


def test_pool_size_uses_this_hosts_cores_and_memory(monkeypatch):
    monkeypatch.setattr(prewarm_module, "host_cores", lambda: 1)
    monkeypatch.setattr(prewarm_module, "host_available_mb", lambda: float(PLENTY))
    assert prewarm_module.pool_size(EvalConfig.served(max_workers=4), "interpret", "cpu") == 1
    _no_resources(monkeypatch)
    assert prewarm_module.pool_size(EvalConfig.served(max_workers=4), "interpret", "cpu") == 0


def test_host_resources_are_read():
    assert prewarm_module.host_cores() >= 1
    assert prewarm_module.host_available_mb() > 0


def test_warming_the_judge_always_signals_done(monkeypatch):
    """warm_judge (run in the background by an Evaluator with a pool) never raises and always sets its event,
    so a client waiting for a warm server (evaluator_stats.judge_warm) is never left waiting."""
    import threading

    from kernelflow.eval import evaluator

    done = threading.Event()
    evaluator.warm_judge(done)
    assert done.is_set()

    def broken(_task_id):
        raise RuntimeError("no task table")

    monkeypatch.setattr(evaluator, "get_task", broken)
    done = threading.Event()
    evaluator.warm_judge(done)
    assert done.is_set()
