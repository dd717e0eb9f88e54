"""The walker of the submission language (`static/language.py`): module, class, statements, expressions.

`Host(tree, allowed_ops).run()` returns every `Refusal` (rule, line, what) of a module. Expressions
are given a kind: `"tensor"` (a value a kernel may read but host code may not compute on), `"value"`
(a number, shape, dtype, config), `"meta"` (a lambda's `meta` / `args` parameter), or a callable kind
(`mod:<qualified name>`, `tmethod:`, `builtin:`, `helper:`, `method:`, `op:`, `exc:`, `kernel`) that is
only accepted where it is called, or launched for a kernel. Names are resolved through import aliases
only: a module or a kernel can never be bound to another name, passed or stored, so a chain like
`torch.nn.init.torch.relu` or `k = kernel; k.fn(...)` has nothing to hide behind.

The walk is repeated until tensor taint stops growing (a helper learns its parameter holds a tensor
from a call site; `self.w` from `__init__`): the taint only grows and is bounded by the number of
parameters, functions and self attributes, so a fixed point is reached within that many passes (plus
one); refusals come from the last pass, and a walk that did not converge is refused (rule: tensor-values).
Before the walk, `_lambda_rules` places lambdas (a launch grid, a name bound to one that is only launched
with, a `triton.heuristics` value whose body computes from `args[...]`) and default arguments (literals).
What it does not judge: kernel bodies (skipped, see `static/kernel_checks.py`).
"""

from __future__ import annotations

import ast

from kernelflow.eval.static import language as T
from kernelflow.eval.static.language_exprs import Expressions, Refusal, Scope, _dunder, _src


