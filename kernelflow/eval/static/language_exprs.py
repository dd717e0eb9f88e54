"""Expressions of the submission language (`static/language.py`): what a host expression may be, and its kind.

`Expressions` is the half of the walker (`static/language_host.Host`) that judges one expression and
returns its kind: `"tensor"`, `"value"`, `"meta"` (a lambda's dict parameter) or a callable kind that
only a call accepts (`mod:<name>`, `tmethod:`, `builtin:`, `helper:`, `method:`, `op:`, `exc:`, `super`,
`kernel`). A kernel is accepted only as `kernel[grid](...)`; a tensor never as an operand, truth value,
index or builtin argument. `Refusal` and `Scope` live here because both halves use them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from kernelflow.eval.static import language as T

_EXPR_NAMES = {ast.NamedExpr: "`:=`", ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield from"}
_FIRST_CLASS = ("tensor", "value", "meta")


class Refusal(Exception):
    """One node outside the language: its rule and what to say about it."""

    def __init__(self, node: ast.AST, rule: str, what: str):
        super().__init__(what)
        self.line, self.rule, self.what = getattr(node, "lineno", 0), rule, what


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _src(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node).replace("\n", " ")
    return f"`{text if len(text) <= limit else text[: limit - 3] + '...'}`"


@dataclass
class Scope:
    """What one host function (or lambda) sees: its locals, which of them hold tensors, where it is."""

    key: str = ""  # "helper" / "ModelNew.forward": the function taint and returns are recorded under
    locals: set[str] = field(default_factory=set)
    tensors: set[str] = field(default_factory=set)
    params: set[str] = field(default_factory=set)  # lambda parameters: the `meta` / `args` dicts
    method: str | None = None  # the ModelNew method, None in helpers and at module level
    annotation: bool = False

    def child(self, **changes) -> Scope:
        s = Scope(self.key, set(self.locals), set(self.tensors), set(self.params), self.method, self.annotation)
        for k, v in changes.items():
            setattr(s, k, v)
        return s


class Expressions:
    """Judges host expressions; the attributes it reads are set by `Host`."""

    modules: dict[str, str]
    constants: set[str]
    kernels: dict[str, ast.FunctionDef]
    helpers: dict[str, ast.FunctionDef]
    methods: dict[str, ast.FunctionDef]
    taint: dict[str, set[str]]
    returns_tensor: set[str]
    self_tensors: set[str]
    self_ops: set[str]
    allowed_ops: frozenset[str]

    def _value(self, node: ast.expr, sc: Scope) -> str:
        """The kind of an expression used as a value: a tensor, a value or a lambda's meta dict."""
        kind = self._expr(node, sc)
        if kind in _FIRST_CLASS or (sc.annotation and kind.startswith("mod:")):
            return kind
        if kind == "kernel":
            raise Refusal(node, "kernel-use", f"{_src(node)} used as a value (launch it: `{_src(node)[1:-1]}[grid](...)`)")
        raise Refusal(node, "host-names", f"{_src(node)} used as a value (it may only be called)")

    def _expr(self, node: ast.expr, sc: Scope) -> str:
        if isinstance(node, ast.Constant):
            return "value"
        if isinstance(node, ast.Name):
            return self._name(node, sc)
        if isinstance(node, ast.Attribute):
            return self._attribute(node, sc)
        if isinstance(node, ast.Call):
            return self._call(node, sc)
        if isinstance(node, ast.Subscript):
            return self._subscript(node, sc)
        if isinstance(node, ast.BinOp | ast.UnaryOp | ast.BoolOp | ast.Compare):
            parts = {ast.BinOp: lambda n: [n.left, n.right], ast.UnaryOp: lambda n: [n.operand],
                     ast.BoolOp: lambda n: n.values, ast.Compare: lambda n: [n.left, *n.comparators]}[type(node)](node)
            kinds = [self._value(p, sc) for p in parts]
            identity = isinstance(node, ast.Compare) and all(isinstance(o, ast.Is | ast.IsNot) for o in node.ops)
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) or "tensor" in kinds and not identity:
                raise Refusal(node, "tensor-values", f"{_src(node)} (computes on a tensor in Python; do it in a kernel)")
            return "value"
        if isinstance(node, ast.IfExp):
            if self._value(node.test, sc) == "tensor":
                raise Refusal(node, "tensor-values", f"the truth test {_src(node.test)} (reads a tensor's values)")
            return self._join([self._value(node.body, sc), self._value(node.orelse, sc)])
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return self._join([self._value(e, sc) for e in node.elts])
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise Refusal(node, "host-statements", f"{_src(node)} (`**` in a dict)")
            return self._join([self._value(e, sc) for e in [*node.keys, *node.values]])
        if isinstance(node, ast.Starred):
            return self._value(node.value, sc)
        if isinstance(node, ast.Slice):
            for part in (node.lower, node.upper, node.step):
                if part is not None and self._value(part, sc) == "tensor":
                    raise Refusal(node, "tensor-values", f"{_src(node)} (a tensor as a slice bound)")
            return "value"
        if isinstance(node, ast.JoinedStr | ast.FormattedValue):
            parts = node.values if isinstance(node, ast.JoinedStr) else [node.value, node.format_spec]
            for p in parts:
                if p is not None and self._value(p, sc) == "tensor":
                    raise Refusal(node, "tensor-values", f"{_src(node)} (formats a tensor's values)")
            return "value"
        if isinstance(node, ast.Lambda):
            return self._lambda(node, sc)
        if isinstance(node, ast.ListComp | ast.GeneratorExp | ast.SetComp):
            inner = sc.child()
            for gen in node.generators:
                if gen.is_async or self._value(gen.iter, inner) == "tensor":
                    raise Refusal(node, "loops", f"{_src(node)} (iterates over a tensor's values)")
                for t in ast.walk(gen.target):
                    if isinstance(t, ast.Name):
                        inner.locals.add(t.id)
                        inner.tensors.discard(t.id)
                    elif not isinstance(t, ast.Tuple | ast.List | ast.Store):
                        raise Refusal(node, "assign-targets", f"{_src(gen.target)} as a comprehension target")
                for cond in gen.ifs:
                    if self._value(cond, inner) == "tensor":
                        raise Refusal(cond, "tensor-values", f"the truth test {_src(cond)} (reads a tensor's values)")
            return self._value(node.elt, inner)
        what = _EXPR_NAMES.get(type(node), type(node).__name__)
        raise Refusal(node, "host-statements", f"{what} ({_src(node, 40)[1:-1]})")

    def _op_prefix(self, q: str) -> bool:
        """Whether `q` is a module on the way to one of the task's allowed ops (`torch.nn.functional`)."""
        return any(op.startswith(q + ".") for op in self.allowed_ops)

    @staticmethod
    def _join(kinds: list[str]) -> str:
        return "tensor" if "tensor" in kinds else "value"

    def _name(self, node: ast.Name, sc: Scope) -> str:
        n = node.id
        if _dunder(n):
            raise Refusal(node, "dunders", f"`{n}`")
        if sc.annotation and n in T.ANNOTATION_NAMES:
            return "value"  # `n: int`: a type named, not called
        if n in sc.params:
            return "meta"
        if n in sc.locals:
            return "tensor" if n in sc.tensors else "value"
        if n == "self" and sc.method:
            return "self"
        if n in self.modules:
            q = self.modules[n]
            return "value" if q in T.MODULE_VALUES else f"mod:{q}"
        if n in self.constants:
            return "value"
        if n in self.kernels:
            return "kernel"
        if n in self.helpers:
            return f"helper:{n}"
        if n in T.BUILTIN_CALLS:
            return f"builtin:{n}"
        if n in T.RAISABLE:
            return f"exc:{n}"
        if n == "super" or (n == "ModelNew" and sc.method):
            return n
        raise Refusal(node, "host-names", f"`{n}` (neither a local, a constant, an allowed module nor a table builtin)")

    def _attribute(self, node: ast.Attribute, sc: Scope) -> str:
        base = self._expr(node.value, sc)
        if base == "super" and node.attr == "__init__":
            return "superinit"
        if _dunder(node.attr):
            raise Refusal(node, "dunders", _src(node))
        if base == "kernel":
            raise Refusal(node, "kernel-use", f"{_src(node)} (a kernel is only launched, `kernel[grid](...)`)")
        if base.startswith("mod:"):
            q = f"{base[4:]}.{node.attr}"
            if q in T.MODULE_VALUES:
                return "value"
            if q in T.MODULES or q in T.MODULE_CALLS or q in T.KERNEL_DECORATORS or q in self.allowed_ops \
                    or self._op_prefix(q):
                return f"mod:{q}"
        elif base == "self":
            if node.attr in self.methods:
                return f"method:{node.attr}"
            if node.attr in self.self_ops:
                return f"op:{node.attr}"
            return "tensor" if node.attr in self.self_tensors else "value"
        elif base.startswith("op:") and node.attr in ("weight", "bias"):
            return "tensor"
        elif base in ("tensor", "value"):
            if node.attr in T.TENSOR_ATTRS:
                return "value"
            if node.attr in T.TENSOR_METHODS:
                return f"tmethod:{node.attr}"
        raise Refusal(node, "host-attributes", _src(node))

    def _subscript(self, node: ast.Subscript, sc: Scope) -> str:
        if isinstance(node.value, ast.Name) and node.value.id in self.kernels and node.value.id not in sc.locals:
            raise Refusal(node, "kernel-use", f"{_src(node)} not called (launch: `kernel[grid](...)`)")
        base = self._value(node.value, sc)
        if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            if base != "meta":
                raise Refusal(node, "string-subscripts", f"{_src(node)} (string keys only on a grid lambda's meta)")
            return "value"
        if self._value(node.slice, sc) == "tensor":
            raise Refusal(node, "tensor-values", f"{_src(node)} (indexing with a tensor gathers values)")
        return "tensor" if base == "tensor" else "value"

    def _lambda(self, node: ast.Lambda, sc: Scope) -> str:
        a = node.args
        names = [x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]]
        if a.vararg or a.kwarg or a.defaults or any(d is not None for d in a.kw_defaults):
            raise Refusal(node, "host-statements", f"{_src(node)} (a lambda takes plain parameters only)")
        for x in names:
            if _dunder(x):
                raise Refusal(node, "dunders", f"lambda parameter `{x}`")
        inner = sc.child(params=sc.params | set(names), locals=sc.locals - set(names))
        self._value(node.body, inner)
        return "value"

    def _call(self, node: ast.Call, sc: Scope) -> str:
        f = node.func
        if isinstance(f, ast.Subscript) and isinstance(f.value, ast.Name) and f.value.id in self.kernels \
                and f.value.id not in sc.locals:
            if self._value(f.slice, sc) == "tensor":
                raise Refusal(node, "tensor-values", f"{_src(f)} (a tensor as a grid)")
            self._arguments(node, sc)
            return "value"  # a launch
        if isinstance(f, ast.Name) and f.id == "super" and sc.method:
            ok = not node.keywords and ([ast.unparse(a) for a in node.args] in ([], ["ModelNew", "self"]))
            if not ok:
                raise Refusal(node, "host-calls", f"{_src(node)} (write `super().__init__()`)")
            return "super"
        try:
            kind = self._expr(f, sc)
        except Refusal as r:
            if r.rule == "host-attributes" and r.line == getattr(f, "lineno", 0) and isinstance(f, ast.Attribute):
                raise Refusal(node, "host-calls", _src(node)) from None
            raise
        tensors = self._arguments(node, sc)
        if kind == "superinit":
            if sc.method != "__init__":
                raise Refusal(node, "host-calls", f"{_src(node)} outside __init__")
            return "value"
        if kind.startswith("mod:"):
            q = kind[4:]
            if q in self.allowed_ops:
                return "tensor"  # the task declares this op allowed (Task.allowed_ops)
            if q in T.MODULE_CALLS:
                like = q.endswith("_like") or q == "torch.nn.Parameter"
                if tensors and not (like and tensors == [0]):
                    raise Refusal(node, "tensor-values", f"{_src(node)} (a tensor as an argument of {q})")
                return T.MODULE_CALLS[q][0]
            if q in T.KERNEL_DECORATORS:
                raise Refusal(node, "kernel-use", f"{_src(node)} ({q} is only a decorator of a kernel)")
        elif kind.startswith("tmethod:"):
            m = kind[8:]
            if tensors and m not in ("view_as", "expand_as"):
                raise Refusal(node, "tensor-values", f"{_src(node)} (a tensor as an argument of .{m}())")
            return T.TENSOR_METHODS[m][0]
        elif kind.startswith("builtin:"):
            if tensors and kind != "builtin:len":
                raise Refusal(node, "tensor-values", f"{_src(node)} (reads a tensor's values in Python)")
            return "value"
        elif kind.startswith(("helper:", "method:")):
            name = kind.split(":", 1)[1]
            fn = self.helpers[name] if kind.startswith("helper:") else self.methods[name]
            key = name if kind.startswith("helper:") else f"ModelNew.{name}"
            params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]][kind.startswith("method:"):]
            for i in tensors:
                target = params[i] if isinstance(i, int) and i < len(params) else i if isinstance(i, str) else None
                if target is None:  # a tensor into *args: taint every parameter
                    self.taint.setdefault(key, set()).update(a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg))
                else:
                    self.taint.setdefault(key, set()).add(target)
            return "tensor" if key in self.returns_tensor else "value"
        elif kind.startswith("op:"):
            return "tensor"
        elif kind == "kernel":
            raise Refusal(node, "kernel-use", f"{_src(node)} calls a kernel directly (launch it: `kernel[grid](...)`)")
        raise Refusal(node, "host-calls", _src(node))

    def _arguments(self, node: ast.Call, sc: Scope) -> list:
        """Judge a call's arguments; the positions (ints) and keywords (names) that hold tensors."""
        tensors: list = []
        for i, a in enumerate(node.args):
            if self._value(a, sc) == "tensor":
                tensors.append(i if not isinstance(a, ast.Starred) else None)
        for k in node.keywords:
            if self._value(k.value, sc) == "tensor":
                tensors.append(k.arg)
        return tensors
