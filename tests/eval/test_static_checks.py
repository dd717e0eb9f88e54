"""Static checks: the honest ReLU passes every check, and each hack (with its evasions) fails its check."""

from __future__ import annotations

import ast
import textwrap

import pytest

from kernelflow.eval.static.checks import STATIC_CHECKS, first_failure, run_static_checks

HONEST_RELU = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096)
        return out
'''

LAUNCH = "        relu_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096)\n"


def variant(tail: str = "", header: str = "", init: str = "", module: str = "", launch: bool = True) -> str:
    """The honest ReLU with extra module-level `header` lines (after the imports), extra `init` lines in
    __init__, `tail` lines replacing `return out` in forward, and `module` lines at the end."""
    src = HONEST_RELU
    if header:
        src = src.replace("\n\n@triton.jit", "\n" + textwrap.dedent(header) + "\n\n@triton.jit", 1)
    if init:
        src = src.replace("        super().__init__()\n", "        super().__init__()\n" + textwrap.indent(
            textwrap.dedent(init), " " * 8), 1)
    if tail:
        src = src.replace("        return out\n", textwrap.indent(textwrap.dedent(tail), " " * 8), 1)
    if not launch:
        src = src.replace(LAUNCH, "")
    return src + textwrap.dedent(module)


def _parses_or_none(src: str) -> None:
    ast.parse(src)  # every table entry except the parse failures must be valid Python


def test_honest_relu_passes_every_check():
    checks = run_static_checks(HONEST_RELU)
    assert list(checks) == ["parses", *[name for name, _ in STATIC_CHECKS]]
    assert first_failure(checks) is None, checks


def test_every_check_has_a_rationale_comment():
    import inspect

    for name, fn in STATIC_CHECKS:
        assert fn.__name__ == f"check_{name}"
        assert "# Rationale:" in inspect.getsource(fn), name


HONEST_VARIANTS = {
    "jit_alias_from_import": HONEST_RELU.replace("import triton\n", "import triton\nfrom triton import jit\n")
    .replace("@triton.jit", "@jit"),
    "module_aliases": HONEST_RELU.replace("import triton\n", "import triton as tr\n")
    .replace("import triton.language as tl", "import triton.language as lang").replace("tl.", "lang.")
    .replace("@triton.jit", "@tr.jit").replace("triton.cdiv", "tr.cdiv"),
    "autotune_on_jit": HONEST_RELU.replace(
        "@triton.jit",
        "@triton.autotune(configs=[triton.Config({'BLOCK': 1024}, num_warps=4)], key=['n'])\n@triton.jit",
    ).replace(", BLOCK=4096)", ")").replace("(triton.cdiv(n, 4096),)", "lambda meta: (triton.cdiv(n, meta['BLOCK']),)"),
    "launch_through_alias_and_self": variant(
        init="self.kern = relu_kernel\n",
        tail="k = self.kern\ngrid = lambda meta: (triton.cdiv(n, meta['BLOCK']),)\nk[grid](x, out, n, BLOCK=1024)\n"
             "return out\n",
        launch=False,
    ),
    "shape_and_device_helpers": variant(
        header="import math\nSQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)\n",
        tail="""\
        with torch.cuda.device(x.device):
            pass
        big = torch.finfo(torch.float32).max
        y = x.view(-1).reshape(x.shape).flatten()
        rows, cols = x.shape[0], x.size(1) if x.dim() > 1 else 1
        assert x.is_contiguous() and x.stride(-1) == 1 and x.data_ptr() and y.numel() and big and rows and cols
        buf = torch.empty(x.shape, device=x.device, dtype=x.dtype)
        buf2 = torch.zeros_like(x)
        BLOCK = triton.next_power_of_2(n)
        return out
        """,
    ),
    "constexpr_globals_in_kernel": variant(
        header="LOG2E = tl.constexpr(1.4426950408889634)\nNEG = -0.0\nPAIR = (1, 2.0)\n").replace(
        "tl.maximum(x, 0.0)", "tl.maximum(x * LOG2E / LOG2E, NEG + PAIR[0] - 1)"),
    "softmax_kernel_with_tl_methods": '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    x = x - x.max(axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * n_cols + cols, e / e.sum(axis=0), mask=cols < n_cols)


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super(ModelNew, self).__init__()
        self.dim = dim

    @torch.no_grad()
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return out


if __name__ == "__main__":
    print("ok")
''',
    # source_encoding: UTF-8 cookies in any spelling pass
    **{f"utf8_cookie_{i}": cookie + HONEST_RELU for i, cookie in enumerate((
        "# -*- coding: utf-8 -*-\n", "#!/usr/bin/env python\n# coding=utf8\n", "# vim: set fileencoding=UTF_8 :\n"))},
    # no_generators: generator expressions and comprehensions stay allowed
    "generator_expression": variant(tail="assert all(s > 0 for s in x.shape) and sum(d for d in x.shape)\nreturn out\n"),
    # no_torch_compute: torch.nn.init's initialisers by whole name
    "nn_init_initialisers": variant(init="self.w = nn.Parameter(torch.empty(4))\ntorch.nn.init.constant_(self.w, 0.5)\n"
                                         "g = nn.init.calculate_gain('relu')\nnn.init.ones_(self.w.view(2, 2))\n"
                                         "nn.Module.__init__(self)\n"),
}


