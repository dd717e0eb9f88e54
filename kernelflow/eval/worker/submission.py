"""The submission as the worker handles it: loaded from the judge's text, its errors, its output.

Three pieces of `worker/main.py`'s process-side harness that look at the submission itself:
- `load_submission`: the submission as a fresh module, executed from exactly the text the static
  checks parsed (never the file decoded anew by the import system);
- `trim_traceback` and `is_compile_error`: how a failure of the submission reads to the model (its
  own frames only) and whether it counts as a compile error;
- `output_problem`: why forward's result is not a plain, owned tensor of the expected shape, dtype
  and device (None when it is).

Threat model: like `worker/main.py`, this runs in the submission's process, where the submission's
Python can reach and replace it. Nothing here decides a verdict alone: the judge reads the outputs
itself and compares them (session/). `output_problem` takes the accessors the worker captured
before the submission ran (worker/refs.py), so neither a swapped `sys.modules["torch"]` nor a replaced
`torch.Tensor` method changes what is checked.
The module imports nothing heavy: the worker confines itself before torch is imported.
It does not talk to the judge (worker/main.py, protocol.py).
"""

from __future__ import annotations

import importlib.machinery
import linecache
import sys
import traceback
import types

from kernelflow.eval.worker.refs import frozen_builtins

__builtins__ = frozen_builtins()  # worker/refs.py: builtins rebound by the submission change nothing here


def trim_traceback(exc: BaseException, submission_path: str, limit: int = 1500) -> str:
    """The exception with only the submission's own frames, so line numbers are the model's.

    Never raises: an exception whose `__str__` (or its class's name) raises is described by its type's
    qualified name only; the judge cleans whatever text arrives (feedback.worker_text)."""
    try:
        return _trimmed(exc, submission_path, limit)
    except BaseException:  # noqa: BLE001 - the submission's exception object runs its own code here
        return "an exception whose message cannot be shown (its __str__ failed)"


def _trimmed(exc: BaseException, submission_path: str, limit: int) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == submission_path]
    lines = [f"  line {f.lineno}, in {f.name}: {(f.line or '').strip()}" for f in frames[-6:]]
    head = f"{type(exc).__name__}: {exc}"
    text = ("\n".join(lines) + "\n" if lines else "") + head
    return text[-limit:]


def is_compile_error(exc: BaseException) -> bool:
    try:
        names = {str(c.__name__) for c in type(exc).__mro__}
    except BaseException:  # noqa: BLE001 - a metaclass of the submission's may raise here
        return False
    return bool(names & {"CompilationError", "CompileTimeAssertionFailure", "InterpreterError", "SyntaxError",
                         "ImportError", "NameError", "UnsupportedLanguageConstruct"})


class _SourceLoader:
    """The submission's loader: its source is the text the judge checked (for linecache and inspect)."""

    def __init__(self, text: str):
        self._text = text

    def get_source(self, _name: str) -> str:
        return self._text


def load_submission(name: str, path: str):
    """The submission as a fresh module `name`, executed from exactly the text the judge checked.

    The judge wrote that text as UTF-8 with its newlines untranslated (session/worker_handle.py); compiling
    the str ignores any PEP 263 coding cookie, which the import system would honour (a `# coding: utf-7`
    or `unicode_escape` file decodes to other code than the static checks parsed: the red team's a02,
    a21). The module is registered as an import would register it (`sys.modules`, `__file__`,
    `__spec__`), and linecache holds the same text, so tracebacks point into the file and Triton's
    `inspect.getsource` of a @triton.jit function reads what was compiled, never the file decoded anew.
    """
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    linecache.cache[path] = (len(text), None, text.splitlines(True), path)  # mtime None: never reloaded from disk
    loader = _SourceLoader(text)
    spec = importlib.machinery.ModuleSpec(name, loader, origin=path)
    spec.has_location = True
    module = types.ModuleType(name)
    module.__file__, module.__spec__, module.__loader__ = path, spec, loader
    sys.modules[name] = module
    code = compile(text, path, "exec", dont_inherit=True)  # not this module's `from __future__` flags
    exec(code, module.__dict__)
    return module


def output_problem(refs, out, inputs, shape: tuple, dtype: str) -> str | None:
    """Why the output cannot be accepted as a plain, owned result tensor (None if it can).

    `refs` are the accessors the worker captured before the submission existed (worker/refs.py): a
    replaced `torch.Tensor` method, a rebound `torch.Tensor`, a subclass or an object whose `__class__`
    was replaced cannot answer these questions for the submission. Everything runs with torch
    function handling off, so no function mode the submission left active sees it either."""
    kind = refs.type(out)
    if kind is not refs.tensor:
        return f"forward returned {getattr(kind, '__name__', '?')!s:.80}, expected a plain torch.Tensor"
    with refs.no_torch_function():
        got_shape = tuple(refs.size(out))
        if got_shape != shape:
            return f"output shape {got_shape}, expected {shape}"
        if refs.dtype(out) is not refs.dtypes.get(dtype):
            return f"output dtype {refs.dtype(out)}, expected torch.{dtype}"
        if refs.device(out) != refs.device(inputs[0]):
            return f"output on {refs.device(out)}, expected {refs.device(inputs[0])}"
        if not refs.is_contiguous(out):
            return "output is not contiguous (strides " + str(refs.stride(out)) + ")"
        storage = refs.untyped_storage(out)
        o0, size = refs.data_ptr(storage), refs.nbytes(storage)
        if size < (refs.storage_offset(out) + refs.numel(out)) * refs.element_size(out):
            return "output does not own storage for all its elements"
        for t in inputs:
            s = refs.untyped_storage(t)
            i0 = refs.data_ptr(s)
            if o0 < i0 + refs.nbytes(s) and i0 < o0 + size:
                return "output shares memory with an input; write the result to a new tensor"
    return None
