"""The adversarial corpus: every hack or fault in tests/fixtures/adversarial gets the status it declares.

Each fixture file starts with header comments read here:

    # task: 19_ReLU
    # expect: interpret=incorrect cuda=incorrect     (only the backends it applies to)
    # static_checks: on                             (off: judge with EvalConfig(static_checks=False))

After every fixture that reached a worker the same evaluator judges the honest ReLU control, which must
be `ok`: a fault in one submission must not leak into the next (a static refusal runs nothing, so it is
not followed by one). Evaluators are shared per (backend, static checks,
timeout), so their worker pools are exercised across the corpus. A fast test checks the headers and
that the static checks agree with each fixture's declaration without running anything.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import kernelflow
from kernelflow.eval import EvalConfig, Evaluator, Status
from kernelflow.eval.static.checks import first_failure, run_static_checks
from kernelflow.tasks import task_ids
from tests.eval.test_static_checks import HONEST_RELU

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "adversarial"
BACKENDS = ("interpret", "cuda")
HANG_TIMEOUT_S = 30.0
DEFAULT_TIMEOUT_S = 120.0
# On CUDA these run at the full KernelBench shape too: their hack is about the real sizes.
FULL_SHAPE_ON_CUDA = frozenset({"trivial_zeros_softmax", "shape_specialised_softmax"})


@dataclass(frozen=True)
class Fixture:
    name: str
    task_id: str
    expect: dict[str, str]
    static_checks: bool
    source: str


def _header(source: str, key: str, path: Path) -> str:
    m = re.search(rf"^# {key}: *(.+?) *$", source, re.M)
    if m is None:
        raise ValueError(f"{path.name}: missing '# {key}: ...' header line")
    return m.group(1)


def load_fixture(path: Path) -> Fixture:
    source = path.read_text()
    expect = dict(item.split("=", 1) for item in _header(source, "expect", path).split())
    static = _header(source, "static_checks", path).split()[0]
    if static not in ("on", "off"):
        raise ValueError(f"{path.name}: static_checks must be 'on' or 'off', got {static!r}")
    return Fixture(path.stem, _header(source, "task", path), expect, static == "on", source)


FIXTURES = [load_fixture(p) for p in sorted(CORPUS.glob("*.py"))]


def _cases(backend: str):
    # the full-shape CUDA cases share the gate's second device-memory group (tests/eval/test_gpu_evaluator.py)
    def marks(f):
        return [pytest.mark.xdist_group("full_b")] if backend == "cuda" and f.name in FULL_SHAPE_ON_CUDA else []
    return [pytest.param(f, id=f.name, marks=marks(f)) for f in FIXTURES if backend in f.expect]


def test_corpus_headers_are_well_formed():
    assert len(FIXTURES) >= 40
    statuses = {s.value for s in Status} - {Status.OK.value}
    for f in FIXTURES:
        assert f.task_id in task_ids(), f"{f.name}: unknown task {f.task_id}"
        assert f.expect and set(f.expect) <= set(BACKENDS), f"{f.name}: expect keys {sorted(f.expect)}"
        assert set(f.expect.values()) <= statuses, f"{f.name}: expect {f.expect}"
        doc = f.source.split('"""')
        assert len(doc) >= 3 and "Methodology" in doc[1], f"{f.name}: needs a docstring with its methodology"


def test_readme_lists_every_fixture():
    readme = (CORPUS / "README.md").read_text()
    for f in FIXTURES:
        assert f"`{f.name}.py`" in readme, f"README.md does not list {f.name}.py"


@pytest.mark.parametrize("fixture", [pytest.param(f, id=f.name) for f in FIXTURES])
def test_static_checks_agree_with_the_declaration(fixture):
    """static_rejected fixtures fail a static check; every other 'on' fixture must get past them."""
    failure = first_failure(run_static_checks(fixture.source))
    if "static_rejected" in fixture.expect.values():
        assert fixture.static_checks, f"{fixture.name}: static_rejected needs static_checks: on"
        assert failure is not None, f"{fixture.name}: passed every static check"
    elif fixture.static_checks:
        assert failure is None, f"{fixture.name}: unexpectedly rejected by {failure}"


_JUDGE_PATHS = (str(Path(kernelflow.__file__).resolve().parent), sys.prefix, "/kf-worker-", "/kf-judge-")


def assert_deliverable(verdict) -> None:
    """Issue #32 item 4: every text of the verdict is valid UTF-8, bounded, free of control characters
    (newline and tab aside) and quotes none of the judge's paths."""
    texts = [verdict.feedback] + [c.why for c in verdict.checks.values() if c.why]
    for text in texts:
        text.encode("utf-8")  # raises on a lone surrogate
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text), repr(text[:300])
        assert not any(p in text for p in _JUDGE_PATHS), text[:600]
    assert len(verdict.feedback) <= 2000


_EVALUATORS: dict[tuple, Evaluator] = {}


def _evaluator(backend: str, static_checks: bool, timeout_s: float) -> Evaluator:
    key = (backend, static_checks, timeout_s)
    if key not in _EVALUATORS:
        config = EvalConfig(backend=backend, shape="small", seeds=2, timed_runs=2, static_checks=static_checks,
                            timeout_s=timeout_s, max_workers=2,
                            # no verdict cache: the honest control after each fixture must really be judged
                            verdict_cache_size=0)
        _EVALUATORS[key] = Evaluator(config)
    return _EVALUATORS[key]


def _judge_and_recover(fixture: Fixture, backend: str, shape: str = "small") -> None:
    timeout = HANG_TIMEOUT_S if fixture.name == "hang_forever" else DEFAULT_TIMEOUT_S
    if shape == "full":
        timeout = max(timeout, 300.0)
    evaluator = _evaluator(backend, fixture.static_checks, timeout)
    verdict = evaluator.evaluate(fixture.task_id, fixture.source, shape=shape)
    expected = fixture.expect[backend]
    assert verdict.status == expected, (
        f"{fixture.name} [{backend}, {shape}]: expected {expected}, got {verdict.status}\n{verdict.feedback}"
    )
    assert verdict.reward == 0 and verdict.correct is False
    assert verdict.feedback
    assert_deliverable(verdict)
    if verdict.status == Status.STATIC_REJECTED:
        return  # refused before any worker existed: nothing of it ran, so there is nothing to recover from
    control = evaluator.evaluate("19_ReLU", HONEST_RELU)
    assert control.status == Status.OK, f"honest control after {fixture.name}: {control.status}\n{control.feedback}"


@pytest.mark.slow
@pytest.mark.parametrize("fixture", _cases("interpret"))
def test_adversarial_interpret(fixture):
    _judge_and_recover(fixture, "interpret")


@pytest.mark.gpu
@pytest.mark.parametrize("fixture", _cases("cuda"))
def test_adversarial_cuda(fixture):
    _judge_and_recover(fixture, "cuda")
    if fixture.name in FULL_SHAPE_ON_CUDA:
        _judge_and_recover(fixture, "cuda", shape="full")