# Honest for the deny-list, outside the submission language (which refuses them first, naming its rule):
# a kernel held in self, `with`, torch.finfo and data_ptr, a decorated forward, `all(...)`, nn.init.
OUTSIDE_THE_LANGUAGE = {"launch_through_alias_and_self", "shape_and_device_helpers", "softmax_kernel_with_tl_methods",
                        "generator_expression", "nn_init_initialisers"}


@pytest.mark.parametrize("name", sorted(HONEST_VARIANTS))
def test_honest_variants_pass(name):
    """Every deny-list check passes them; the language accepts all but OUTSIDE_THE_LANGUAGE."""
    checks = run_static_checks(HONEST_VARIANTS[name])
    deny = {k: c for k, c in checks.items() if k != "submission_language"}
    assert first_failure(deny) is None, first_failure(deny)
    assert checks["submission_language"].passed == (name not in OUTSIDE_THE_LANGUAGE), checks["submission_language"]


# (id, source, the check that must fail)
HACKS = [
    # parses
    ("syntax_error", "def forward(self, x:\n    return x\n", "parses"),
    ("null_byte", "x = 1\x00\n", "parses"),
    # submission_language (more cases in tests/eval/test_language.py)
    ("language_tensor_method", variant(tail="return x.relu()\n"), "submission_language"),
    ("language_functools", variant(header="import functools\n"), "submission_language"),
    # kernel_language (more cases in tests/eval/test_kernel_language.py)
    ("kernel_injected_np", HONEST_RELU.replace("tl.maximum(x, 0.0)", "np.maximum(x, 0.0)"), "kernel_language"),
    # defines_model_new
    ("no_model_new", HONEST_RELU.replace("class ModelNew", "class ModelFast"), "defines_model_new"),
    ("model_new_no_forward", HONEST_RELU.replace("def forward", "def run"), "defines_model_new"),
    ("model_new_not_module", HONEST_RELU.replace("class ModelNew(nn.Module)", "class ModelNew(object)"),
     "defines_model_new"),
    ("model_new_is_assigned", variant(module="ModelNew = relu_kernel\n").replace("class ModelNew", "class _M"),
     "defines_model_new"),
    # has_triton_kernel / launches_kernel
    ("no_jit_decorator", HONEST_RELU.replace("@triton.jit\n", ""), "has_triton_kernel"),
    ("autotune_without_jit", HONEST_RELU.replace(
        "@triton.jit", "@triton.autotune(configs=[], key=['n'])"), "has_triton_kernel"),
    ("kernel_never_launched", variant(launch=False), "launches_kernel"),
    # no_reference_model
    ("subclass_model", HONEST_RELU.replace("class ModelNew(nn.Module)", "class ModelNew(Model)"),
     "no_reference_model"),
    ("call_model", variant(tail="return Model()(x)\n"), "no_reference_model"),
    # no_torch_compute: direct, aliases, attribute chains, getattr, methods
    ("torch_relu", variant(tail="return torch.relu(x)\n"), "no_torch_compute"),
    ("torch_alias", variant(header="import torch as T\n", tail="return T.relu(x)\n"), "no_torch_compute"),
    ("from_torch_import", variant(header="from torch import relu\n", tail="return relu(x)\n"), "no_torch_compute"),
    ("from_import_renamed", variant(header="from torch.nn.functional import relu as r\n", tail="return r(x)\n"),
     "no_torch_compute"),
    ("functional_alias", variant(header="import torch.nn.functional as G\n", tail="return G.relu(x)\n"),
     "no_torch_compute"),
    ("functional_from_nn", variant(header="from torch.nn import functional\n", tail="return functional.gelu(x)\n"),
     "no_torch_compute"),
    ("F_default", variant(header="import torch.nn.functional as F\n", tail="return F.silu(x)\n"), "no_torch_compute"),
    ("full_chain", variant(tail="return torch.nn.functional.relu(x)\n"), "no_torch_compute"),
    ("torch_C_nn", variant(tail="return torch._C._nn.gelu(x)\n"), "no_torch_compute"),
    ("torch_ops_aten", variant(tail="return torch.ops.aten.relu.default(x)\n"), "no_torch_compute"),
    ("torch_special", variant(tail="return torch.special.expit(x)\n"), "no_torch_compute"),
    ("getattr_computed", variant(tail="return getattr(torch, 're' + 'lu')(x)\n"), "no_torch_compute"),
    ("getattr_variable", variant(tail="name = 'relu'\nop = getattr(torch, name)\nreturn op(x)\n"), "no_torch_compute"),
    ("getattr_literal", variant(tail="return getattr(torch, 'sigmoid')(x)\n"), "no_torch_compute"),
    ("getattr_alias_chain", variant(header="import torch as T\nnnf = getattr(T.nn, 'functional')\n",
                                    tail="return nnf.relu(x)\n"), "no_torch_compute"),
    ("reference_then_call", variant(tail="act = torch.relu\nreturn act(x)\n"), "no_torch_compute"),
    ("reference_in_list", variant(tail="return [torch.tanh][0](x)\n"), "no_torch_compute"),
    ("self_attribute_alias", variant(init="self.act = torch.sigmoid\n", tail="return self.act(x)\n"),
     "no_torch_compute"),
    ("tensor_class_method", variant(tail="return torch.Tensor.relu(x)\n"), "no_torch_compute"),
    ("tensor_class_alias", variant(tail="T = torch.Tensor\nreturn T.clamp(x, min=0)\n"), "no_torch_compute"),
    ("method_relu", variant(tail="return x.relu()\n"), "no_torch_compute"),
    ("method_relu_inplace", variant(tail="return out.copy_(x).relu_()\n"), "no_torch_compute"),
    ("method_clamp", variant(tail="return x.clamp(min=0.0)\n"), "no_torch_compute"),
    ("method_exp", variant(tail="return x.exp()\n"), "no_torch_compute"),
    ("method_softmax", variant(tail="return x.softmax(dim=1)\n"), "no_torch_compute"),
    ("method_mul", variant(tail="return x.mul(x.gt(0))\n"), "no_torch_compute"),
    ("method_by_getattr", variant(tail="return getattr(x, 'relu')()\n"), "no_torch_compute"),
    ("method_reference", variant(tail="f = x.sigmoid\nreturn f()\n"), "no_torch_compute"),
    ("numpy_route", variant(tail="return x.numpy()\n"), "no_torch_compute"),
    ("torch_where", variant(tail="return torch.where(x > 0, x, 0.0)\n"), "no_torch_compute"),
    ("torch_maximum", variant(tail="return torch.maximum(x, torch.zeros_like(x))\n"), "no_torch_compute"),
    ("torch_tensor_ctor", variant(tail="return torch.tensor(x.tolist())\n"), "no_torch_compute"),
    ("matmul_operator", variant(tail="return x @ x.T\n"), "no_torch_compute"),
    ("torch_in_jit_body", HONEST_RELU.replace("tl.maximum(x, 0.0)", "torch.relu(x)"), "no_torch_compute"),
    # no_torch_layers
    ("nn_relu", variant(init="self.act = nn.ReLU()\n", tail="return self.act(x)\n"), "no_torch_layers"),
    ("nn_softmax_chain", variant(tail="return torch.nn.Softmax(dim=1)(x)\n"), "no_torch_layers"),
    ("nn_linear", variant(init="self.lin = nn.Linear(4, 4)\n"), "no_torch_layers"),
    ("nn_from_import", variant(header="from torch.nn import GELU\n", tail="return GELU()(x)\n"), "no_torch_layers"),
    # pure_triton_kernels (under the interpreter a kernel body is Python that runs inside the launch)
    ("kernel_reads_global_list", variant(header="_HOLD = []\n").replace(
        "    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)",
        "    _HOLD[1].copy_(_HOLD[0] * (_HOLD[0] > 0))"), "pure_triton_kernels"),
    ("kernel_reads_global_tensor", variant(header="_W = torch.empty(4)\n").replace(
        "tl.maximum(x, 0.0)", "tl.maximum(x, _W)"), "pure_triton_kernels"),
    ("kernel_tensor_method_on_constexpr", HONEST_RELU.replace(
        "n, BLOCK: tl.constexpr):", "n, H: tl.constexpr, BLOCK: tl.constexpr):").replace(
        "    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)", "    H[1].copy_(H[0] * (H[0] > 0))"),
     "pure_triton_kernels"),
    # no_try_except
    ("try_except", variant(tail="try:\n    return out\nexcept Exception:\n    return x\n"), "no_try_except"),
    ("try_finally", variant(tail="try:\n    pass\nfinally:\n    return out\n"), "no_try_except"),
    ("try_star", variant(tail="try:\n    pass\nexcept* ValueError:\n    pass\nreturn out\n"), "no_try_except"),
    ("suppress", variant(header="from contextlib import suppress\n",
                         tail="with suppress(Exception):\n    return out\nreturn x\n"), "no_try_except"),
    ("swallowing_exit", variant(module="class S:\n    def __exit__(self, *a):\n        return True\n"),
     "no_try_except"),
    # no_cuda_streams
    ("side_stream", variant(tail="s = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    pass\nreturn out\n"),
     "no_cuda_streams"),
    ("stream_from_import", variant(header="from torch.cuda import Stream\n", tail="s = Stream()\nreturn out\n"),
     "no_cuda_streams"),
    ("current_stream", variant(tail="torch.cuda.current_stream().synchronize()\nreturn out\n"), "no_cuda_streams"),
    ("set_stream", variant(tail="torch.cuda.set_stream(None)\nreturn out\n"), "no_cuda_streams"),
    ("cuda_graph", variant(tail="g = torch.cuda.CUDAGraph()\nwith torch.cuda.graph(g):\n    pass\nreturn out\n"),
     "no_cuda_streams"),
    ("cuda_event", variant(tail="e = torch.cuda.Event(enable_timing=True)\nreturn out\n"), "no_cuda_streams"),
    ("record_stream", variant(tail="out.record_stream(None)\nreturn out\n"), "no_cuda_streams"),
    # no_timers
    ("import_time", variant(header="import time\n"), "no_timers"),
    ("from_time_import", variant(header="from time import perf_counter as pc\n"), "no_timers"),
    ("event_elapsed_patch", variant(header="torch.cuda.Event.elapsed_time = lambda *a: 0.001\n"), "no_timers"),
    # no_module_patching
    ("patch_torch_relu", variant(header="torch.relu = lambda x: x\n"), "no_module_patching"),
    ("patch_perf_counter", variant(header="import time\ntime.perf_counter = lambda: 0.0\n"), "no_module_patching"),
    ("patch_event_elapsed", variant(header="torch.cuda.Event.elapsed_time = lambda *a: 0.001\n"),
     "no_module_patching"),
    ("patch_through_alias", variant(header="T = torch\nT.cuda.synchronize = lambda: None\n"), "no_module_patching"),
    ("patch_tl", variant(header="tl.maximum = tl.minimum\n"), "no_module_patching"),
    ("patch_triton_knobs", variant(header="triton.knobs.runtime.launch_enter_hook = None\n"), "no_module_patching"),
    ("patch_augassign", variant(header="tl.foo += 1\n"), "no_module_patching"),
    ("patch_flag", variant(header="torch.backends.cuda.matmul.allow_tf32 = True\n"), "no_module_patching"),
    ("patch_setattr", variant(header="setattr(torch.cuda, 'synchronize', print)\n"), "no_module_patching"),
    ("patch_del", variant(header="del torch.cuda.Event\n"), "no_module_patching"),
    # no_tensor_subclass
    ("tensor_subclass", variant(module="class Lazy(torch.Tensor):\n    pass\n"), "no_tensor_subclass"),
    ("make_subclass", variant(tail="return torch.Tensor._make_subclass(torch.Tensor, out)\n"), "no_tensor_subclass"),
    ("as_subclass", variant(tail="return out.as_subclass(torch.Tensor)\n"), "no_tensor_subclass"),
    ("torch_function", variant(module="class P:\n    def __torch_function__(self, *a):\n        return 0\n"),
     "no_tensor_subclass"),
    ("dispatch_mode", variant(header="from torch.utils._python_dispatch import TorchDispatchMode\n"),
     "no_tensor_subclass"),
    ("dynamic_type", variant(tail="L = type('L', (torch.Tensor,), {})\nreturn out\n"), "no_tensor_subclass"),
    # no_torch_compile
    ("torch_compile", variant(tail="return torch.compile(lambda t: t)(out)\n"), "no_torch_compile"),
    ("torch_jit_script", variant(module="@torch.jit.script\ndef f(t):\n    return t\n"), "no_torch_compile"),
    ("load_inline", variant(header="from torch.utils.cpp_extension import load_inline\n"), "no_torch_compile"),
    ("torch_library", variant(header="lib = torch.library.Library('x', 'DEF')\n"), "no_torch_compile"),
    # no_forbidden_imports (every form)
    *[(f"import_{m}", variant(header=f"import {m}\n"), "no_forbidden_imports") for m in (
        "threading", "multiprocessing", "asyncio", "subprocess", "os", "sys", "signal", "socket", "urllib.request",
        "requests", "shutil", "pathlib", "io", "tempfile", "pickle", "marshal", "importlib", "builtins", "gc",
        "inspect", "traceback", "weakref", "mmap", "resource", "ctypes", "cffi", "numpy", "operator")],
    ("from_concurrent", variant(header="from concurrent.futures import ThreadPoolExecutor\n"), "no_forbidden_imports"),
    ("import_os_path_as", variant(header="import os.path as osp\n"), "no_forbidden_imports"),
    ("import_in_function", variant(tail="import subprocess\nreturn out\n"), "no_forbidden_imports"),
    ("star_import", variant(header="from torch import *\n"), "no_forbidden_imports"),
    ("relative_import", variant(header="from . import helper\n"), "no_forbidden_imports"),
    ("torch_multiprocessing", variant(header="import torch.multiprocessing as mp\n"), "no_forbidden_imports"),
    ("dunder_import", variant(tail="__import__('os').system('true')\nreturn out\n"), "no_dangerous_builtins"),
    # no_dangerous_builtins
    ("open_write", variant(tail="open('../x', 'w').write('hi')\nreturn out\n"), "no_dangerous_builtins"),
    ("open_alias", variant(tail="o = open\nreturn out\n"), "no_dangerous_builtins"),
    *[(f"builtin_{b}", variant(tail=f"{b}({arg})\nreturn out\n"), "no_dangerous_builtins") for b, arg in (
        ("exec", "'pass'"), ("eval", "'1'"), ("compile", "'1', 'f', 'eval'"), ("globals", ""), ("locals", ""),
        ("vars", "x"), ("breakpoint", ""), ("exit", "0"), ("quit", "0"), ("input", ""),
        ("setattr", "self, 'a', 1"), ("delattr", "self, 'a'"))],
    ("getattr_computed_generic", variant(tail="f = getattr(x, 're' + 'lu')\nreturn out\n"), "no_dangerous_builtins"),
    ("getattr_as_value", variant(header="import functools\n",
                                 tail="f = functools.reduce(getattr, ['relu'], x)\nreturn out\n"),
     "no_dangerous_builtins"),
    # no_escape_dunders
    ("dunder_class", variant(tail="c = x.__class__\nreturn out\n"), "no_escape_dunders"),
    ("dunder_subclasses", variant(tail="s = ().__class__.__bases__[0].__subclasses__()\nreturn out\n"),
     "no_escape_dunders"),
    ("dunder_globals", variant(tail="g = self.forward.__globals__\nreturn out\n"), "no_escape_dunders"),
    ("dunder_builtins", variant(tail="b = __builtins__\nreturn out\n"), "no_escape_dunders"),
    ("dunder_dict", variant(tail="return torch.__dict__['relu'](x)\n"), "no_escape_dunders"),
    ("dunder_getattr_literal", variant(tail="c = getattr(x, '__class__')\nreturn out\n"), "no_escape_dunders"),
    ("dunder_mul", variant(tail="return x.__mul__(x > 0)\n"), "no_escape_dunders"),
    ("dunder_getattribute", variant(tail="return object.__getattribute__(x, 'relu')()\n"), "no_escape_dunders"),
    ("dunder_in_format_string", variant(tail="s = '{0.__class__.__mro__}'.format(x)\nreturn out\n"),
     "no_escape_dunders"),
    # no_try_except: the with allow-list sees through renames
    ("suppress_renamed_through_module", variant(
        header="quiet = torch.serialization.contextlib.suppress\n",
        tail="with quiet(Exception):\n    return out\nreturn x\n"), "no_try_except"),
    ("with_unknown_manager", variant(tail="with [x][0]:\n    pass\nreturn out\n"), "no_try_except"),
    # no_dangerous_builtins: strings evaluated as code, computed hasattr
    ("get_type_hints_eval", variant(header="import typing\n",
                                    module="def f(a: \"print('x')\"):\n    pass\nH = typing.get_type_hints(f)\n"),
     "no_dangerous_builtins"),
    ("hasattr_computed", variant(tail="h = hasattr(out, 're' + 'lu')\nreturn out\n"), "no_dangerous_builtins"),
    # bounded_source: too deep or too big to judge (static_rejected, never an exception)
    ("deep_binop_chain", variant(tail="y = " + "+".join(["x"] * 150) + "\nreturn out\n"), "bounded_source"),
    ("million_term_expression", "y = " + "+".join(["1"] * 99_000) + "\n", "bounded_source"),
    ("deep_unary", variant(tail="y = " + "-" * 20_000 + "x\nreturn out\n"), "bounded_source"),
    ("too_many_nodes", variant(module="T = [" + "0," * 60_000 + "]\n"), "bounded_source"),
    ("oversize_source", variant(module="#" * 200_001 + "\n"), "bounded_source"),
    # no_forbidden_modules: a module off the allow-list reached as an attribute of an allowed one
    *[(f"module_attr_{i}", variant(tail=f"m = {chain}\nreturn out\n", header=header), "no_forbidden_modules")
      for i, (chain, header) in enumerate((
          ("triton.runtime.jit.os", ""), ("torch.functional.np", ""), ("tl.core.builtins", ""),
          ("torch.sys", ""), ("typing.sys", "import typing\n"), ("functools.sys", "import functools\n"),
          ("getattr(torch.functional, 'np')", ""), ("[torch][0].functional.np", ""), ("x.os", "")))],
    ("module_attr_from_import", variant(header="from torch.functional import np\n"), "no_forbidden_modules"),
    ("module_attr_alias_chain", variant(header="a = torch\nb = a.functional\nc = b.np\n"), "no_forbidden_modules"),
    ("module_as_value", variant(tail="m = [torch][0]\nreturn out\n"), "no_forbidden_modules"),
    ("module_in_starred_target", variant(header="import typing\na, *b = torch, typing\n"), "no_forbidden_modules"),
    ("module_in_subscript_target", variant(header="import typing\nD = {}\nD['t'] = typing\n"), "no_forbidden_modules"),
    ("module_as_default_argument", variant(module="def f(t=torch):\n    return t\n"), "no_forbidden_modules"),
    ("name_bound_too_often", variant(header="".join(f"a = torch.x{i}\n" for i in range(20)) + "a = torch\n"),
     "no_forbidden_modules"),
    ("eval_through_class_attribute", variant(header="import typing\n", module=(
        "class H:\n    t = typing\n\n    def g(self, f):\n        return self.t.get_type_hints(f)\n")),
     "no_dangerous_builtins"),
    ("typing_private_evaluator", variant(header="import typing\nE = typing._eval_type\n"), "no_torch_internals"),
    ("module_returned", variant(module="def mod():\n    return triton\n"), "no_forbidden_modules"),
    # no_torch_internals
    *[(f"internal_{i}", variant(tail=f"h = {chain}\nreturn out\n"), "no_torch_internals") for i, chain in enumerate((
        "torch._C._DisableTorchDispatch()", "torch._C._unset_dispatch_mode(0)", "torch._dynamo", "torch._inductor",
        "torch._ops.ops", "torch.utils._python_dispatch", "torch.library.impl", "torch.ops.aten.relu",
        "getattr(torch, '_C')", "triton._C", "out._C", "[torch][0].ops.aten"))],
    ("internal_import", variant(header="import torch._C as C\n"), "no_torch_internals"),
    ("internal_rebound_name", variant(header="a = torch.nn\na = torch.ops\n", tail="f = a.relu\nreturn out\n"),
     "no_torch_internals"),
    # no_interpreter_detection
    *[(f"interpreter_{i}", variant(tail=f"{code}\nreturn out\n"), "no_interpreter_detection")
      for i, code in enumerate((
          "flag = triton.runtime.jit.os.environ.get('X')", "k = triton.knobs.runtime.interpret",
          "m = triton.runtime.interpreter", "s = 'TRITON_INTERPRET'",
          "n = type(relu_kernel).__name__", "r = str(relu_kernel)", "c = relu_kernel.cache",
          "from triton.runtime.interpreter import interpreter_builder", "d = triton.runtime.driver.active"))],
    ("interpreter_only_helper_in_kernel", variant(module="def helper(v):\n    return v\n").replace(
        "tl.maximum(x, 0.0)", "helper(tl.maximum(x, 0.0))"), "no_interpreter_detection"),
    ("interpreter_builtin_in_kernel", HONEST_RELU.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.0 * id(x))"),
     "no_interpreter_detection"),
    # no_nondeterminism
    *[(f"nondeterminism_{i}", variant(tail=f"{code}\nreturn out\n", header=header), "no_nondeterminism")
      for i, (code, header) in enumerate((
          ("k = id(x) % 2", ""), ("k = hash('softmax') % 2", ""), ("h = hash", ""),
          ("r = random.random()", "import random\n"), ("t = secrets.token_hex(4)", "import secrets\n"),
          ("u = uuid.uuid4()", "import uuid\n"), ("t = time.time()", "import time\n"),
          ("p = triton.runtime.jit.os.getpid()", ""), ("b = triton.runtime.jit.os.urandom(1)", ""),
          ("s = torch.initial_seed()", ""), ("out.uniform_()", ""), ("r = torch.random", ""),
          ("t = threading.get_ident()", "import threading\n"), ("c = str(object())", "")))],
    # source_encoding (F2): the importer honours a cookie that ast.parse(str) ignores
    *[(f"coding_cookie_{i}", cookie + HONEST_RELU, "source_encoding") for i, cookie in enumerate((
        "# coding: utf-7\n", "# -*- coding: latin-1 -*-\n", "#!/usr/bin/python\n# vim: set fileencoding=unicode_escape :\n",
        "\n# coding=raw_unicode_escape\n", "\f # coding:utf_16\n", "# coding: no-such-codec\n",
        "#!/x\r# coding: utf-7\r"))],
    # no_frame_introspection (F1): frame, code, generator, coroutine and traceback attributes on anything
    *[(f"frame_{i}", variant(tail=f"{code}\nreturn out\n"), "no_frame_introspection") for i, code in enumerate((
        "g = (v for v in [0])\nf = g.gi_frame.f_back", "fr = self.fr\nd = fr.f_locals['guard']",
        "b = self.fr.f_builtins['get' + 'attr']", "c = self.fn.co_consts", "t = self.tb.tb_frame",
        "g = getattr(self.g, 'gi_frame')", "s = '{0.gi_frame.f_back}'.format(self.g)", "c = self.c.cr_await",
        "y = self.g.gi_yieldfrom", "f = self.c.co_future_member", "h = self.m.settrace",
        "match self.g:\n    case object(gi_frame=fr):\n        pass"))],
    # no_generators: generators and coroutines hand out frames and run their bodies later
    ("generator_yield", variant(module="def gen():\n    yield 1\n"), "no_generators"),
    ("generator_yield_from", variant(module="def gen():\n    yield from [1]\n"), "no_generators"),
    ("generator_lambda", variant(tail="g = (lambda: (yield))()\nreturn out\n"), "no_generators"),
    ("coroutine_def", variant(module="async def co():\n    return 1\n"), "no_generators"),
    ("coroutine_await", variant(module="async def co(c):\n    await c\n"), "no_generators"),
    # no_pattern_attribute_reads: a class pattern's keywords are attribute reads
    ("pattern_reads_torch_member", variant(tail="match torch:\n    case object(relu=r):\n        return r(x)\n"
                                                "return out\n"), "no_pattern_attribute_reads"),
    # no_torch_compute: re-exported modules and tensor subclasses are judged as what they are (a05)
    *[(f"reexport_{i}", variant(tail=f"{code}\nreturn out\n", header=header), "no_torch_compute")
      for i, (code, header) in enumerate((
          ("out = torch.nn.init.torch.relu(x)", ""), ("out = [torch.nn.init.torch.relu][0](x)", ""),
          ("out = torch.torch.sigmoid(x)", ""), ("f = torch.cuda.torch.nn.functional.gelu", ""),
          ("out = T.relu(x)", "from torch.nn.init import torch as T\n"),
          ("out = torch.nn.Parameter.relu(x)", ""), ("f = [nn.Buffer.exp][0]", ""),
          ("out = torch.nn.init.torch.nn.init.torch.where(x > 0, x, 0.0)", ""),
          ("out = torch.nn.init.F.relu(x)", "")))],
    ("reexport_internal", variant(tail="i = tl.core.ir\nreturn out\n"), "no_torch_internals"),
]


