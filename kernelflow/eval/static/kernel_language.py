"""The kernel language: an allow-list grammar for the bodies of `@triton.jit` functions (red team round 2a).

On a GPU, Triton's compiler refuses anything that is not Triton. Under the interpreter (`TRITON_INTERPRET=1`,
the CPU backend) a kernel body is plain Python run during the launch, and Triton's interpreter copies its
own module globals (`np`, `inspect`, `triton`, `interpreter_builder`, `TensorHandle`, ...) into the kernel's
globals before the first launch, and a block's `.handle.data` is a numpy array. So the body must be judged
by what it is allowed to contain, not by names it must not use. A kernel body may contain:

- names: its parameters, names it assigns itself, the `triton.language` module (under its alias),
  `triton` only as `triton.cdiv` / `triton.next_power_of_2` / `triton.language.*`, other `@triton.jit`
  functions of the module, module constants bound only to int/float/bool literals (a tuple of them, or `tl.constexpr`
  of one), and the builtins `range` and `float` (only `float("inf")`, `"-inf"`, `"nan"`);
- attributes: the public functions and dtypes of `triton.language` (`TL_FUNCTIONS`, `TL_VALUES`,
  `tl.math.*` of `TL_MATH`), and on any other value the public methods of `tl.tensor` plus `dtype`,
  `shape` and dtype queries (`TENSOR_ATTRS`); never `handle`, `data`, `type`, `item`, dunders;
- calls: to those `tl` functions, those methods, other kernels, `range`, `float("inf")`;
- statements: assignments to names (and tuples of names), augmented assignments, `if`, `for` over
  `range` / `tl.range` / `tl.static_range`, `while`, `return`, `assert`, `pass`, `break`, `continue`, calls;
- expressions: constants, operators, comparisons, `x if c else y`, tuples and lists, subscripts with
  `:`, `None` and int constants only;
- strings: only as keyword values of calls (`eviction_policy="evict_last"`), the argument of `float`, and
  assert messages; no string (docstrings included) holds a line break, and in the kernel's source lines
  (decorators to end) exactly one line starts with `def `, its own (`kernel-source`).

Not covered here: the kernel's decorators, signature, annotations and defaults (host code, judged by
`static/language.py`); what a `tl.constexpr` parameter holds at run time (a torch tensor or a host callable
passed as a constexpr: the worker's launch wrapper checks that constexpr values are int/float/bool/str/None
or a tl dtype); whether the kernel computes the right thing (the judge's correctness check).
"""

from __future__ import annotations

import ast
import re

from kernelflow.eval.verdict import Check

DOC = "docs/submission_language.md"
HINT = ("a @triton.jit body may only use its parameters and locals, tl.* functions and dtypes, tl.tensor "
        f"methods, other kernels, literal constants, range and float('inf'); see {DOC} (Kernel bodies)")

RULES = {  # rule name -> why it exists (one line each)
    "kernel-names": "a body reads its parameters, locals, tl, other kernels, literal constants and range/float: "
                    "the interpreter injects np, inspect and its own internals into kernel globals",
    "kernel-attributes": "attributes only from Triton's public language (tl functions, dtypes, tensor methods): "
                         "`.handle.data` and friends are the interpreter's numpy arrays",
    "kernel-calls": "calls only to tl functions, tensor methods, other kernels, range and float('inf'): any other "
                    "call is host Python under the interpreter",
    "kernel-statements": "names are assigned, loops and branches run, calls are made: imports, with, try, raise, "
                         "nested defs and item or attribute stores are host Python",
    "kernel-expressions": "lambdas, comprehensions, dicts, sets, f-strings, starred and := are not Triton and run "
                          "as Python under the interpreter",
    "kernel-subscripts": "blocks are indexed with `:`, None and int constants only: values come from tl.load",
    "kernel-loops": "loops run over range / tl.range / tl.static_range: iterating a tuple binds a host value the "
                    "interpreter does not turn into a block",
    "kernel-strings": "strings only as keyword values of calls, float('inf') and assert messages, never with a "
                      "line break (the interpreter re-reads the source by lines)",
    "kernel-source": "exactly one line of a kernel (decorators to end) starts with `def `, its own: the "
                     "interpreter runs the code from the last such line, the compiler from the first",
}

