"""Name resolution over a submission's syntax tree: the facts every static check shares.

`Analysis` walks a submission's syntax tree once: it resolves every name through import aliases and
simple assignments (class attributes too, as self.x; every binding of a rebound name is kept), and
records which nodes are called, which are inner links of an attribute chain, which functions are
@triton.jit kernels and which names are bound to one. Resolution is a worklist, linear in the node
count (a chain written backwards no longer costs a pass per link). `_analysis(tree)` builds it once
per tree and keeps it there, so the checks share one pass. The small node helpers (`_key`, `_tail`,
`_literal_getattr`) say how a Name, a self-attribute or a literal getattr is read.

What it does not do: it decides nothing. The tables of allowed and forbidden names are
`static/tables.py`; which check a resolved name breaks is `static/rules.py`; the checks are
`static/checks.py` and the modules it names.
"""

from __future__ import annotations

import ast
from collections import deque

from kernelflow.eval.static.tables import JIT_NAMES

# Bare names assumed when the module never binds them (an evaluator may pre-import them).
_DEFAULT_ALIASES = {"torch": "torch", "triton": "triton", "tl": "triton.language", "nn": "torch.nn",
                    "F": "torch.nn.functional"}


def _analysis(tree: ast.Module) -> Analysis:
    """The shared analysis of `tree`, built on first use and kept on the tree (thread-safe: one tree per call)."""
    a = getattr(tree, "_kernelflow_analysis", None)
    if a is None:
        a = Analysis(tree)
        tree._kernelflow_analysis = a
    return a


