"""The judge's secret input salt (config.input_salt, evaluator.py): inputs a submission cannot predict.

Red team, 2026-12-01 (F6): at import, where no guard runs, a submission rebuilt the judge's call plan
and inputs from the project's own generator and answered every call from a table through a Triton
copy kernel: `ok` with the full reward for no work. Every call's seed now has a secret of the judge
process mixed in. Covered: the salt's source and mixing, and that answer table end to end (with
static checks off, so only the salt stands in its way): ok without the salt, incorrect with it.
"""

import pytest

from kernelflow.eval import EvalConfig, Evaluator
from kernelflow.eval.config import INPUT_SALT_ENV, input_salt, salted_seed

ANSWER_TABLE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

from kernelflow.eval.config import EvalConfig
from kernelflow.eval.session.plan import build_plan
from kernelflow.tasks import TASKS, generate_inputs

_TASK = TASKS["19_ReLU"]
_CONFIG = EvalConfig(backend="interpret")
_PLAN = build_plan(_TASK, _CONFIG, _CONFIG.seed_list(), "interpret")
_ANSWERS = [torch.relu(generate_inputs(c.shapes, c.seed, c.distribution or _TASK.distribution)[0]) for c in _PLAN]


@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    calls = 0

    def forward(self, x):
        answer = _ANSWERS[ModelNew.calls % len(_ANSWERS)]
        ModelNew.calls += 1
        out = torch.empty_like(x)
        n = out.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](answer, out, n, BLOCK=1024)
        return out
'''


def test_salt_zero_keeps_the_declared_seed_and_other_salts_move_it():
    assert salted_seed(5, 0) == 5
    assert len({salted_seed(5, s) for s in (1, 2, 3, 12345)}) == 4
    assert salted_seed(5, 7) != salted_seed(6, 7)


def test_the_salt_is_secret_by_default_and_fixed_only_on_request(monkeypatch):
    monkeypatch.delenv(INPUT_SALT_ENV, raising=False)
    draws = {input_salt() for _ in range(8)}
    assert len(draws) > 1 and all(0 <= d < 2**31 for d in draws)
    monkeypatch.setenv(INPUT_SALT_ENV, "42")
    assert input_salt() == 42
    monkeypatch.setenv(INPUT_SALT_ENV, "forty-two")
    with pytest.raises(ValueError, match="KERNELFLOW_INPUT_SALT='forty-two' is not an integer"):
        input_salt()


@pytest.mark.slow
@pytest.mark.parametrize("salt, status", [("0", "ok"), ("987654", "incorrect")])
def test_an_answer_table_built_from_the_declared_seeds_fails_under_a_salt(monkeypatch, salt, status):
    monkeypatch.setenv(INPUT_SALT_ENV, salt)
    evaluator = Evaluator(EvalConfig(backend="interpret", static_checks=False, verdict_cache_size=0))
    verdict = evaluator.evaluate("19_ReLU", ANSWER_TABLE)
    assert verdict.status == status, verdict.feedback
    if status == "incorrect":  # the feedback names the declared seed; the salted one never leaves the judge
        assert "seed 0" in verdict.feedback and str(salted_seed(0, int(salt))) not in verdict.feedback
