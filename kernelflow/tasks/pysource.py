"""Parsing Python source, bounded, in a process where several threads may parse at once.

CPython 3.11 keeps the AST constructor's recursion counter in state shared by all threads of an
interpreter. When two threads build ASTs at the same time (a garbage collection inside one parse can
run Python code and switch threads), the counter is corrupted and `ast.parse` raises
`SystemError: AST constructor recursion depth mismatch` on valid code (python/cpython#106905 and the
reports linked there). The evaluator judges submissions on several threads and its static checks parse
each one; the learnability runs on this machine met the error once in ~7,300 verdicts, which turned an
honest submission into `evaluator_error`. Every parse of ours goes through `parse`, one at a time.

The source is hostile input: `parse` refuses text over `MAX_SOURCE_CHARS` before parsing, and turns
every way the parser can blow up on pathological input (RecursionError or MemoryError from deep
nesting or a million-term expression, ValueError for null bytes, SystemError) into a `SyntaxError`,
so a caller that handles SyntaxError never lets a submission crash it. `SourceTooComplex` (a
SyntaxError) marks the cases where the text may be valid Python but is too big or too deep to judge.

It does not protect parses made by other libraries in the same process.
"""

from __future__ import annotations

import ast
import threading

MAX_SOURCE_CHARS = 200_000  # ~40x the largest honest solution in the suite
_PARSE_LOCK = threading.Lock()


class SourceTooComplex(SyntaxError):
    """The source is too large or too deeply nested to parse within bounds (not necessarily invalid)."""


def parse(source: str) -> ast.Module:
    """`ast.parse(source)`, bounded and never concurrently with another parse of ours (see the module docstring)."""
    if len(source) > MAX_SOURCE_CHARS:
        raise SourceTooComplex(f"the source is {len(source):,} characters; the limit is {MAX_SOURCE_CHARS:,}")
    with _PARSE_LOCK:
        try:
            return ast.parse(source)
        except SyntaxError:
            raise
        except ValueError as exc:  # null bytes (3.11); a SyntaxError from 3.12 on
            raise SyntaxError(str(exc)) from None
        except (RecursionError, MemoryError) as exc:
            raise SourceTooComplex(f"the source is nested too deeply to parse ({type(exc).__name__})") from None
        except Exception as exc:  # noqa: BLE001 - SystemError and friends: the parser's fault, still no crash
            raise SourceTooComplex(f"the parser failed on this source: {type(exc).__name__}: {exc}") from None
