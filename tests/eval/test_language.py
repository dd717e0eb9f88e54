"""The submission language (kernelflow/eval/static/language.py): honest code passes, everything else names its rule."""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from kernelflow.eval.static.checks import STATIC_CHECKS, first_failure, run_static_checks
from kernelflow.eval.static.language import RULES, check_language
from kernelflow.tasks import TASKS
from tests.eval.test_adversarial import FIXTURES
from tests.eval.test_static_checks import HONEST_RELU, variant

ROOT = Path(__file__).resolve().parents[2]


def _benchmark():
    spec = importlib.util.spec_from_file_location("language_false_refusals", ROOT / "benchmarks/language_false_refusals.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lang(source: str, allowed_ops: tuple[str, ...] = ()):
    return check_language(ast.parse(source), source, allowed_ops)


def test_no_false_refusals_on_the_honest_controls_and_the_sft_corpus():
    bench = _benchmark()
    controls, corpus = bench.honest_controls(), bench.sft_corpus()
    assert len(controls) >= 35 and len(corpus) >= 100  # the sources were found, not silently empty
    assert bench.refusals(controls + corpus) == []


def test_the_language_runs_first_after_the_size_and_encoding_bounds():
    assert [name for name, _ in STATIC_CHECKS][:3] == ["bounded_source", "source_encoding", "submission_language"]


# (id, source, the rule the language must name)
REFUSED = [
    ("tensor_method", variant(tail="return x.relu()\n"), "host-calls"),
    ("torch_op", variant(tail="return torch.relu(x)\n"), "host-calls"),
    ("import_functools", variant(header="import functools\n"), "imports"),
    ("from_operator", variant(header="from operator import attrgetter\n"), "imports"),
    ("star_import", variant(header="from torch import *\n"), "imports"),
    ("relative_import", variant(header="from . import helpers\n"), "imports"),
    ("getattr", variant(tail="return getattr(x, 'relu')()\n"), "host-names"),
    ("setattr", variant(tail="setattr(x, 'y', 1)\nreturn out\n"), "host-names"),
    ("vars", variant(tail="v = vars(torch)\nreturn out\n"), "host-names"),
    ("globals", variant(tail="g = globals()\nreturn out\n"), "host-names"),
    ("match", variant(tail="match x:\n    case _:\n        pass\nreturn out\n"), "host-statements"),
    ("with", variant(tail="with torch.no_grad():\n    pass\nreturn out\n"), "host-statements"),
    ("try", variant(tail="try:\n    pass\nfinally:\n    pass\nreturn out\n"), "host-statements"),
    ("while", variant(tail="while n:\n    n = 0\nreturn out\n"), "host-statements"),
    ("global", variant(tail="global BLOCK\nreturn out\n"), "host-statements"),
    ("del", variant(tail="del n\nreturn out\n"), "host-statements"),
    ("yield", variant(tail="yield out\n"), "host-statements"),
    ("nested_def", variant(tail="def f():\n    return 1\nreturn out\n"), "host-statements"),
    ("walrus", variant(tail="m = (k := 2)\nreturn out\n"), "host-statements"),
    ("other_class", variant(module="\n\nclass Helper:\n    pass\n"), "model-class"),
    ("metaclass", HONEST_RELU.replace("class ModelNew(nn.Module):", "class ModelNew(nn.Module, metaclass=type):"),
     "model-class"),
    ("dunder_attr", variant(tail="c = x.__class__\nreturn out\n"), "dunders"),
    ("dunder_name", variant(tail="b = __builtins__\nreturn out\n"), "dunders"),
    ("decorated_helper", variant(module="\n\n@staticmethod\ndef helper(n):\n    return n\n"), "decorators"),
    ("decorated_method", HONEST_RELU.replace("    def forward", "    @torch.no_grad()\n    def forward"),
     "decorators"),
    ("main_guard", variant(module="\n\nif __name__ == '__main__':\n    pass\n"), "module-statements"),
    ("module_call", variant(module="\n\ntorch.manual_seed(0)\n"), "module-statements"),
    ("module_tensor", variant(header="_BUF = torch.empty(4)\n"), "module-constants"),
    ("kernel_called_directly", variant(tail="relu_kernel(x, out, n, 1024)\nreturn out\n"), "kernel-use"),
    ("kernel_fn", variant(tail="f = relu_kernel.fn\nreturn out\n"), "kernel-use"),
    ("kernel_alias", variant(tail="k = relu_kernel\nreturn out\n"), "kernel-use"),
    ("jit_as_call", variant(module="\n\nH = triton.jit(lambda t: t)\n"), "kernel-use"),
    ("tensor_arithmetic", variant(tail="return x * (x > 0)\n"), "tensor-values"),
    ("tensor_builtin", variant(tail="return abs(x)\n"), "tensor-values"),
    ("tensor_truth_test", variant(tail="if x.sum():\n    pass\nreturn out\n"), "host-calls"),
    ("tensor_truth_test_plain", variant(tail="if x:\n    pass\nreturn out\n"), "tensor-values"),
    ("tensor_scalar_read", variant(tail="v = float(x[0])\nreturn out\n"), "tensor-values"),
    ("tensor_index_gather", variant(tail="i = torch.empty(3)\nreturn x[i]\n"), "tensor-values"),
    ("tensor_in_fstring", variant(tail="s = f'{x}'\nreturn out\n"), "tensor-values"),
    ("tensor_through_helper", variant(tail="return _twice(x)\n", module="\n\ndef _twice(t):\n    return t + t\n"),
     "tensor-values"),
    ("tensor_into_allocation", variant(tail="return torch.zeros(x)\n"), "tensor-values"),
    ("loop_over_tensor", variant(tail="for row in x:\n    pass\nreturn out\n"), "loops"),
    ("item_store", variant(tail="out[0] = 1.0\nreturn out\n"), "assign-targets"),
    ("state_in_forward", variant(tail="self.calls = 1\nreturn out\n"), "state"),
    ("augmented_state", variant(init="self.calls = 0\n", tail="self.calls += 1\nreturn out\n"), "state"),
    ("string_subscript", variant(init="self.cache = {}\n", tail="c = self.cache['k']\nreturn out\n"),
     "string-subscripts"),
    ("cast_in_host", variant(tail="return x.to(torch.float64)\n"), "host-calls"),
    ("clone_in_host", variant(tail="return x.clone()\n"), "host-calls"),
    ("fill_in_host", variant(tail="return torch.full_like(x, 0.0)\n"), "host-calls"),
    ("print", variant(tail="print(n)\nreturn out\n"), "host-names"),
    ("raise_system_exit", variant(tail="raise SystemExit(0)\n"), "host-statements"),
    ("rebind_torch", variant(tail="torch = 1\nreturn out\n"), "host-names"),
    ("device_type_probe", variant(tail="t = x.device.type\nreturn out\n"), "host-attributes"),
    ("autotune_hook", HONEST_RELU.replace(
        "@triton.jit", "@triton.autotune(configs=[triton.Config({}, pre_hook=lambda args: args['x_ptr'].relu_())],"
        " key=['n'])\n@triton.jit"), "host-calls"),
    ("heuristics_lambda", HONEST_RELU.replace(
        "@triton.jit", "@triton.heuristics({'B': lambda args: torch.relu(args['x_ptr'])})\n@triton.jit"),
     "host-calls"),
    ("default_argument", HONEST_RELU.replace("def forward(self, x: torch.Tensor)", "def forward(self, x, f=torch.relu)"),
     "host-attributes"),
    ("default_lambda", HONEST_RELU.replace("def forward(self, x: torch.Tensor)", "def forward(self, x, f=lambda v: v)"),
     "defaults"),
    ("heuristics_passes_tensor", HONEST_RELU.replace(
        "@triton.jit", "@triton.heuristics({'X': lambda args: args['x_ptr']})\n@triton.jit"), "lambdas"),
    ("lambda_as_value", variant(tail="g = (lambda v: v, 1)\nreturn out\n"), "lambdas"),
    ("grid_lambda_as_argument", variant(tail="g = lambda meta: (1,)\nrelu_kernel[g](x, out, n, g, BLOCK=1024)\n"
                                            "return out\n"), "lambdas"),
    ("grid_lambda_compute", variant(tail="relu_kernel[lambda meta: (x.relu(),)](x, out, n, BLOCK=1024)\nreturn out\n"),
     "host-calls"),
]


def test_refusal_ids_are_unique_and_name_known_rules():
    assert len({i for i, _, _ in REFUSED}) == len(REFUSED)
    assert {rule for _, _, rule in REFUSED} <= set(RULES)
    assert {rule for _, _, rule in REFUSED} == set(RULES)  # every rule has a case that exercises it


@pytest.mark.parametrize(("source", "rule"), [pytest.param(s, r, id=i) for i, s, r in REFUSED])
def test_refused_with_its_rule(source, rule):
    check = _lang(source)
    assert not check.passed
    assert f"(rule: {rule})" in check.why, check.why
    assert first_failure(run_static_checks(source))[0] in ("submission_language", "parses")


def test_feedback_names_line_construct_rule_and_where_to_read():
    src = variant(tail="return x.relu()\n")
    line = src.splitlines().index("        return x.relu()") + 1
    why = _lang(src).why
    assert why.startswith(f"line {line}: `x.relu()` is outside the submission language (rule: host-calls)"), why
    assert "docs/submission_language.md" in why


HONEST_FORMS = {
    "autotune_and_grid_lambda": HONEST_RELU.replace(
        "@triton.jit", "@triton.autotune(configs=[triton.Config({'BLOCK': 1024}, num_warps=4)], key=['n'])\n"
        "@triton.heuristics({'EVEN': lambda args: args['n'] % 1024 == 0})\n@triton.jit").replace(
        "BLOCK: tl.constexpr):", "BLOCK: tl.constexpr, EVEN: tl.constexpr):").replace(
        ", BLOCK=4096)", ")").replace("(triton.cdiv(n, 4096),)", "lambda meta: (triton.cdiv(n, meta['BLOCK']),)"),
    "helpers_shapes_and_views": variant(
        header="import math\nfrom triton import cdiv\nSCALE = math.sqrt(2.0 / math.pi)\n",
        init="self.dim = 1\n",
        tail="rows, cols = x.shape[0], x.size(-1)\nv = x.view(-1).reshape(rows, cols) if x.dim() == 2 else x.flatten()\n"
             "assert x.is_contiguous() and x.stride(-1) == 1, f'shape {tuple(x.shape)}'\n"
             "if self.dim not in (1, -1):\n    raise ValueError(f'dim={self.dim}')\n"
             "blocks = [_blocks(n, b) for b in range(1, 3)]\nbuf = torch.zeros((rows, cols), device=x.device, dtype=x.dtype)\n"
             "return out\n",
        module="\n\ndef _blocks(n: int, block: int) -> int:\n    return cdiv(n, block) * max(1, min(block, 4))\n"),
    "helper_receives_tensor_for_metadata_only": variant(
        tail="return _launch(x, out, n)\n", launch=False,
        module="\n\ndef _launch(t, o, n):\n    relu_kernel[(triton.cdiv(t.numel(), 4096),)](t, o, n, BLOCK=4096)\n"
               "    return o\n"),
    "parameters": variant(init="self.weight = nn.Parameter(torch.ones(4))\n"),
}


@pytest.mark.parametrize("name", sorted(HONEST_FORMS))
def test_honest_forms_pass(name):
    check = _lang(HONEST_FORMS[name])
    assert check.passed, check.why
    assert first_failure(run_static_checks(HONEST_FORMS[name])) is None


CONV = variant(header="import torch.nn.functional as F\n", init="self.w = nn.Parameter(torch.empty(4, 4, 3, 3))\n",
               tail="y = F.conv2d(x, self.w)\nreturn out\n")


def test_a_task_allowed_op_is_accepted_only_for_that_task():
    refused = run_static_checks(CONV)
    assert first_failure(refused)[0] == "submission_language"
    assert "F.conv2d(x, self.w)" in refused["submission_language"].why
    allowed = run_static_checks(CONV, ("torch.nn.functional.conv2d",))
    assert first_failure(allowed) is None, first_failure(allowed)
    # another op stays refused even when the task allows one
    other = CONV.replace("F.conv2d(x, self.w)", "F.relu(x)")
    assert first_failure(run_static_checks(other, ("torch.nn.functional.conv2d",)))[0] == "submission_language"


def test_an_allowed_layer_instance_may_be_called():
    src = variant(init="self.conv = nn.Conv2d(4, 4, 3)\n", tail="y = self.conv(x)\nw = self.conv.weight\nreturn out\n")
    assert not _lang(src).passed
    assert first_failure(run_static_checks(src, ("torch.nn.Conv2d",))) is None


def test_task_allowed_ops_default_empty_and_validated():
    task = TASKS["19_ReLU"]
    assert task.allowed_ops == ()
    assert replace(task, allowed_ops=("torch.nn.functional.conv2d",)).allowed_ops == ("torch.nn.functional.conv2d",)
    with pytest.raises(ValueError, match="allowed_ops"):
        replace(task, allowed_ops=("os.system",))


def test_static_off_fixtures_are_refused_when_static_checks_are_on():
    """Fixtures judged with static checks off (to test a runtime defence) are each refused statically."""
    off = [f for f in FIXTURES if not f.static_checks]
    assert len(off) >= 20
    for f in off:
        assert first_failure(run_static_checks(f.source)) is not None, f.name


def test_the_prompt_states_the_language_and_a_tasks_allowed_ops():
    from kernelflow.tasks.prompts import EXAMPLE_SOLUTION, build_prompt_text

    task = TASKS["19_ReLU"]
    assert "allow-listed language" in build_prompt_text(task) and "also allows" not in build_prompt_text(task)
    conv = replace(task, allowed_ops=("torch.nn.functional.conv2d",))
    assert "This task also allows: torch.nn.functional.conv2d." in build_prompt_text(conv)
    assert _lang(EXAMPLE_SOLUTION).passed  # the prompt's own example is in the language
