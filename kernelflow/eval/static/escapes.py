"""Static checks for escapes the name tables in `static_tables` do not see (red team F1, F2).

- `source_encoding`: a PEP 263 coding declaration on line 1 or 2 other than UTF-8. The checks parse the
  submission as a str, where Python ignores the cookie; the worker imports the file, where the importer
  honours it. Under `# coding: utf-7` a comment holding `+AAo-` is a newline followed by code the checks
  never saw (a02, a21 with unicode_escape). The answer path puts a fenced block's first line on line 1 of
  the written file (a02b), so the check runs on the extracted code, which is exactly what is written. A
  leading BOM cannot help: `ast.parse` refuses U+FEFF in a str (compile_error), and the importer refuses
  a BOM followed by any cookie but utf-8.
- `no_frame_introspection`: frame, code, generator, coroutine and traceback attributes (`gi_frame.f_back`,
  `f_locals`, `f_builtins`, `tb_frame`, `co_consts`, ...) on any object, under a literal getattr, in a
  string (format fields walk attributes) or as a class-pattern keyword. A frame is the judge's own
  locals and globals: a01/a03/a25 cleared the dispatch guard's findings and forged its launch count.
- `no_generators`: `yield`, `yield from`, `await`, `async def/for/with`. Generator and coroutine objects
  hand out frames and run their bodies later, when someone else advances them; an honest Triton
  submission has none (no shipped solution or corpus answer does). Generator *expressions* stay
  allowed (`all(s > 0 for s in x.shape)`); their frames are reachable only through the names above.
- `no_pattern_attribute_reads`: `case C(name=p)` reads `obj.name` with no Attribute node, so no name
  check sees it (`case object(relu=r)` on torch, `case object(gi_frame=f)`); positional patterns stay.

All four are one pass over the nodes (or over the first two lines).
"""

from __future__ import annotations

import ast
import codecs
import io
import re
import tokenize

from kernelflow.eval.static.analysis import _literal_getattr
from kernelflow.eval.static.rules import _Findings
from kernelflow.eval.verdict import Check

# CPython 3.10-3.14 frame, generator, coroutine, async-generator, traceback, code and cell attributes, and
# the sys hooks that reach frames (a module is never needed to name them: frames come from a generator).
FRAME_ATTRS = frozenset("""
f_back f_builtins f_code f_globals f_lasti f_lineno f_locals f_trace f_trace_lines f_trace_opcodes f_generator
gi_code gi_frame gi_running gi_suspended gi_yieldfrom cr_await cr_code cr_frame cr_origin cr_running
cr_suspended ag_await ag_code ag_frame ag_running ag_suspended tb_frame tb_lasti tb_lineno tb_next
co_argcount co_cellvars co_code co_consts co_exceptiontable co_filename co_firstlineno co_flags co_freevars
co_kwonlyargcount co_linetable co_lines co_lnotab co_name co_names co_nlocals co_positions co_posonlyargcount
co_qualname co_stacksize co_varnames co_branches cell_contents _getframe _getframemodulename _current_frames
_current_exceptions settrace setprofile gettrace getprofile call_tracing exc_info last_traceback
""".split())
# Whole families (no honest submission names an attribute like these; future CPython members included).
FRAME_PREFIXES = ("gi_", "cr_", "ag_", "tb_", "co_")
_FRAME_WORD = re.compile(r"\b(?:" + "|".join(sorted(FRAME_ATTRS, key=len, reverse=True)) + r")\b")
_FRAME_HINT = ("frames, code objects and tracebacks expose the judge's own variables; a kernel needs none of "
               "them: compute in the @triton.jit kernel and return its output")


def _frame_attr(name: str) -> bool:
    return name in FRAME_ATTRS or name.startswith(FRAME_PREFIXES)


def check_no_frame_introspection(tree: ast.Module, source: str) -> Check:
    # Rationale: gi_frame.f_back / f_locals / f_builtins walks reach the worker's guard and counters (red team F1).
    found = _Findings()
    for n in ast.walk(tree):
        names = [n.attr] if isinstance(n, ast.Attribute) else [n.args[1].value] if _literal_getattr(n) else \
            n.kwd_attrs if isinstance(n, ast.MatchClass) else []
        for name in names:
            if _frame_attr(name):
                found.add(n, f"`.{name}` is frame/code/traceback introspection; {_FRAME_HINT}")
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and (m := _FRAME_WORD.search(n.value)):
            found.add(n, f"a string naming `{m.group(0)}` (format fields and getattr walk attributes); {_FRAME_HINT}")
    return found.check()


def check_no_generators(tree: ast.Module, source: str) -> Check:
    # Rationale: generator/coroutine objects carry frames (gi_frame, cr_frame) and run later; a kernel needs neither.
    found = _Findings()
    what = {ast.Yield: "yield", ast.YieldFrom: "yield from", ast.Await: "await", ast.AsyncFunctionDef: "async def",
            ast.AsyncFor: "async for", ast.AsyncWith: "async with"}
    for n in ast.walk(tree):
        if type(n) in what:
            found.add(n, f"`{what[type(n)]}` makes a generator or coroutine, whose frame and deferred body escape "
                         f"the judged call; write plain functions (generator expressions are fine)")
    return found.check()


def check_no_pattern_attribute_reads(tree: ast.Module, source: str) -> Check:
    # Rationale: `case C(attr=p)` reads obj.attr with no Attribute node, so no name check sees it (case object(relu=r)).
    found = _Findings()
    for n in ast.walk(tree):
        if isinstance(n, ast.MatchClass) and n.kwd_attrs:
            found.add(n, f"the class pattern `{ast.unparse(n)}` reads attributes ({', '.join(n.kwd_attrs)}) where "
                         f"the checks cannot see them; read attributes as `obj.name`")
    return found.check()


# PEP 263: the declaration's form; the tokenizer looks at lines 1 and 2 only (split at \r\n, \r or \n).
_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_COOKIE_HINT = ("the file is imported under that codec, which decodes text the checks never saw (a comment can "
                "become code); remove the line: submissions are UTF-8")


def _codec(name: str) -> str | None:
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def check_source_encoding(tree: ast.Module, source: str) -> Check:
    # Rationale: a `# coding: utf-7` cookie makes the importer decode another program than the one checked (F2).
    numbered = [*enumerate(re.split(r"\r\n|\r|\n", source, maxsplit=2)[:2], 1),
                *enumerate(source.splitlines()[:2], 1)]  # the tokenizer's line ends, and str's (stricter)
    for number, line in numbered:
        m = _CODING.match(line)
        if m and _codec(m.group(1)) != "utf-8":
            return Check(False, f"line {number}: a coding declaration `{m.group(0).strip()}` (codec "
                                f"{_codec(m.group(1)) or 'unknown'}); {_COOKIE_HINT}")
    try:  # what the importer itself will decide for these bytes
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source.encode("utf-8", "surrogatepass")).readline)
    except SyntaxError as exc:
        return Check(False, f"line 1: the source's encoding declaration is refused ({exc}); {_COOKIE_HINT}")
    if _codec(encoding) not in ("utf-8", "utf-8-sig"):
        return Check(False, f"line 1: the source declares the encoding {encoding}; {_COOKIE_HINT}")
    return Check(True)