_A = "atomic_add atomic_and atomic_cas atomic_max atomic_min atomic_or atomic_xchg atomic_xor"
# triton.language functions a body may call (3.x public API; absent: inline_asm_elementwise (host asm),
# extra/libdevice, core/standard/semantic (internals), device_print/static_print (the worker's stdout),
# map_elementwise (runs a Python callable), to_tensor/str_to_ty/target_info (internals)).
TL_FUNCTIONS = set(f"""abs add advance arange argmax argmin associative_scan assume {_A} broadcast broadcast_to
    cast cat cdiv ceil clamp cos cumprod cumsum debug_barrier device_assert div_rn dot dot_scaled erf exp exp2
    expand_dims fdiv flip floor fma full gather histogram interleave join load make_block_ptr max max_constancy
    max_contiguous maximum min minimum mul multiple_of num_programs permute philox program_id rand rand4x randint
    randint4x randn randn4x range ravel reduce reduce_or reshape rsqrt sigmoid sin softmax sort split sqrt sqrt_rn
    squeeze static_assert static_range store sub sum swizzle2d topk trans umulhi unsqueeze view where xor_sum
    zeros zeros_like constexpr""".split())
TL_MATH = set("abs ceil cos div_rn erf exp exp2 fdiv floor fma log log2 rsqrt sin sqrt sqrt_rn umulhi".split())
TL_FUNCTIONS |= {"log", "log2"}
TL_VALUES = set("""int1 int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 bfloat16 float32 float64
    float8e4nv float8e5 float8e4b15 float8e4b8 float8e5b16 PropagateNan""".split())
TRITON_FUNCTIONS = {"cdiv", "next_power_of_2"}
# On any value that is not a module: tl.tensor's public methods (`item`, a host read, is left out) and the
# metadata and dtype queries honest kernels read (`x_ptr.dtype.element_ty`, `BLOCK.value`).
TENSOR_ATTRS = set(f"""T abs advance argmax argmin associative_scan {_A} broadcast_to cast cdiv ceil cos cumprod
    cumsum erf exp exp2 expand_dims flip floor gather histogram log log2 logical_and logical_or max min permute
    ravel reduce reduce_or reshape rsqrt sigmoid sin softmax sort split sqrt sqrt_rn store sum to trans view
    xor_sum dtype shape numel element_ty primitive_bitwidth scalar value is_floating is_int is_int_signed
    is_int_unsigned is_ptr is_bool is_fp16 is_fp32 is_fp64 is_bf16 is_fp8 is_block ALL NONE""".split())
BUILTINS = {"range", "float"}
FLOAT_STRINGS = {"inf", "-inf", "+inf", "nan"}
_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # every character str.splitlines breaks on


class _Refusal(Exception):
    def __init__(self, node, rule: str, what: str):
        super().__init__(what)
        self.line, self.rule, self.what = getattr(node, "lineno", 0), rule, what


def _src(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node).replace("\n", " ")
    return f"`{text if len(text) <= limit else text[: limit - 3] + '...'}`"