class Analysis:
    """One pass of facts the checks share: aliases, kernels, node roles, and name resolution.

    Linear in the node count: resolution and the kernel-name closure are worklists (each binding is
    retried at most once per name it waits on), and `qual` is memoised once the aliases are final.
    """

    def __init__(self, tree: ast.Module):
        self.tree = tree
        # The task's allowed library ops (Task.allowed_ops), set on the tree by run_static_checks: not compute.
        self.allowed_ops = frozenset(getattr(tree, "_kernelflow_allowed_ops", ()))
        self.nodes = list(ast.walk(tree))
        self.hits: list[tuple[ast.AST, tuple[str, str]]] | None = None  # see static_rules._classified
        self.aliases: dict[str, str] = {}
        # Further things a name is bound to (`a = torch.nn` and `a = torch`): every one is judged.
        self.alternates: dict[str, set[str]] = {}
        self._memo: dict[int, str | None] | None = None
        self.called: set[int] = set()  # ids of expressions in call position
        self.inner: set[int] = set()  # ids of Attribute.value nodes (only whole chains are judged)
        self.local_defs = {n.name for n in self.nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        self.imported_modules: set[str] = set()  # `import x.y [as z]`: x (or x.y) names a module
        for n in self.nodes:
            if isinstance(n, ast.Call):
                self.called.add(id(n.func))
            elif isinstance(n, ast.Attribute):
                self.inner.add(id(n.value))
            elif isinstance(n, ast.Import):
                for a in n.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                    self.imported_modules.add(a.name if a.asname else a.name.split(".")[0])
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                for a in n.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{n.module}.{a.name}"
        bound = {n.id for n in self.nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        bound |= {n.arg for n in self.nodes if isinstance(n, ast.arg)}
        for name, qual in _DEFAULT_ALIASES.items():
            if name not in self.aliases and name not in bound:
                self.aliases[name] = qual
                self.imported_modules.add(qual)
        # Right-hand sides bound to a name or self-attribute (a module may be aliased there, nowhere else).
        self.bound_values = {id(v) for t, v in self._pairs() if _key(t)}
        self.overbound: dict[str, ast.AST] = {}  # names bound to more distinct things than are tracked
        self._resolve_assignments()
        self._memo = {}
        self.kernels = {n.name: n for n in self.nodes if isinstance(n, ast.FunctionDef)
                        and any(self.qual(_undecorate(d)) in JIT_NAMES for d in n.decorator_list)}
        self.in_jit: set[int] = {id(m) for k in self.kernels.values() for m in ast.walk(k)}
        self.kernel_names = set(self.kernels)  # plus names and self-attributes bound to a kernel
        edges: dict[str, list[str]] = {}
        for target, value in self._pairs():
            name, source = (_tail(target) if _key(target) else None), _tail(value)
            if name and source:
                edges.setdefault(source, []).append(name)
        todo = list(self.kernel_names)
        while todo:
            for name in edges.get(todo.pop(), ()):
                if name not in self.kernel_names:
                    self.kernel_names.add(name)
                    todo.append(name)

    def _pairs(self):
        for n in self.nodes:
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple) and len(t.elts) == len(n.value.elts):
                        yield from zip(t.elts, n.value.elts, strict=True)
                    else:
                        yield t, n.value
            elif isinstance(n, ast.AnnAssign | ast.NamedExpr) and n.value is not None:
                yield n.target, n.value

    def _resolve_assignments(self) -> None:
        """Flow-insensitive: a name bound to a module member anywhere is treated as that member (each binding)."""
        pairs = [(_key(t), v) for t, v in self._pairs()]
        # A class attribute (`class M: t = typing`) is read back as self.t / cls.t.
        for c in self.nodes:
            if isinstance(c, ast.ClassDef):
                for stmt in c.body:
                    for t in stmt.targets if isinstance(stmt, ast.Assign) else \
                            [stmt.target] if isinstance(stmt, ast.AnnAssign) and stmt.value else []:
                        if isinstance(t, ast.Name):
                            pairs += [(f"self.{t.id}", stmt.value), (f"cls.{t.id}", stmt.value)]
        pairs = [(k, v) for k, v in pairs if k]
        waiting: dict[str, list[int]] = {}
        done: set[int] = set()
        todo = deque(range(len(pairs)))
        while todo:
            i = todo.popleft()
            if i in done:
                continue
            key, value = pairs[i]
            qual = self.qual(value)
            if qual is None:
                for dep in _chain_keys(value):
                    waiting.setdefault(dep, []).append(i)
                continue
            done.add(i)
            if key not in self.aliases:
                self.aliases[key] = qual
                todo.extend(waiting.pop(key, ()))
            elif self.aliases[key] != qual and qual not in self.alternates.setdefault(key, set()):
                if len(self.alternates[key]) < 16:
                    self.alternates[key].add(qual)
                else:
                    self.overbound.setdefault(key, value)

    def _chain(self, node: ast.AST) -> tuple[str, list[str]] | None:
        """(alias key, attribute names after it) for an expression rooted at a bound name, else None."""
        parts: list[str] = []
        while True:
            key = _key(node)
            if key and key in self.aliases:
                parts.reverse()
                return key, parts
            if isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            elif _literal_getattr(node):
                parts.append(node.args[1].value)
                node = node.args[0]
            else:
                return None

    def qual(self, node: ast.AST) -> str | None:
        """The dotted module path an expression names (`T.nn.functional.relu` -> `torch.nn.functional.relu`)."""
        memo = self._memo
        if memo is None:  # still resolving: aliases may grow
            chain = self._chain(node)
            return None if chain is None else ".".join([self.aliases[chain[0]], *chain[1]])
        path: list[tuple[ast.AST, str]] = []
        while id(node) not in memo:  # down to a memoised node or the chain's base, then fill in upwards
            key = _key(node)
            if key and key in self.aliases:
                memo[id(node)] = self.aliases[key]
            elif isinstance(node, ast.Attribute):
                path.append((node, node.attr))
                node = node.value
            elif _literal_getattr(node):
                path.append((node, node.args[1].value))
                node = node.args[0]
            else:
                memo[id(node)] = None
        base = memo[id(node)]
        for outer, attr in reversed(path):
            base = None if base is None else f"{base}.{attr}"
            memo[id(outer)] = base
        return base

    def quals(self, node: ast.AST) -> list[str]:
        """Every dotted path an expression may name: `qual`, and the same chain through each other binding."""
        chain = self._chain(node)
        if chain is None:
            return []
        key, parts = chain
        return [".".join([base, *parts]) for base in [self.aliases[key], *sorted(self.alternates.get(key, ()))]]


def _chain_keys(node: ast.AST) -> list[str]:
    """The names an expression's resolution waits on (`self.f.g` -> `self.f`, `self`)."""
    keys = []
    while True:
        key = _key(node)
        if key:
            keys.append(key)
        if isinstance(node, ast.Attribute):
            node = node.value
        elif _literal_getattr(node):
            node = node.args[0]
        else:
            return keys


def _key(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
        return f"{node.value.id}.{node.attr}"
    return None


def _tail(node: ast.AST) -> str | None:
    """The last name of a Name or attribute chain (`self.kern` -> `kern`)."""
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _literal_getattr(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str))


def _undecorate(node: ast.AST) -> ast.AST:
    return node.func if isinstance(node, ast.Call) else node

