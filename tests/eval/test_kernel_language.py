"""The kernel language (kernelflow/eval/static/kernel_language.py): honest kernel bodies pass, each rule refuses its case."""

from __future__ import annotations

import ast

import pytest

from kernelflow.eval.static.checks import STATIC_CHECKS, first_failure, run_static_checks
from kernelflow.eval.static.kernel_language import RULES, check_kernel_language

TEMPLATE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl

SCALE = 2
NEG = tl.constexpr(-1.5)


@triton.jit
def combine(a, b):
    return a + b


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last")
    y = tl.where(x > 0, x, 0.0).to(out_ptr.dtype.element_ty)
BODY
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
'''


def kernel(body: str = "") -> str:
    return TEMPLATE.replace("BODY\n", "".join(f"    {line}\n" for line in body.splitlines()))


def _check(source: str):
    return check_kernel_language(ast.parse(source), source)


HONEST = {
    "plain": "",
    "reductions_and_loops": "acc = tl.zeros([BLOCK], dtype=tl.float32)\nfor i in range(0, 4):\n    acc += x\n"
                            "for j in tl.static_range(2):\n    acc = acc * SCALE\ns = tl.sum(acc, axis=0)\n"
                            "m = tl.max(x[:, None], axis=1)\nr = tl.reduce(acc, 0, combine)\n"
                            "z = tl.math.exp(acc) - float('-inf')\nc = tl.cumsum(acc, 0)\nq = NEG",
    "atomics_and_asserts": "tl.static_assert(BLOCK >= 16, 'block too small')\nassert BLOCK > 0, 'positive'\n"
                           "tl.atomic_add(out_ptr, tl.sum(x, axis=0))\nif BLOCK > 64:\n    y = y * 2\n"
                           "k = 0\nwhile k < 2:\n    k += 1\nw = tl.dot(x[None, :], x[:, None], input_precision='ieee')",
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_kernels_pass(name):
    check = _check(kernel(HONEST[name]))
    assert check.passed, check.why
    assert run_static_checks(kernel(HONEST[name]))["kernel_language"].passed


# (id, body lines added to an honest kernel, the rule that must be named)
REFUSED = [
    ("injected_np", "np.maximum(x, 0.0)", "kernel-names"),
    ("injected_inspect", "s = inspect.stack()", "kernel-names"),
    ("injected_interpreter_builder", "b = interpreter_builder", "kernel-names"),
    ("host_builtin_min", "m = min(n, BLOCK)", "kernel-names"),
    ("module_torch", "t = torch", "kernel-names"),
    ("torch_member", "t = torch.relu", "kernel-attributes"),
    ("handle_data", "a = x.handle.data", "kernel-attributes"),
    ("dunder", "c = x.__class__", "kernel-attributes"),
    ("tl_extra", "e = tl.extra.cuda.libdevice.exp(x)", "kernel-attributes"),
    ("inline_asm", "e = tl.inline_asm_elementwise('mov', '=r', [x], tl.int32, True, 1)", "kernel-attributes"),
    ("tensor_item", "v = x.item()", "kernel-attributes"),
    ("call_parameter", "y = n(x)", "kernel-calls"),
    ("float_of_block", "v = float(x)", "kernel-calls"),
    ("import", "import os", "kernel-statements"),
    ("item_store", "y[0] = 1.0", "kernel-statements"),
    ("try", "try:\n    pass\nfinally:\n    pass", "kernel-statements"),
    ("lambda", "f = (lambda v: v)", "kernel-expressions"),
    ("comprehension", "f = [v for v in range(2)]", "kernel-expressions"),
    ("index_by_name", "v = x[n]", "kernel-subscripts"),
    ("loop_over_tuple", "for v in (x,):\n    y = v", "kernel-loops"),
    ("string_positional", "y = tl.where(x > 0, 'a', y)", "kernel-strings"),
    ("docstring_multiline", "s = tl.load(x_ptr, eviction_policy='a\\nb')", "kernel-strings"),
    ("def_line_in_string", "note = '''\ndef relu_kernel(x_ptr):\n    return\n'''", "kernel-source"),
]


def test_every_rule_has_a_case():
    assert {rule for _, _, rule in REFUSED} == set(RULES)


@pytest.mark.parametrize(("body", "rule"), [pytest.param(b, r, id=i) for i, b, r in REFUSED])
def test_refused_with_its_rule(body, rule):
    check = _check(kernel(body))
    assert not check.passed
    assert f"(rule: {rule})" in check.why, check.why
    assert "outside the kernel language" in check.why and "docs/submission_language.md" in check.why


def test_runs_right_after_the_submission_language():
    names = [name for name, _ in STATIC_CHECKS]
    assert names.index("kernel_language") == names.index("submission_language") + 1
    assert first_failure(run_static_checks(kernel("np.maximum(x, 0.0)")))[0] == "kernel_language"


def test_def_line_must_be_the_kernels_own_and_use_a_space():
    src = kernel().replace("def relu_kernel(", "def\trelu_kernel(")
    assert "(rule: kernel-source)" in _check(src).why


def test_a_local_shadows_nothing_it_does_not_assign():
    # a local named like an injected global is the kernel's own value, not the interpreter's
    assert _check(kernel("np = x + 1\ny = np")).passed


def test_constants_bound_to_anything_but_literals_are_refused():
    src = kernel("q = SCALE").replace("SCALE = 2\n", "SCALE = 2\nSCALE = torch.float32\n")
    assert "(rule: kernel-names)" in _check(src).why