def _literal(node: ast.AST, tl_names: set[str]) -> bool:
    """An int/float/bool literal, its negation, a tuple of them, or tl.constexpr(<one>)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        node = node.operand
    if isinstance(node, ast.Tuple):
        return all(_literal(e, tl_names) for e in node.elts)
    if isinstance(node, ast.Constant):
        return type(node.value) in (int, float, bool)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "constexpr" \
        and isinstance(node.func.value, ast.Name) and node.func.value.id in tl_names and len(node.args) == 1 \
        and not node.keywords and _literal(node.args[0], tl_names)


class _Module:
    """What a kernel body may see of its module: aliases, kernels, literal constants."""

    def __init__(self, tree: ast.Module):
        self.quals: dict[str, str] = {}  # local name -> qualified name it imports
        self.kernels: dict[str, ast.FunctionDef] = {}
        bindings: dict[str, list[ast.AST | None]] = {}
        for n in tree.body:
            if isinstance(n, ast.Import):
                for a in n.names:
                    self.quals[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                for a in n.names:
                    self.quals[a.asname or a.name] = f"{n.module}.{a.name}"
        tl_names = {k for k, v in self.quals.items() if v == "triton.language"}
        for n in tree.body:
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                bindings.setdefault(n.name, []).append(None)
                if isinstance(n, ast.FunctionDef) and any(
                        self.qual(d.func if isinstance(d, ast.Call) else d) == "triton.jit" for d in n.decorator_list):
                    self.kernels[n.name] = n
            elif isinstance(n, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                simple = len(targets) == 1 and isinstance(targets[0], ast.Name) and not isinstance(n, ast.AugAssign)
                for t in targets:
                    for x in ast.walk(t):
                        if isinstance(x, ast.Name):
                            bindings.setdefault(x.id, []).append(n.value if simple else None)
        self.constants = {k for k, vs in bindings.items()
                          if k not in self.quals and all(v is not None and _literal(v, tl_names) for v in vs)}
        self.kernels = {k: v for k, v in self.kernels.items() if len(bindings[k]) == 1}

    def qual(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.quals.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.qual(node.value)
            return base and f"{base}.{node.attr}"
        return None


def _tl_member(q: str) -> str | None:
    """`function` / `value` for an allowed member of triton / triton.language, `module` on the way, else None."""
    if q in ("triton", "triton.language", "triton.language.math"):
        return "module"
    head, _, tail = q.rpartition(".")
    if head == "triton.language":
        return "function" if tail in TL_FUNCTIONS else "value" if tail in TL_VALUES else None
    if head == "triton.language.math":
        return "function" if tail in TL_MATH else None
    if head == "triton":
        return "function" if tail in TRITON_FUNCTIONS else None
    return None


class _Kernel:
    def __init__(self, mod: _Module, fn: ast.FunctionDef):
        self.mod, self.fn = mod, fn
        self.locals = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
        self.locals |= {n.id for s in fn.body for n in ast.walk(s) if isinstance(n, ast.Name)
                        and isinstance(n.ctx, ast.Store)}  # Python makes them local: never a global read
        self.refusals: list[_Refusal] = []

    def run(self) -> list[_Refusal]:
        for i, s in enumerate(self.fn.body):
            if i == 0 and isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) \
                    and isinstance(s.value.value, str):
                self._string(s.value)  # a one-line docstring
                continue
            self._stmt(s)
        return self.refusals

    def _body(self, stmts: list[ast.stmt]) -> None:
        for s in stmts:
            self._stmt(s)

    def _stmt(self, s: ast.stmt) -> None:
        try:
            self._stmt1(s)
        except _Refusal as r:
            self.refusals.append(r)

    def _stmt1(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Assign):
            for t in s.targets:
                self._target(t)
            self._expr(s.value)
        elif isinstance(s, ast.AugAssign | ast.AnnAssign):
            if not isinstance(s.target, ast.Name):
                raise _Refusal(s, "kernel-statements", f"{_src(s)} (assign to a name only)")
            if s.value is not None:
                self._expr(s.value)
        elif isinstance(s, ast.Expr):
            if not isinstance(s.value, ast.Call):
                raise _Refusal(s, "kernel-statements", f"{_src(s)} (an expression statement is a call)")
            self._expr(s.value)
        elif isinstance(s, ast.If | ast.While):
            if s.orelse and isinstance(s, ast.While):
                raise _Refusal(s, "kernel-statements", "`while ... else`")
            self._expr(s.test)
            self._body(s.body)
            self._body(s.orelse)
        elif isinstance(s, ast.For):
            it = s.iter
            ok = isinstance(it, ast.Call) and (
                (isinstance(it.func, ast.Name) and it.func.id == "range" and "range" not in self.locals)
                or self.mod.qual(it.func) in ("triton.language.range", "triton.language.static_range"))
            if not ok or s.orelse:
                raise _Refusal(s, "kernel-loops", f"`for {ast.unparse(s.target)} in {_src(it)[1:-1]}`")
            self._target(s.target)
            self._expr(it)
            self._body(s.body)
        elif isinstance(s, ast.Return):
            if s.value is not None:
                self._expr(s.value)
        elif isinstance(s, ast.Assert):
            self._expr(s.test)
            if s.msg is not None:
                self._string(s.msg) if isinstance(s.msg, ast.Constant) else self._expr(s.msg)
        elif not isinstance(s, ast.Pass | ast.Break | ast.Continue):
            raise _Refusal(s, "kernel-statements", f"`{type(s).__name__.lower()}` ({_src(s, 40)[1:-1]})")

    def _target(self, t: ast.expr) -> None:
        if isinstance(t, ast.Tuple | ast.List):
            for e in t.elts:
                self._target(e)
        elif not isinstance(t, ast.Name):
            raise _Refusal(t, "kernel-statements", f"{_src(t)} as an assignment target (assign names only)")

    def _string(self, node: ast.Constant) -> None:
        if any(c in node.value for c in _BREAKS):
            raise _Refusal(node, "kernel-strings", f"a string with a line break ({_src(node, 30)})")

    def _expr(self, node: ast.expr) -> str:
        """Judge an expression; its kind: `value`, `module` (triton/tl on the way to a member) or `callable`."""
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                raise _Refusal(node, "kernel-strings", f"{_src(node)} (strings only as keyword values of calls)")
            if type(node.value) not in (int, float, bool) and node.value is not None:
                raise _Refusal(node, "kernel-expressions", _src(node))
            return "value"
        if isinstance(node, ast.Name):
            return self._name(node)
        if isinstance(node, ast.Attribute):
            q = self._qual(node)
            if q is not None:
                kind = _tl_member(q)
                if kind is None:
                    raise _Refusal(node, "kernel-attributes", f"{_src(node)} (not in triton.language's public API)")
                return "callable" if kind == "function" else kind
            if self._expr(node.value) == "module" or node.attr not in TENSOR_ATTRS:
                raise _Refusal(node, "kernel-attributes", f"{_src(node)} (not a tl.tensor method or dtype query)")
            return "value"
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.BinOp | ast.UnaryOp | ast.BoolOp | ast.Compare | ast.IfExp | ast.Tuple | ast.List):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self._value(child)
            return "value"
        if isinstance(node, ast.Subscript):
            self._value(node.value)
            for e in node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]:
                plain = isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None
                const = isinstance(e, ast.Constant) and (e.value is None or type(e.value) is int)
                if not (plain or const):
                    raise _Refusal(node, "kernel-subscripts", f"{_src(node)} (index with `:`, None or an int only)")
            return "value"
        raise _Refusal(node, "kernel-expressions", f"{type(node).__name__} ({_src(node, 40)[1:-1]})")

    def _qual(self, node: ast.expr) -> str | None:
        """The qualified name of an attribute chain rooted at an imported module (not at a local)."""
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name) or root.id in self.locals:
            return None
        return self.mod.qual(node)

    def _value(self, node: ast.expr) -> None:
        kind = self._expr(node)
        if kind == "module" or (kind == "callable" and not (isinstance(node, ast.Name) and node.id in self.mod.kernels)):
            raise _Refusal(node, "kernel-names", f"{_src(node)} used as a value (it may only be called)")

    def _name(self, node: ast.Name) -> str:
        n = node.id
        if n in self.locals:
            return "value"
        q = self.mod.quals.get(n)
        if q is not None:
            kind = _tl_member(q)
            if kind is not None:
                return "callable" if kind == "function" else kind
        elif n in self.mod.kernels:
            return "callable"
        elif n in self.mod.constants:
            return "value"
        elif n in BUILTINS:
            return "callable"
        raise _Refusal(node, "kernel-names", f"`{n}` (not a parameter, a local, tl, a kernel, a literal constant, "
                                             "range or float)")

    def _call(self, node: ast.Call) -> str:
        f = node.func
        if isinstance(f, ast.Name) and f.id == "float" and "float" not in self.locals and f.id not in self.mod.quals:
            arg = node.args[0] if len(node.args) == 1 and not node.keywords else None
            if not (isinstance(arg, ast.Constant) and arg.value in FLOAT_STRINGS):
                raise _Refusal(node, "kernel-calls", f"{_src(node)} (float only of 'inf', '-inf' or 'nan': float of "
                                                     "a block reads its value on the host)")
            return "value"
        tensor_method = isinstance(f, ast.Attribute) and self._qual(f) is None
        if self._expr(f) != "callable" and not tensor_method:
            raise _Refusal(node, "kernel-calls", f"{_src(node)} (call tl functions, tensor methods or kernels only)")
        asserting = isinstance(f, ast.Attribute) and f.attr in ("static_assert", "device_assert")
        for i, a in enumerate(node.args):
            if isinstance(a, ast.Starred):
                raise _Refusal(node, "kernel-expressions", f"{_src(node)} (no `*` arguments)")
            if asserting and i == 1 and isinstance(a, ast.Constant) and isinstance(a.value, str):
                self._string(a)
            else:
                self._value(a)
        for k in node.keywords:
            if k.arg is None:
                raise _Refusal(node, "kernel-expressions", f"{_src(node)} (no `**` arguments)")
            if isinstance(k.value, ast.Constant) and isinstance(k.value.value, str):
                self._string(k.value)
            else:
                self._value(k.value)
        return "value"


_LINES = re.compile(r"\r\n|\r|\n")  # the tokenizer's (and linecache's universal-newline) line breaks


def _def_like(piece: str) -> bool:
    s = piece.strip()
    return s.startswith("def") and (len(s) == 3 or not (s[3].isalnum() or s[3] == "_"))


def _source_lines(fn: ast.FunctionDef, lines: list[str]) -> list[_Refusal]:
    """kernel-source: the interpreter's `_find_def` and the compiler's `^def\\s+` must both find `fn`'s own line."""
    start = min([d.lineno for d in fn.decorator_list] + [fn.lineno])
    out = []
    for no in range(start, (fn.end_lineno or fn.lineno) + 1):
        line = lines[no - 1] if no - 1 < len(lines) else ""
        pieces = line.splitlines() or [line]  # finer than the interpreter's split: conservative
        if no == fn.lineno:
            if not line.strip().startswith("def ") or any(_def_like(p) for p in pieces[1:]):
                out.append(_Refusal(fn, "kernel-source", f"the line of `def {fn.name}` (write `def {fn.name}(...)` "
                                                         "on a line of its own)"))
        elif any(_def_like(p) for p in pieces):
            out.append(_Refusal(type("N", (), {"lineno": no})(), "kernel-source",
                                f"a second line starting with `def` inside kernel {fn.name}"))
    return out