def _literal(node: ast.expr) -> bool:
    """A default argument a wrapper needs: a number, a string, None, a bool, a negation or tuple of those."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        node = node.operand
    if isinstance(node, ast.Tuple):
        return all(_literal(e) for e in node.elts)
    return isinstance(node, ast.Constant) and type(node.value) in (int, float, bool, str, type(None))

_SIZE_CALLS = {"triton.cdiv", "triton.next_power_of_2", "min", "max", "int", "bool", "abs"}
_STMT_NAMES = {ast.With: "with", ast.AsyncWith: "async with", ast.Try: "try", ast.While: "while",
               ast.Global: "global", ast.Nonlocal: "nonlocal", ast.Delete: "del", ast.ClassDef: "a nested class",
               ast.FunctionDef: "a nested def", ast.AsyncFunctionDef: "async def", ast.AsyncFor: "async for",
               ast.Import: "import inside a function", ast.ImportFrom: "import inside a function"}
for _name, _what in (("Match", "match"), ("TryStar", "try")):
    if hasattr(ast, _name):
        _STMT_NAMES[getattr(ast, _name)] = _what
class Host(Expressions):
    def __init__(self, tree: ast.Module, allowed_ops: frozenset[str]):
        self.tree, self.allowed_ops = tree, allowed_ops
        self.modules: dict[str, str] = {}  # local name -> qualified module or member it imports
        self.constants: set[str] = set()
        self.kernels: dict[str, ast.FunctionDef] = {}
        self.helpers: dict[str, ast.FunctionDef] = {}
        self.methods: dict[str, ast.FunctionDef] = {}
        self.taint: dict[str, set[str]] = {}  # function key -> parameters that receive a tensor
        self.returns_tensor: set[str] = set()
        self.self_tensors: set[str] = set()
        self.self_ops: set[str] = set()  # self.attr holding an instance of a task's allowed op (a layer)
        self.refusals: list[Refusal] = []
        self.kernel_count = 0

    # ---- driver --------------------------------------------------------------------------------
    def run(self) -> list[Refusal]:
        self._collect()
        placed = self._lambda_rules()
        every = [f for f in [*self.helpers.values(), *self.methods.values()]]
        bound = 2 + len(every) + sum(len(f.args.args) + len(f.args.kwonlyargs) + 2 for f in every) \
            + sum(isinstance(n, ast.Attribute) for n in ast.walk(self.tree))  # every taint fact, once
        converged = False
        for _ in range(bound):
            before = self._state()
            self.refusals, self.kernel_count = [], 0
            for stmt in self.tree.body:
                self._guard(self._top, stmt)
            if self._state() == before:
                converged = True
                break
        if not converged:  # unreachable while taint only grows; refuse rather than judge a partial walk
            self.refusals.append(Refusal(self.tree.body[0] if self.tree.body else self.tree, "tensor-values",
                                         "the tensor tracking did not converge"))
        return placed + self.refusals

    def _lambda_rules(self) -> list[Refusal]:
        """Lambdas only where a wrapper needs them; default arguments only literals (red team round 2a)."""
        out: list[Refusal] = []
        allowed: set[int] = set()
        for n in ast.walk(self.tree):
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in self.kernels:
                allowed.add(id(n.slice))  # kernel[lambda meta: ...] or kernel[grid]
            if isinstance(n, ast.arguments):
                for d in [*n.defaults, *(d for d in n.kw_defaults if d is not None)]:
                    if not _literal(d):
                        out.append(Refusal(d, "defaults", f"the default argument {_src(d)} (literals only)"))
        for fn in self.kernels.values():
            for d in fn.decorator_list:
                if isinstance(d, ast.Call) and self._qual(d.func) == "triton.heuristics":
                    constexprs = {a.arg for a in [*fn.args.args, *fn.args.kwonlyargs]
                                  if (isinstance(a.annotation, ast.Attribute) and a.annotation.attr == "constexpr")
                                  or (isinstance(a.annotation, ast.Name) and a.annotation.id == "constexpr")}
                    for arg in d.args:
                        for k, v in zip(arg.keys, arg.values, strict=True) if isinstance(arg, ast.Dict) else []:
                            # a heuristics value is a meta-parameter: it may only fill a tl.constexpr parameter,
                            # never a pointer (red team round 3: tensor arithmetic fed into a pointer argument)
                            if not (isinstance(k, ast.Constant) and k.value in constexprs):
                                out.append(Refusal(k or v, "lambdas", f"the heuristics key {_src(k) if k else '**'} "
                                                   f"(it must name a tl.constexpr parameter of {fn.name})"))
                            if isinstance(v, ast.Lambda):
                                allowed.add(id(v))
                                out += self._heuristic(v)
        for fn in [*self.helpers.values(), *self.methods.values()]:
            grids = {t.id for s in ast.walk(fn) if isinstance(s, ast.Assign) and isinstance(s.value, ast.Lambda)
                     for t in s.targets if isinstance(t, ast.Name)}
            for s in ast.walk(fn):
                if isinstance(s, ast.Assign) and isinstance(s.value, ast.Lambda) and len(s.targets) == 1 \
                        and isinstance(s.targets[0], ast.Name):
                    allowed.add(id(s.value))
                elif isinstance(s, ast.Name) and s.id in grids and isinstance(s.ctx, ast.Load) and id(s) not in allowed:
                    out.append(Refusal(s, "lambdas", f"`{s.id}` (a grid lambda) used other than as `kernel[{s.id}]`"))
        for n in ast.walk(self.tree):
            if isinstance(n, ast.Lambda) and id(n) not in allowed:
                out.append(Refusal(n, "lambdas", f"{_src(n)} (a lambda is a launch grid or a heuristics value only)"))
        return out

    def _heuristic(self, lam: ast.Lambda) -> list[Refusal]:
        """A heuristics value computes a number from `args[...]`; a bare `args[k]` passes an argument through."""
        params = {a.arg for a in lam.args.args}

        def ok(node: ast.expr, result: bool) -> bool:
            if isinstance(node, ast.Constant):
                return type(node.value) in (int, float, bool)
            if isinstance(node, ast.Subscript):
                return not result and isinstance(node.value, ast.Name) and node.value.id in params \
                    and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)
            if isinstance(node, ast.Name):
                return node.id in self.constants
            if isinstance(node, ast.IfExp):
                return ok(node.test, False) and ok(node.body, result) and ok(node.orelse, result)
            if isinstance(node, ast.BinOp | ast.UnaryOp | ast.BoolOp | ast.Compare):
                return all(ok(c, False) for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr))
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else self._qual(node.func)
                return (name in _SIZE_CALLS or (name or "").startswith("math.")) and not node.keywords \
                    and all(ok(a, False) for a in node.args)
            return False

        if ok(lam.body, True):
            return []
        return [Refusal(lam, "lambdas", f"{_src(lam)} (a heuristics value is arithmetic on args[...], not an "
                                        "argument passed through)")]

    def _state(self):
        return (sorted((k, sorted(v)) for k, v in self.taint.items()), sorted(self.returns_tensor),
                sorted(self.self_tensors), sorted(self.self_ops))

    def _guard(self, fn, *args) -> None:
        try:
            fn(*args)
        except Refusal as r:
            self.refusals.append(r)

    def _collect(self) -> None:
        for n in self.tree.body:
            if isinstance(n, ast.Import):
                for a in n.names:
                    self.modules[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                for a in n.names:
                    self.modules[a.asname or a.name] = f"{n.module}.{a.name}"
            elif isinstance(n, ast.FunctionDef):
                (self.kernels if self._is_kernel(n) else self.helpers)[n.name] = n
            elif isinstance(n, ast.ClassDef) and n.name == "ModelNew":
                self.methods = {f.name: f for f in n.body if isinstance(f, ast.FunctionDef)}
            elif isinstance(n, ast.Assign | ast.AnnAssign):
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    self.constants |= {x.id for x in ast.walk(t) if isinstance(x, ast.Name)}

    def _qual(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.modules.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._qual(node.value)
            return base and f"{base}.{node.attr}"
        return None

    def _is_kernel(self, n: ast.FunctionDef) -> bool:
        return any(self._qual(d.func if isinstance(d, ast.Call) else d) == "triton.jit" for d in n.decorator_list)

    # ---- module level ----------------------------------------------------------------------------
    def _top(self, n: ast.stmt) -> None:
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str):
            return  # a docstring
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.name not in T.MODULES and not self._op_prefix(a.name):
                    raise Refusal(n, "imports", f"`import {a.name}`")
        elif isinstance(n, ast.ImportFrom):
            for a in n.names:
                full = f"{n.module}.{a.name}"
                known = full in T.MODULES or full in T.MODULE_CALLS or full in T.MODULE_VALUES \
                    or full in T.KERNEL_DECORATORS or full in self.allowed_ops
                known = known or self._op_prefix(full)
                if n.level or not (n.module in T.MODULES or self._op_prefix(n.module)) or a.name == "*" or not known:
                    raise Refusal(n, "imports", f"`from {'.' * n.level}{n.module or ''} import {a.name}`")
        elif isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None:
            scope = Scope()
            if isinstance(n, ast.AnnAssign):
                self._value(n.annotation, scope.child(annotation=True))
            for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                for x in [t, *(t.elts if isinstance(t, ast.Tuple | ast.List) else [])]:
                    if not isinstance(x, ast.Name | ast.Tuple | ast.List):
                        raise Refusal(n, "assign-targets", f"{_src(x)} = ...")
                    if isinstance(x, ast.Name):
                        self._reserved(x.id, x, scope)
            if self._value(n.value, scope) == "tensor":
                raise Refusal(n, "module-constants", f"{_src(n)} (a module-level tensor)")
        elif isinstance(n, ast.FunctionDef):
            self._function(n)
        elif isinstance(n, ast.ClassDef):
            self._class(n)
        elif isinstance(n, ast.If):
            raise Refusal(n, "module-statements", f"`if {_src(n.test)[1:-1]}:` at module level (no testing code)")
        else:
            raise Refusal(n, "module-statements", f"{_src(n)} at module level")

    def _signature(self, fn: ast.FunctionDef, scope: Scope) -> list[str]:
        args = fn.args
        every = [*args.posonlyargs, *args.args, *([args.vararg] if args.vararg else []), *args.kwonlyargs,
                 *([args.kwarg] if args.kwarg else [])]
        for a in every:
            if _dunder(a.arg):
                raise Refusal(fn, "dunders", f"parameter `{a.arg}`")
            if a.annotation is not None:
                self._value(a.annotation, scope.child(annotation=True))
        for d in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            self._value(d, Scope())
        if fn.returns is not None:
            self._value(fn.returns, scope.child(annotation=True))
        return [a.arg for a in every]

    def _function(self, fn: ast.FunctionDef) -> None:
        if _dunder(fn.name):
            raise Refusal(fn, "dunders", f"`def {fn.name}`")
        if fn.name in self.kernels:
            for i, d in enumerate(fn.decorator_list):
                q = self._qual(d.func if isinstance(d, ast.Call) else d)
                if q not in T.KERNEL_DECORATORS or (q == "triton.jit") != (i == len(fn.decorator_list) - 1):
                    raise Refusal(d, "decorators", f"`@{_src(d)[1:-1]}` on kernel {fn.name} (only "
                                  "@triton.heuristics / @triton.autotune above an innermost @triton.jit)")
                if isinstance(d, ast.Call):
                    self._arguments(d, Scope())  # configs, keys, hooks and heuristics lambdas are host code
            self._signature(fn, Scope())
            self.kernel_count += 1
            return  # the body is Triton, judged by the kernel checks
        if fn.decorator_list:
            raise Refusal(fn.decorator_list[0], "decorators", f"`@{_src(fn.decorator_list[0])[1:-1]}` on {fn.name}")
        params = self._signature(fn, Scope())
        scope = Scope(key=fn.name, locals=set(params), tensors=set(self.taint.get(fn.name, ())))
        self._body(fn.body, scope)

    def _class(self, c: ast.ClassDef) -> None:
        bases = [self._qual(b) for b in c.bases]
        if c.name != "ModelNew" or bases != ["torch.nn.Module"] or c.keywords or c.decorator_list:
            raise Refusal(c, "model-class", f"`class {c.name}({', '.join(ast.unparse(b) for b in c.bases)})` "
                          "(the one class is `class ModelNew(nn.Module)`, undecorated)")
        # __init__ first: it sets the self attributes (and their taint) the other methods read
        body = sorted(c.body, key=lambda s: not (isinstance(s, ast.FunctionDef) and s.name == "__init__"))
        for s in body:
            self._guard(self._method, s)

    def _method(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
            return
        if not isinstance(s, ast.FunctionDef):
            raise Refusal(s, "model-class", f"{_src(s)} in ModelNew's body (only methods)")
        if _dunder(s.name) and s.name != "__init__":
            raise Refusal(s, "dunders", f"`def {s.name}`")
        if s.decorator_list:
            raise Refusal(s, "decorators", f"`@{_src(s.decorator_list[0])[1:-1]}` on ModelNew.{s.name}")
        key = f"ModelNew.{s.name}"
        params = self._signature(s, Scope(method=s.name))
        if not params or params[0] != "self":
            raise Refusal(s, "model-class", f"ModelNew.{s.name} without `self` as its first parameter")
        tensors = set(params[1:]) if s.name == "forward" else set(self.taint.get(key, ()))
        self._body(s.body, Scope(key=key, locals=set(params[1:]), tensors=tensors, method=s.name))


    # ---- statements in host functions ------------------------------------------------------------
    def _body(self, stmts: list[ast.stmt], scope: Scope) -> None:
        for s in stmts:
            self._guard(self._stmt, s, scope)

    def _stmt(self, s: ast.stmt, sc: Scope) -> None:
        if isinstance(s, ast.Expr):
            if not (isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)):
                self._value(s.value, sc)
        elif isinstance(s, ast.Pass):
            pass
        elif isinstance(s, ast.Return):
            if s.value is not None and self._value(s.value, sc) == "tensor":
                self.returns_tensor.add(sc.key)
        elif isinstance(s, ast.Assign):
            try:
                kind = self._value(s.value, sc)
            except Refusal:
                for t in s.targets:  # bind the names anyway: one refusal, not one per later use
                    sc.locals |= {x.id for x in ast.walk(t) if isinstance(x, ast.Name)}
                raise
            for t in s.targets:
                self._target(t, kind, s.value, sc)
        elif isinstance(s, ast.AnnAssign):
            self._value(s.annotation, sc.child(annotation=True))
            if s.value is not None:
                self._target(s.target, self._value(s.value, sc), s.value, sc)
        elif isinstance(s, ast.AugAssign):
            if not isinstance(s.target, ast.Name) or s.target.id not in sc.locals:
                rule = "state" if isinstance(s.target, ast.Attribute) else "assign-targets"
                raise Refusal(s, rule, f"{_src(s)} (augment a local name only)")
            if self._value(s.value, sc) == "tensor" or s.target.id in sc.tensors:
                raise Refusal(s, "tensor-values", f"{_src(s)} (computes on a tensor in Python)")
        elif isinstance(s, ast.If):
            self._test(s.test, sc)
            self._body(s.body, sc)
            self._body(s.orelse, sc)
        elif isinstance(s, ast.For):
            if s.orelse:
                raise Refusal(s, "host-statements", "`for ... else`")
            if self._value(s.iter, sc) == "tensor":
                raise Refusal(s, "loops", f"`for ... in {_src(s.iter)[1:-1]}` (iterates over a tensor's values)")
            self._target(s.target, "value", None, sc)
            self._body(s.body, sc)
        elif isinstance(s, ast.Assert):
            self._test(s.test, sc)
            if s.msg is not None:
                self._value(s.msg, sc)
        elif isinstance(s, ast.Raise):
            exc = s.exc.func if isinstance(s.exc, ast.Call) else s.exc
            if s.cause is not None or not isinstance(exc, ast.Name) or exc.id not in T.RAISABLE \
                    or exc.id in sc.locals or exc.id in self.modules:
                raise Refusal(s, "host-statements", f"{_src(s)} (raise only {', '.join(sorted(T.RAISABLE))})")
            if isinstance(s.exc, ast.Call):
                for a in [*s.exc.args, *(k.value for k in s.exc.keywords)]:
                    if self._value(a, sc) == "tensor":
                        raise Refusal(s, "tensor-values", f"{_src(s)} (a tensor in an exception)")
        else:
            what = _STMT_NAMES.get(type(s), type(s).__name__)
            raise Refusal(s, "host-statements", f"`{what}` ({_src(s, 40)[1:-1]})")

    def _test(self, node: ast.expr, sc: Scope) -> None:
        if self._value(node, sc) == "tensor":
            raise Refusal(node, "tensor-values", f"the truth test {_src(node)} (reads a tensor's values)")

    def _reserved(self, name: str, node: ast.AST, sc: Scope) -> None:
        if _dunder(name):
            raise Refusal(node, "dunders", f"`{name} = ...`")
        if name in self.modules or name in self.kernels or name in self.helpers or name in T.BUILTIN_CALLS \
                or name in T.RAISABLE or name in ("self", "super", "ModelNew"):
            raise Refusal(node, "host-names", f"`{name} = ...` (rebinds a name the language reserves)")

    def _target(self, t: ast.expr, kind: str, value: ast.expr | None, sc: Scope) -> None:
        if isinstance(t, ast.Name):
            self._reserved(t.id, t, sc)
            sc.locals.add(t.id)
            (sc.tensors.add if kind == "tensor" else sc.tensors.discard)(t.id)
        elif isinstance(t, ast.Tuple | ast.List):
            pairs = isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(t.elts)
            for i, e in enumerate(t.elts):
                sub = value.elts[i] if pairs else None
                self._target(e, self._value(sub, sc) if sub is not None else kind, sub, sc)
        elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" and sc.method:
            if sc.method != "__init__":
                raise Refusal(t, "state", f"{_src(t)} = ... in {sc.method} (set attributes in __init__ only)")
            if _dunder(t.attr):
                raise Refusal(t, "dunders", f"{_src(t)} = ...")
            if t.attr in self.methods:
                raise Refusal(t, "host-names", f"{_src(t)} = ... (replaces a method)")
            if kind == "tensor":
                self.self_tensors.add(t.attr)
            if isinstance(value, ast.Call) and self._qual(value.func) in self.allowed_ops:
                self.self_ops.add(t.attr)
        else:
            rule = "state" if isinstance(t, ast.Attribute) else "assign-targets"
            raise Refusal(t, rule, f"{_src(t)} = ... (assign to names, or to self.attr in __init__)")