@pytest.mark.parametrize(("source", "check"), [pytest.param(s, c, id=i) for i, s, c in HACKS])
def test_hack_fails_its_check(source, check):
    checks = run_static_checks(source)
    assert check in checks, f"{check} did not run: {checks}"
    result = checks[check]
    assert not result.passed, f"{check} passed on:\n{source}"
    assert result.why
    if check not in ("defines_model_new", "has_triton_kernel", "launches_kernel") and "\x00" not in source \
            and not (check == "bounded_source" and list(checks) == ["bounded_source"]):  # refused before parsing
        assert "line " in result.why, result.why  # the model is told where
    assert first_failure(checks) is not None


def test_hack_ids_are_unique_and_cover_every_check():
    ids = [i for i, _, _ in HACKS]
    assert len(ids) == len(set(ids))
    assert {c for _, _, c in HACKS} >= {"parses", *[name for name, _ in STATIC_CHECKS]}


def test_why_names_construct_and_line():
    checks = run_static_checks(variant(tail="return torch.relu(x)\n"))
    why = checks["no_torch_compute"].why
    line = next(i for i, text in enumerate(variant(tail="return torch.relu(x)\n").splitlines(), 1)
                if "torch.relu" in text)
    assert f"line {line}:" in why and "torch.relu" in why and "@triton.jit" in why


