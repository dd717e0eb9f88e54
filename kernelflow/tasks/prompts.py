"""What a model is shown for a task, and how its answer becomes a submission.

`build_messages(task)` gives chat messages (system + user) in the project's own words: what to write,
one worked example that is not one of the tasks (an elementwise add), the reference module, and the
output contract. `extract_code(answer)` turns a model's answer into submission source: the first
fenced python block, else the raw text when it parses as Python and defines something, or when it
does not parse but is evidently code (a `class X(`/`def f(`/`import`/`from ... import` statement
line), so the evaluator reports its syntax error as `compile_error` with line and column instead of
telling the model to change its format; otherwise `None`, which the evaluator reports as `no_code`.
"Evidently code" is a line-pattern heuristic: prose that happens to start a line with such a
statement is judged as (broken) code, and code without any such line stays `no_code`.

This module does not render chat templates (the trainer's tokenizer does) or judge code.
"""

from __future__ import annotations

import ast
import re

from kernelflow.tasks import pysource
from kernelflow.tasks.spec import Task

SYSTEM_PROMPT = (
    "You are an expert GPU programmer. You replace PyTorch operators with hand-written Triton kernels "
    "that are correct for every input and as fast as the hardware allows."
)

EXAMPLE_REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(1024, 4096), torch.randn(1024, 4096)]


def get_init_inputs():
    return []
'''

EXAMPLE_SOLUTION = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements  # the last block may run past the end
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a = a.contiguous()
        b = b.contiguous()
        out = torch.empty_like(a)
        n = out.numel()
        grid = (triton.cdiv(n, 1024),)
        add_kernel[grid](a, b, out, n, BLOCK_SIZE=1024)
        return out
'''

USER_TEMPLATE = """Write an optimized version of a PyTorch module with custom Triton kernels.

Rules:
- Define `class ModelNew(nn.Module)` with the same constructor and forward signatures as `Model`.
- Do the work inside `@triton.jit` kernels that `forward` launches. PyTorch may only allocate outputs \
and reshape or view tensors; calling PyTorch math (torch.relu, torch.softmax, F.*, x * y, ...) is rejected.
- The kernel must be correct for any input values and sizes, including sizes that are not a multiple \
of your block size: mask every load and store.
- No try/except, threads, streams, file or network access, or printing of results.
- Code outside the kernels is checked against a small allow-listed language: imports of torch, \
torch.nn, triton, triton.language and math only; constants, helper functions, the kernels and ModelNew. \
Host code may only allocate tensors (torch.empty, torch.empty_like, torch.zeros), read their metadata \
(.shape, .size(), .stride(), .numel(), .dtype, .device), reshape them (.contiguous(), .view(), .reshape()), \
do arithmetic on sizes (triton.cdiv, min, max, math.*) and launch kernels as `kernel[grid](...)`; \
anything else (other calls or attributes, with, while, match, getattr, extra classes) is rejected with \
the rule it breaks.{allowed_ops}
- Inputs are {dtype} on the GPU. Your kernel is timed against the memory-bandwidth floor of the device.

Here is an example. Given this module:
```python
{example_reference}```
a valid answer is:
```python
{example_solution}```

Now write `ModelNew` for this module:
```python
{reference}```

Answer with one ```python code block holding the complete module (imports, kernels and ModelNew), \
and nothing else: no test code and no explanation."""

FEEDBACK_TEMPLATE = """Your kernel was judged.
{feedback}

Write an improved version. Answer with one ```python code block holding the complete module."""

_FENCE_LINE = re.compile(r"^[ \t]*```[ \t]*([\w+.-]*)[ \t]*$", re.MULTILINE)
_PYTHON_TAGS = ("", "python", "py", "python3")
# Lines that are Python statements, not English: how an unparsable unfenced answer is told from prose.
# Keywords are lowercase and followed by Python syntax, which prose starting a sentence almost never is.
_CODE_LINE = re.compile(
    r"^[ \t]*(?:"
    r"class[ \t]+\w+[ \t]*[(:]"
    r"|(?:async[ \t]+)?def[ \t]+\w+[ \t]*\("
    r"|import[ \t]+[\w.]+(?:[ \t]+as[ \t]+\w+)?(?:[ \t]*,[ \t]*[\w.]+(?:[ \t]+as[ \t]+\w+)?)*[ \t]*(?:#.*)?$"
    r"|from[ \t]+[\w.]+[ \t]+import[ \t]+[\w*(]"
    r")",
    re.MULTILINE,
)


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(tag, body) of each fenced block, fences paired in order; an unclosed last fence runs to the end."""
    fences = list(_FENCE_LINE.finditer(text))
    blocks = []
    for i in range(0, len(fences), 2):
        opening = fences[i]
        end = fences[i + 1].start() if i + 1 < len(fences) else len(text)
        blocks.append((opening.group(1).lower(), text[opening.end() + 1:end]))
    return blocks


def build_messages(task: Task) -> list[dict[str, str]]:
    """The chat messages (system, user) for the first turn of `task`."""
    user = USER_TEMPLATE.format(
        dtype=task.dtype,
        example_reference=EXAMPLE_REFERENCE,
        example_solution=EXAMPLE_SOLUTION,
        reference=task.source,
        allowed_ops=f" This task also allows: {', '.join(task.allowed_ops)}." if task.allowed_ops else "",
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def build_prompt_text(task: Task) -> str:
    """The first-turn prompt as plain text (what `kernelflow prompt TASK_ID` prints)."""
    return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in build_messages(task))


def feedback_message(feedback: str) -> dict[str, str]:
    """The user turn that carries the evaluator's feedback into the model's next attempt."""
    return {"role": "user", "content": FEEDBACK_TEMPLATE.format(feedback=feedback.strip())}


def extract_code(answer: str) -> str | None:
    """The submission inside a model's answer, or None when the answer holds no code.

    The first fenced python block (```python, ```py or a bare ```; other languages are skipped)
    wins; without a fence, the whole answer counts as code when it parses as Python and defines a
    class or function, or when it does not parse but has a statement line (`_CODE_LINE`): then the
    evaluator's `parses` check names the syntax error, as it does for the same code fenced.
    """
    if not isinstance(answer, str):
        return None
    blocks = _fenced_blocks(answer)
    if blocks:
        for tag, code in blocks:
            if tag in _PYTHON_TAGS:
                return code if code.strip() else None
        return None
    text = answer.strip()
    if not text:
        return None
    try:
        tree = pysource.parse(text)
    except SyntaxError:
        return text + "\n" if _CODE_LINE.search(text) else None
    defines = any(isinstance(n, (ast.ClassDef, ast.FunctionDef)) for n in ast.walk(tree))
    return text + "\n" if defines else None