def kernel_refusals(tree: ast.Module, source: str) -> list[_Refusal]:
    mod = _Module(tree)
    lines = _LINES.split(source)
    out: list[_Refusal] = []
    for fn in mod.kernels.values():
        out += _source_lines(fn, lines)
        for d in fn.decorator_list:  # decorators are host code, but their strings are in the lines the
            for c in ast.walk(d):    # interpreter and the compiler re-read
                if isinstance(c, ast.Constant) and isinstance(c.value, str) and any(ch in c.value for ch in _BREAKS):
                    out.append(_Refusal(c, "kernel-strings", f"a string with a line break in a decorator of {fn.name}"))
        out += _Kernel(mod, fn).run()
    return out


def check_kernel_language(tree: ast.Module, source: str) -> Check:
    """Refusals of every @triton.jit body of `tree` against the kernel language (see the module docstring)."""
    # Rationale: under the interpreter a kernel body is Python with numpy and inspect in its globals: allow-list it.
    refusals = kernel_refusals(tree, source)
    if not refusals:
        return Check(True, "kernel bodies are in the kernel language")
    seen: dict = {}
    for r in refusals:
        seen.setdefault((r.line, r.rule), r)
    items = sorted(seen.values(), key=lambda r: r.line)
    lines = [f"line {r.line}: {r.what} is outside the kernel language (rule: {r.rule})" for r in items[:3]]
    lines[0] += f" [{RULES[items[0].rule]}]"
    more = f" (and {len(items) - 3} more)" if len(items) > 3 else ""
    return Check(False, "; ".join(lines) + more + f"; {HINT}")
