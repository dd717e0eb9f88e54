"""The verdict cache and the input/reference cache (kernelflow/eval/cache.py).

Unit tests of the two caches (bounds, what is never stored, single flight, thread safety), the
evaluator's use of them (an identical resubmission is answered without a worker; any change of what
a verdict depends on is judged again), and the cached path through a live environment server.
Behaviour only: latency is measured by benchmarks/eval_throughput.py, not asserted here.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
import torch

import kernelflow.eval.evaluator as evaluator_module
from kernelflow.eval import EVALUATOR_VERSION, EvalConfig, Evaluator, Status, Verdict, config_hash
from kernelflow.eval.cache import Reference, ReferenceCache, VerdictCache, verdict_key
from kernelflow.eval.session import SessionOutcome
from kernelflow.eval.verdict import Check
from tests.helpers.solutions import solution_source

CONFIG = EvalConfig(backend="interpret", shape="small", seeds=1, timed_runs=1, timeout_s=120, max_workers=2)
RELU = solution_source("19_ReLU")
WRONG = RELU.replace("tl.maximum(x.to(tl.float32), 0.0)", "tl.minimum(x.to(tl.float32), 0.0)")


def _verdict(status: str = "ok", code: str = "a") -> Verdict:
    ok = status == Status.OK.value
    return Verdict(task_id="19_ReLU", status=status, correct=ok, reward=0.3 if ok else 0.0, feedback="f",
                   code_sha256=code, evaluator_version="v", backend="interpret", device="cpu", shape="small",
                   seeds=[0], cached=False)


KEY_FIELDS = dict(code_sha256="c" * 64, task_id="19_ReLU", shape="small", seeds=[0, 1], distribution="signed_wide",
                  tolerance_mode="task", config_hash="h" * 64, backend="interpret", device="cpu")


# ---- VerdictCache --------------------------------------------------------------------------------


def test_every_field_of_the_key_matters():
    base = verdict_key(**KEY_FIELDS)
    changed = {"code_sha256": "d" * 64, "task_id": "20_LeakyReLU", "shape": "full", "seeds": [1, 2],
               "distribution": "kernelbench", "tolerance_mode": "kernelbench", "config_hash": "g" * 64,
               "backend": "cuda", "device": "NVIDIA H200"}
    for name, value in changed.items():
        assert verdict_key(**{**KEY_FIELDS, name: value}) != base, name
    assert verdict_key(**KEY_FIELDS) == base


def test_lru_is_bounded_and_refreshed_by_hits():
    cache = VerdictCache(2)
    cache.put(("a",), _verdict(code="a"))
    cache.put(("b",), _verdict(code="b"))
    assert cache.get(("a",)) is not None  # a is now the most recent
    cache.put(("c",), _verdict(code="c"))
    assert cache.get(("b",)) is None and cache.get(("a",)) is not None and cache.get(("c",)) is not None
    assert cache.stats().size == 2


@pytest.mark.parametrize("status", ["evaluator_error", "timeout"])
def test_transient_statuses_are_never_stored(status):
    cache = VerdictCache(8)
    assert not cache.put(("k",), _verdict(status))
    calls = []
    for _ in range(2):
        v = cache.get_or_judge(("k",), lambda: calls.append(1) or _verdict(status))
        assert v.cached is False
    assert len(calls) == 2 and cache.stats().skipped == 3


@pytest.mark.parametrize("status", ["ok", "incorrect", "compile_error", "static_rejected", "crashed"])
def test_a_hit_is_marked_cached_with_its_own_wall_time(status):
    cache = VerdictCache(8)
    first = cache.get_or_judge(("k",), lambda: _verdict(status))
    assert first.cached is False
    again = cache.get_or_judge(("k",), lambda: pytest.fail("judged twice"))
    assert again.cached is True and again.status == status and again.reward == first.reward
    assert again.wall_time.total_s is not None and again.wall_time.worker_start_s is None


def test_capacity_zero_disables_the_cache():
    cache = VerdictCache(0)
    calls = []
    for _ in range(3):
        assert cache.get_or_judge(("k",), lambda: calls.append(1) or _verdict()).cached is False
    assert len(calls) == 3 and cache.stats().size == 0
    with pytest.raises(ValueError):
        VerdictCache(-1)


def test_identical_submissions_in_flight_are_judged_once():
    cache = VerdictCache(8)
    calls = []
    gate = threading.Event()

    def judge():
        calls.append(1)
        gate.wait(30)
        return _verdict()

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get_or_judge(("k",), judge))) for _ in range(6)]
    for t in threads:
        t.start()
    # Open the gate only once the five others are waiting (a fixed sleep let a slow thread arrive after
    # the verdict was stored on a loaded machine: a hit, not a wait).
    deadline = time.monotonic() + 20
    while cache.stats().waits < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    gate.set()
    for t in threads:
        t.join(10)
    assert len(calls) == 1 and len(results) == 6
    assert sorted(v.cached for v in results) == [False] + [True] * 5
    assert cache.stats().waits >= 5


def test_a_failed_judge_releases_the_key_for_the_next_caller():
    cache = VerdictCache(8)

    def boom():
        raise RuntimeError("evaluator bug")

    with pytest.raises(RuntimeError):
        cache.get_or_judge(("k",), boom)
    assert cache.get_or_judge(("k",), _verdict).cached is False


def test_concurrent_use_of_many_keys_stays_within_capacity():
    cache = VerdictCache(16)

    def hammer(seed: int):
        for i in range(200):
            cache.get_or_judge((seed, i % 40), _verdict)

    threads = [threading.Thread(target=hammer, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    stats = cache.stats()
    assert stats.size == 16 and stats.hits + stats.misses + stats.waits >= 800


# ---- ReferenceCache ------------------------------------------------------------------------------


def _ref(n: int) -> Reference:
    return Reference((torch.zeros(n, dtype=torch.float32),), torch.zeros(n, dtype=torch.float64))  # 12 n bytes


def test_reference_cache_is_bounded_by_bytes_and_never_holds_an_entry_larger_than_the_budget():
    cache = ReferenceCache(1200)
    assert not cache.put(("huge",), _ref(101)) and len(cache) == 0  # 1212 bytes > budget
    for i in range(4):
        assert cache.put((i,), _ref(25))  # 300 bytes each
    assert cache.nbytes == 1200 and len(cache) == 4
    cache.get((0,))
    cache.put((4,), _ref(25))
    assert cache.get((1,)) is None and cache.get((0,)) is not None and cache.nbytes == 1200
    assert not ReferenceCache(0).fits(1)


# ---- the evaluator -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def evaluator():
    ev = Evaluator(CONFIG)
    yield ev
    ev.close()


def test_identical_resubmission_is_answered_from_the_cache_without_a_worker(evaluator):
    first = evaluator.evaluate("19_ReLU", RELU, seed=7)
    sessions = evaluator.stats()["sessions"]
    again = evaluator.evaluate("19_ReLU", f"Same kernel, new words:\n```python\n{RELU}```", seed=7)
    assert first.cached is False and again.cached is True
    assert (again.status, again.reward, again.feedback, again.checks, again.code_sha256) == (
        first.status, first.reward, first.feedback, first.checks, first.code_sha256)
    assert again.wall_time.worker_start_s is None and again.wall_time.total_s < first.wall_time.total_s
    assert evaluator.stats()["sessions"] == sessions, "a cached verdict must not start a worker"


def test_a_different_seed_shape_or_config_is_judged_again(evaluator):
    evaluator.evaluate("19_ReLU", RELU, seed=11)
    sessions = evaluator.stats()["sessions"]
    assert evaluator.evaluate("19_ReLU", RELU, seed=12).cached is False
    assert evaluator.stats()["sessions"] == sessions + 1
    other = Evaluator(replace(CONFIG, tolerance_mode="kernelbench"))  # another config hash: another cache
    assert config_hash(other.config, EVALUATOR_VERSION) != config_hash(CONFIG, EVALUATOR_VERSION)
    assert other.evaluate("19_ReLU", RELU, seed=11).cached is False


def test_the_reference_cache_does_not_change_verdicts(evaluator):
    plain = Evaluator(replace(CONFIG, input_cache_mb=0, verdict_cache_size=0))
    assert plain.stats()["reference_cache"] is None
    for code in (RELU, WRONG):
        a = evaluator.evaluate("19_ReLU", code, seed=21)
        b = plain.evaluate("19_ReLU", code, seed=21)
        assert (a.status, a.max_abs_err, a.max_rel_violation) == (b.status, b.max_abs_err, b.max_rel_violation)
    # the wrong kernel ran after the honest one on the same seeds: its inputs and references were hits
    assert evaluator.stats()["reference_cache"]["hits"] > 0


class _FakeSession:
    """Stands in for JudgeSession: returns a fixed outcome and counts runs."""

    runs = 0
    status = Status.TIMEOUT.value

    def __init__(self, *args, **kwargs):
        self.prewarmed = False

    def run(self) -> SessionOutcome:
        type(self).runs += 1
        return SessionOutcome(self.status, {"finished_in_time": Check(False, "x")}, "x")


@pytest.mark.parametrize("status", ["timeout", "crashed"])
def test_timeouts_are_judged_again_but_crashes_are_cached(monkeypatch, status):
    monkeypatch.setattr(evaluator_module, "JudgeSession", _FakeSession)
    monkeypatch.setattr(_FakeSession, "runs", 0)
    monkeypatch.setattr(_FakeSession, "status", status)
    ev = Evaluator(CONFIG)
    verdicts = [ev.evaluate("19_ReLU", RELU) for _ in range(2)]
    assert [v.status for v in verdicts] == [status, status]
    assert _FakeSession.runs == (2 if status == "timeout" else 1)
    assert verdicts[1].cached is (status != "timeout")


def test_an_evaluator_fault_is_not_cached(monkeypatch):
    class Broken(_FakeSession):
        def run(self):
            type(self).runs += 1
            raise RuntimeError("the evaluator broke")

    monkeypatch.setattr(evaluator_module, "JudgeSession", Broken)
    monkeypatch.setattr(Broken, "runs", 0)
    ev = Evaluator(CONFIG)
    assert [ev.evaluate("19_ReLU", RELU).status for _ in range(2)] == ["evaluator_error"] * 2
    assert Broken.runs == 2


def test_the_cache_settings_do_not_change_the_config_hash():
    a = config_hash(CONFIG, EVALUATOR_VERSION)
    b = config_hash(replace(CONFIG, verdict_cache_size=0, input_cache_mb=0, prewarm_workers=3), EVALUATOR_VERSION)
    assert a == b
    with pytest.raises(ValueError, match="verdict_cache_size"):
        EvalConfig(verdict_cache_size=-1)


# ---- through a live environment server ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_identical_resubmission_through_a_live_server_is_cached(tmp_path):
    from kernelflow.env.client import KernelEnvSession
    from kernelflow.env.config import EnvServerConfig
    from kernelflow.env.server.launch import start_local_server
    from tests.env.kernels import HONEST_RELU
    from tests.env.procs import descendants

    server = start_local_server(EnvServerConfig(eval=CONFIG, max_sessions=2), log_path=tmp_path / "server.log",
                                startup_timeout_s=120)
    try:
        with KernelEnvSession(server.url) as session:
            session.reset("19_ReLU", seed=5)
            first = session.step(HONEST_RELU)
            assert first.status == "ok" and first.verdict["cached"] is False
            assert descendants(server.pid) == [], "the worker of the first verdict must be gone"
            again = session.step(HONEST_RELU)  # same episode, same seed: identical submission
        assert again.verdict["cached"] is True
        assert (again.status, again.reward, again.feedback) == (first.status, first.reward, first.feedback)
        wall = again.verdict["wall_time"]
        assert wall["worker_start_s"] is None and wall["compile_s"] is None  # no worker was started
    finally:
        server.stop()
