"""Parsing Python source in a process where several threads may parse at once.

CPython 3.11 keeps the AST constructor's recursion counter in state shared by all threads of an
interpreter. When two threads build ASTs at the same time (a garbage collection inside one parse can
run Python code and switch threads), the counter is corrupted and `ast.parse` raises
`SystemError: AST constructor recursion depth mismatch` on valid code (python/cpython#106905 and the
reports linked there). The evaluator judges submissions on several threads and its static checks parse
each one; the learnability runs on this machine met the error once in ~7,300 verdicts, which turned an
honest submission into `evaluator_error`. Every parse of ours goes through `parse`, one at a time.

It does not protect parses made by other libraries in the same process.
"""

from __future__ import annotations

import ast
import threading

_PARSE_LOCK = threading.Lock()


def parse(source: str) -> ast.Module:
    """`ast.parse(source)`, never concurrently with another parse of ours (see the module docstring)."""
    with _PARSE_LOCK:
        return ast.parse(source)
