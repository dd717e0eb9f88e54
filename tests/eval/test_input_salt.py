"""The judge's secret input salt (config.input_salt, evaluator.py): inputs a submission cannot predict.

Red team, 2026-12-01 (F6): at import, where no guard runs, a submission rebuilt the judge's call plan
and inputs from the project's own generator and answered every call from a table through a Triton
copy kernel: `ok` with the full reward for no work. Every call's seed now has a secret of the judge
process mixed in. Covered: the salt's source and mixing, and that answer table end to end (with
static checks off, so only the salt stands in its way): ok without the salt, incorrect with it.
"""

import random

import pytest
import torch

from kernelflow.eval import EvalConfig, Evaluator
from kernelflow.eval.config import INPUT_SALT_ENV, input_salt, salted_seed
from kernelflow.tasks import generate_inputs

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


def _distinct_inputs(device: str, salts: list[int], seed: int = 0) -> int:
    """How many different first inputs one declared seed gives under `salts` (a small signed_wide draw)."""
    draws = {generate_inputs([(64,)], salted_seed(seed, s), "signed_wide", device)[0].cpu().numpy().tobytes()
             for s in salts}
    return len(draws)


def _random_salts(n: int) -> list[int]:
    rng = random.Random(32)  # fixed: the test is about the generator, not about this draw
    return [rng.getrandbits(31) | 1 for _ in range(n)]


def test_every_bit_of_the_salt_reaches_the_cpu_generator():
    """Issue #32 item 3: the CPU generator (mt19937) keeps only its seed's low 32 bits, and the salt used to
    be shifted left by 24, so salts that differ only above their 8th bit gave the same inputs there."""
    assert _distinct_inputs("cpu", [1, 1 + (1 << 8), 1 + (1 << 20), 1 + (1 << 30)]) == 4
    assert _distinct_inputs("cpu", _random_salts(64)) == 64  # was at most 256 values: 64 salts collided


@pytest.mark.gpu
def test_every_bit_of_the_salt_reaches_the_cuda_generator():
    assert _distinct_inputs("cuda", [1, 1 + (1 << 8), 1 + (1 << 20), 1 + (1 << 30)]) == 4
    assert _distinct_inputs("cuda", _random_salts(64)) == 64


def test_the_same_seed_and_salt_draw_the_same_inputs_and_salted_seeds_fit_int64():
    salt = 0x5A5A_1234
    a = generate_inputs([(64,), (8, 8)], salted_seed(3, salt), "signed_wide", "cpu")
    b = generate_inputs([(64,), (8, 8)], salted_seed(3, salt), "signed_wide", "cpu")
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert all(0 <= salted_seed(seed, s) < 2**62 for seed in (0, 1, 2**40, -5) for s in _random_salts(16))


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