def test_syntax_error_reports_line_and_only_parses():
    checks = run_static_checks("import torch\n\ndef f(:\n    pass\n")
    assert list(checks) == ["parses"]
    assert not checks["parses"].passed and "line 3" in checks["parses"].why
    assert first_failure(checks)[0] == "parses"


def test_first_failure_follows_check_order():
    checks = run_static_checks(variant(header="import os\n", tail="return torch.relu(x)\n"))
    name, check = first_failure(checks)
    assert name == "submission_language" and not check.passed  # the allow-list is reported first
    assert not checks["no_torch_compute"].passed  # every check runs, not only the first failing one
    assert not checks["no_forbidden_imports"].passed


def test_deeply_nested_source_fails_closed():
    source = variant(tail="y = " + "(" * 400 + "x" + ")" * 400 + "\nreturn out\n")
    checks = run_static_checks(source)
    assert first_failure(checks) is None or not first_failure(checks)[1].passed  # never raises


def _honest_sources() -> dict[str, str]:
    """Every honest solution the project ships: the suite's solutions, the prompt's example, the SFT corpus."""
    import random
    from pathlib import Path

    from kernelflow.tasks import extract_code
    from kernelflow.tasks.prompts import EXAMPLE_SOLUTION
    from kernelflow.train.corpus import answer, corpus_tasks

    root = Path(__file__).resolve().parents[1] / "fixtures" / "solutions"
    sources = {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.py"))}
    sources["prompts.EXAMPLE_SOLUTION"] = EXAMPLE_SOLUTION
    rng = random.Random(0)
    for task_id in corpus_tasks():
        for i in range(3):
            sources[f"corpus:{task_id}:{i}"] = extract_code(answer(task_id, rng)[0])
    return sources


def test_every_honest_solution_passes_every_check():
    sources = _honest_sources()
    assert len(sources) >= 30
    failed = {name: [(n, c.why) for n, c in run_static_checks(src).items() if not c.passed]
              for name, src in sources.items()}
    assert not {k: v for k, v in failed.items() if v}


def test_a_200kB_pathological_source_is_analysed_and_rejected():
    # 200 kB of shallow, valid code at the node limit's edge: analysed (not refused unparsed), then rejected.
    lines = [f"a{i} = a{i + 1}" for i in range(13_500)] + ["a13500 = torch"]
    source = variant(module="\n".join(lines) + "\nACT = a0.relu\n")
    assert 150_000 < len(source) <= 200_000
    checks = run_static_checks(source)
    assert checks["parses"].passed
    assert first_failure(checks)[0] == "bounded_source" and "syntax nodes" in checks["bounded_source"].why


def test_a_backwards_alias_chain_resolves_in_one_pass():
    # `a0 = a1; a1 = a2; ...; aN = torch`: the worklist resolves it (the old fixpoint needed N passes).
    lines = [f"a{i} = a{i + 1}" for i in range(3_000)] + ["a3000 = torch"]
    checks = run_static_checks(variant(module="\n".join(lines) + "\n", tail="return a0.relu(x)\n"))
    assert first_failure(checks) is not None and not checks["no_torch_compute"].passed
    assert "torch.relu" in checks["no_torch_compute"].why


@pytest.mark.parametrize("depth", [150, 1_000, 3_000, 100_000])
def test_deep_nesting_is_rejected_cleanly(depth):
    for source in (variant(tail="y = " + "+".join(["x"] * depth) + "\nreturn out\n"),
                   variant(tail="y = " + "-" * depth + "x\nreturn out\n"),
                   variant(tail="y = x" + ".real" * depth + "\nreturn out\n"),
                   variant(tail="y = " + "lambda: " * depth + "x\nreturn out\n")):
        checks = run_static_checks(source)
        name, check = first_failure(checks)
        assert name == "bounded_source" and not check.passed, (name, check)


def test_pathological_unfenced_answer_does_not_crash_the_code_extractor():
    from kernelflow.tasks import extract_code, pysource

    code_like = "#" * 300_000 + "\nclass A: pass"
    for text in ("+".join(["1"] * 100_000), "-" * 100_000 + "1", "x = 1\x00", code_like):
        # no_code, or (a line that looks like code) handed on to be judged: never an exception out of the judge
        got = extract_code(text)
        assert (got is not None and got.strip() == code_like.strip()) if text is code_like else got is None
        with pytest.raises(SyntaxError):  # bounded: the judge's parse refuses it, so the verdict is compile_error
            pysource.parse(text)


def test_rebinding_a_name_is_judged_through_every_binding():
    checks = run_static_checks(variant(header="a = torch.nn\na = torch\n", tail="return [a.relu][0](x)\n"))
    assert not checks["no_torch_compute"].passed


@pytest.mark.parametrize("header", ["from contextlib import suppress as s\n", "s = typing.contextlib.suppress\n"])
def test_renamed_suppress_is_refused_as_a_context_manager(header):
    checks = run_static_checks(variant(header="import typing\n" + header,
                                       tail="with s(Exception):\n    return out\nreturn x\n"))
    assert not checks["no_try_except"].passed


def test_coding_cookie_in_a_fenced_answer_is_refused():
    # The fence's first line is line 1 of the written file (red team a02b): the check sees what is written.
    from kernelflow.tasks import extract_code

    code = extract_code("Here is my kernel.\n\n```python\n# coding: utf-7\n" + HONEST_RELU + "```\n")
    assert code.startswith("# coding: utf-7")
    assert first_failure(run_static_checks(code))[0] == "source_encoding"


def test_a_bom_cannot_carry_a_cookie_past_the_parser():
    # ast.parse refuses U+FEFF in a str, so a BOM-prefixed file never reaches the importer (compile_error).
    for source in ("\ufeff# coding: utf-7\n" + HONEST_RELU, "\ufeff" + HONEST_RELU):
        assert first_failure(run_static_checks(source))[0] == "parses"


def test_allowed_context_managers_and_main_guard_pass_the_deny_list_only():
    source = variant(tail="with torch.no_grad(), torch.cuda.device(x.device):\n    pass\nreturn out\n",
                     module='\n\nif __name__ == "__main__":\n    print(ModelNew.__name__)\n')
    checks = run_static_checks(source)
    assert first_failure({k: c for k, c in checks.items() if k != "submission_language"}) is None
    assert "rule: host-statements" in checks["submission_language"].why  # the language has no `with`
