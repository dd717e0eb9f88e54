"""The verdict cache and the input/reference cache (kernelflow/eval/cache.py).

Unit tests of the two caches (bounds, what is never stored, single flight, thread safety, no cached
lucky ok: an ok is served only after two agreeing fresh judgements), the evaluator's use of them (an
identical resubmission is answered without a worker once confirmed; any change of what a verdict
depends on is judged again), and the cached path through a live environment server.
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
from kernelflow.eval.cache import (
    REPRODUCIBLE_CHECK,
    REWARD_BAND,
    Reference,
    ReferenceCache,
    VerdictCache,
    verdict_key,
    verdicts_agree,
)
from kernelflow.eval.session import SessionOutcome
from kernelflow.eval.verdict import Check
from tests.helpers.solutions import solution_source

CONFIG = EvalConfig(backend="interpret", shape="small", seeds=1, timed_runs=1, timeout_s=120, max_workers=2)
RELU = solution_source("19_ReLU")
WRONG = RELU.replace("tl.maximum(x.to(tl.float32), 0.0)", "tl.minimum(x.to(tl.float32), 0.0)")


def _verdict(status: str = "ok", code: str = "a", reward: float = 0.3) -> Verdict:
    ok = status == Status.OK.value
    return Verdict(task_id="19_ReLU", status=status, correct=ok, reward=reward if ok else 0.0, feedback="f",
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
    cache = VerdictCache(2)  # incorrect verdicts: stored at once (an ok needs two judgements)
    cache.put(("a",), _verdict("incorrect", code="a"))
    cache.put(("b",), _verdict("incorrect", code="b"))
    assert cache.get(("a",)) is not None  # a is now the most recent
    cache.put(("c",), _verdict("incorrect", code="c"))
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
    if status == "ok":  # an ok is served only after a second fresh judgement agreed
        assert cache.get_or_judge(("k",), lambda: _verdict(status)).cached is False
    again = cache.get_or_judge(("k",), lambda: pytest.fail("judged again"))
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


@pytest.mark.parametrize("status", ["incorrect", "ok"])
def test_identical_submissions_in_flight_are_judged_once(status):
    """A burst of identical submissions: one judgement if it is not ok, two (first, then a confirmation) if ok."""
    cache = VerdictCache(8)
    calls = []
    gate = threading.Event()

    def judge():
        calls.append(1)
        gate.wait(30)
        return _verdict(status)

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
    fresh = 2 if status == "ok" else 1
    assert len(calls) == fresh and len(results) == 6
    assert sorted(v.cached for v in results) == [False] * fresh + [True] * (6 - fresh)
    assert cache.stats().waits >= 5


def test_a_failed_judge_releases_the_key_for_the_next_caller():
    cache = VerdictCache(8)

    def boom():
        raise RuntimeError("evaluator bug")

    with pytest.raises(RuntimeError):
        cache.get_or_judge(("k",), boom)
    assert cache.get_or_judge(("k",), _verdict).cached is False


# ---- no cached lucky verdict -------------------------------------------------------------------------


def _scripted(*verdicts: Verdict):
    """A fake judge returning `verdicts` in order (a code whose config is drawn per process); counts calls."""
    queue = list(verdicts)
    calls = []

    def judge() -> Verdict:
        calls.append(1)
        return queue.pop(0)

    return judge, calls


def test_a_lucky_ok_is_never_served_from_the_cache():
    """ok, then incorrect for the same code: the second call is judged fresh, the third is not served the ok."""
    cache = VerdictCache(8)
    judge, calls = _scripted(_verdict("ok"), _verdict("incorrect"))
    first = cache.get_or_judge(("k",), judge)
    assert first.status == "ok" and first.cached is False
    assert cache.get(("k",)) is None, "one ok must not be served"
    second = cache.get_or_judge(("k",), judge)
    assert len(calls) == 2 and second.cached is False and second.status == "incorrect"
    assert second.checks[REPRODUCIBLE_CHECK].passed is False and "judged ok" in second.feedback
    third = cache.get_or_judge(("k",), lambda: pytest.fail("judged a third time"))
    assert third.cached is True and third.status == "incorrect" and third.reward == 0
    assert REPRODUCIBLE_CHECK in third.checks
    stats = cache.stats()
    assert stats.nondeterministic == 1 and stats.pending == 0 and stats.confirmed == 0


def test_an_honest_deterministic_code_is_cached_after_two_judgements():
    cache = VerdictCache(8)
    judge, calls = _scripted(_verdict("ok", reward=2.00), _verdict("ok", reward=2.02))
    assert [cache.get_or_judge(("k",), judge).cached for _ in range(2)] == [False, False]
    assert cache.stats().pending == 0 and cache.stats().confirmed == 1
    for _ in range(3):
        again = cache.get_or_judge(("k",), lambda: pytest.fail("judged a third time"))
        assert again.cached is True and again.reward == 2.02  # the confirming (latest) judgement
        assert REPRODUCIBLE_CHECK not in again.checks
    assert len(calls) == 2


def test_two_oks_outside_the_reward_band_confirm_nothing():
    """A config that is sometimes fast: both ok, rewards 20% apart, so the next one is judged again."""
    cache = VerdictCache(8)
    judge, calls = _scripted(_verdict("ok", reward=2.5), _verdict("ok", reward=2.0), _verdict("ok", reward=2.01))
    for _ in range(3):
        assert cache.get_or_judge(("k",), judge).cached is False
    assert len(calls) == 3  # the third agreed with the second (0.5%): confirmed now
    served = cache.get_or_judge(("k",), lambda: pytest.fail("judged a fourth time"))
    assert served.cached is True and served.reward == 2.01
    assert cache.stats().nondeterministic == 0


def test_verdicts_agree_on_status_correctness_and_the_reward_band():
    ok = _verdict("ok", reward=2.0)
    assert verdicts_agree(ok, _verdict("ok", reward=2.0 * (1 - REWARD_BAND / 2)))
    assert not verdicts_agree(ok, _verdict("ok", reward=2.0 * (1 - 2 * REWARD_BAND)))
    assert not verdicts_agree(ok, _verdict("incorrect"))
    assert verdicts_agree(_verdict("incorrect"), _verdict("incorrect"))
    assert not verdicts_agree(_verdict("incorrect"), _verdict("crashed"))


def test_a_transient_verdict_between_two_oks_neither_confirms_nor_marks():
    cache = VerdictCache(8)
    judge, calls = _scripted(_verdict("ok"), _verdict("timeout"), _verdict("ok"))
    assert [cache.get_or_judge(("k",), judge).status for _ in range(3)] == ["ok", "timeout", "ok"]
    assert cache.get_or_judge(("k",), lambda: pytest.fail("judged again")).cached is True
    assert len(calls) == 3 and cache.stats().nondeterministic == 0


def test_a_failure_first_is_cached_at_once_even_if_the_code_is_sometimes_right():
    """Not-ok verdicts cannot forge a reward: stored after one judgement, never re-judged into an ok."""
    cache = VerdictCache(8)
    judge, calls = _scripted(_verdict("incorrect"), _verdict("ok"))
    assert cache.get_or_judge(("k",), judge).status == "incorrect"
    again = cache.get_or_judge(("k",), judge)
    assert again.cached is True and again.status == "incorrect" and len(calls) == 1


def test_pending_oks_are_bounded_by_the_capacity():
    cache = VerdictCache(2)
    for i in range(5):
        cache.get_or_judge((i,), _verdict)
    assert cache.stats().pending == 2 and cache.stats().size == 0


def test_concurrent_use_of_many_keys_stays_within_capacity():
    cache = VerdictCache(16)

    def hammer(seed: int):
        for i in range(200):  # a third of the keys ok (held pending, 40 keys cycling through 16 slots)
            cache.get_or_judge((seed, i % 40), lambda i=i: _verdict("ok" if i % 3 == 0 else "incorrect"))

    threads = [threading.Thread(target=hammer, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    stats = cache.stats()
    assert stats.size == 16 and stats.pending <= 16 and stats.hits + stats.misses + stats.waits >= 800


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
    confirm = evaluator.evaluate("19_ReLU", RELU, seed=7)  # an ok is cached after a second agreeing judgement
    assert confirm.cached is False and evaluator.stats()["sessions"] == sessions + 1
    sessions += 1
    again = evaluator.evaluate("19_ReLU", f"Same kernel, new words:\n```python\n{RELU}```", seed=7)
    assert first.cached is False and again.cached is True
    assert (again.status, again.reward, again.feedback, again.checks, again.code_sha256) == (
        first.status, first.reward, first.feedback, first.checks, first.code_sha256)
    assert again.wall_time.worker_start_s is None and again.wall_time.total_s < first.wall_time.total_s
    assert evaluator.stats()["sessions"] == sessions, "a cached verdict must not start a worker"


def test_a_different_seed_shape_or_config_is_judged_again(evaluator):
    evaluator.evaluate("19_ReLU", RELU, seed=11)
    evaluator.evaluate("19_ReLU", RELU, seed=11)  # confirmed: served from the cache from now on
    sessions = evaluator.stats()["sessions"]
    assert evaluator.evaluate("19_ReLU", RELU, seed=11).cached is True
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
        self.gpu_stalled = False  # JudgeSession's: its GPU work never finished (gated_clock.GpuStalled)

    def run(self) -> SessionOutcome:
        type(self).runs += 1
        return SessionOutcome(self.status, {"finished_in_time": Check(False, "x")}, "x")


class _FlakySession(_FakeSession):
    """A submission whose config is drawn per process: ok in the first worker, wrong values in the next."""

    outcomes = [Status.OK.value, Status.INCORRECT.value]

    def run(self) -> SessionOutcome:
        status = self.outcomes[type(self).runs % len(self.outcomes)]
        type(self).runs += 1
        if status == Status.OK.value:
            return SessionOutcome(status, {"values": Check(True)}, "")
        return SessionOutcome(status, {"values": Check(False, "seed 1: wrong values")}, "seed 1: wrong values")


def test_the_evaluator_never_serves_a_lucky_ok(monkeypatch):
    """Through Evaluator.evaluate: ok, then incorrect on a fresh judgement; the third answer is the marked failure."""
    monkeypatch.setattr(evaluator_module, "JudgeSession", _FlakySession)
    monkeypatch.setattr(_FlakySession, "runs", 0)
    ev = Evaluator(CONFIG)
    verdicts = [ev.evaluate("19_ReLU", RELU) for _ in range(3)]
    assert [v.status for v in verdicts] == ["ok", "incorrect", "incorrect"]
    assert [v.cached for v in verdicts] == [False, False, True]
    assert _FlakySession.runs == 2
    assert verdicts[2].reward == 0 and verdicts[2].checks[REPRODUCIBLE_CHECK].passed is False
    assert "judged ok" in verdicts[2].feedback
    assert ev.stats()["verdict_cache"]["nondeterministic"] == 1


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

    server = start_local_server(EnvServerConfig(eval=CONFIG, max_sessions=2, max_turns=3), log_path=tmp_path / "server.log",
                                startup_timeout_s=120)
    try:
        with KernelEnvSession(server.url) as session:
            session.reset("19_ReLU", seed=5)
            first = session.step(HONEST_RELU)
            assert first.status == "ok" and first.verdict["cached"] is False
            assert descendants(server.pid) == [], "the worker of the first verdict must be gone"
            confirm = session.step(HONEST_RELU)  # an ok is cached once a second judgement agreed
            assert confirm.status == "ok" and confirm.verdict["cached"] is False
            again = session.step(HONEST_RELU)  # same episode, same seed: identical submission
        assert again.verdict["cached"] is True
        assert (again.status, again.reward, again.feedback) == (first.status, first.reward, first.feedback)
        wall = again.verdict["wall_time"]
        assert wall["worker_start_s"] is None and wall["compile_s"] is None  # no worker was started
    finally:
        server.stop()
