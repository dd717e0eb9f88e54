"""Prompts a model is shown, and how its answer becomes submission source (`extract_code`)."""

from __future__ import annotations

import ast

import pytest

from kernelflow.tasks import TASKS, build_messages, build_prompt_text, extract_code, feedback_message
from kernelflow.tasks.prompts import EXAMPLE_REFERENCE, EXAMPLE_SOLUTION

CODE = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass\n"


# --- build_messages ---------------------------------------------------------------------------------


@pytest.mark.parametrize("task_id", list(TASKS))
def test_messages_hold_the_rules_the_example_and_the_reference(task_id):
    task = TASKS[task_id]
    messages = build_messages(task)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert all(isinstance(m["content"], str) and m["content"].strip() for m in messages)
    user = messages[1]["content"]
    assert "ModelNew" in user
    assert task.source in user  # verbatim, so the model sees exactly what is judged
    assert EXAMPLE_REFERENCE in user and EXAMPLE_SOLUTION in user
    assert "add_kernel" in user and "@triton.jit" in user
    assert "float32" in user
    # The reference comes after the worked example, so "this module" means the task's.
    assert user.index(EXAMPLE_SOLUTION) < user.index(task.source)
    # The other tasks' references are not leaked into this prompt.
    for other in TASKS.values():
        if other.task_id != task_id:
            assert other.source not in user


def test_worked_example_is_not_one_of_the_tasks_and_is_valid_python():
    for src in (EXAMPLE_REFERENCE, EXAMPLE_SOLUTION):
        ast.parse(src)
    assert "class ModelNew" in EXAMPLE_SOLUTION
    assert "mask" in EXAMPLE_SOLUTION  # the example itself shows masking of the tail block
    for task in TASKS.values():
        assert EXAMPLE_REFERENCE != task.source


def test_example_solution_is_what_extract_code_returns_from_its_own_fence():
    answer = f"```python\n{EXAMPLE_SOLUTION}```"
    assert extract_code(answer) == EXAMPLE_SOLUTION


def test_prompt_text_joins_both_messages():
    task = TASKS["23_Softmax"]
    text = build_prompt_text(task)
    assert text.startswith("[system]\n")
    assert "\n\n[user]\n" in text
    assert task.source in text and "ModelNew" in text


def test_feedback_message_is_a_user_turn_with_the_feedback():
    msg = feedback_message("  max abs error 3.2, 1e5x the tolerance  \n")
    assert msg["role"] == "user"
    assert "max abs error 3.2, 1e5x the tolerance" in msg["content"]
    assert "```python" in msg["content"]


# --- extract_code -----------------------------------------------------------------------------------


def test_first_fenced_python_block_wins():
    answer = f"Here it is:\n```python\n{CODE}```\nand a second try:\n```python\nx = 2\n```\n"
    assert extract_code(answer) == CODE


@pytest.mark.parametrize("tag", ["python", "py", "python3", "Python", "PY"])
def test_python_language_tags(tag):
    assert extract_code(f"```{tag}\n{CODE}```") == CODE


def test_bare_fence():
    assert extract_code(f"Answer:\n```\n{CODE}```\nDone.") == CODE


def test_raw_code_without_fence():
    assert extract_code(CODE) == CODE
    assert extract_code("\n\n" + CODE + "\n\n") == CODE


@pytest.mark.parametrize(
    "answer",
    [
        "I am sorry, I cannot write this kernel.",
        "Use a Triton kernel with masked loads; then launch it over a 1-D grid.",
        "hello",  # parses as a Python expression but defines nothing
        "x = 1\nprint(x)\n",  # code, but no class or function: not a submission
        "",
        "   \n\t",
    ],
)
def test_prose_or_nothing_gives_none(answer):
    assert extract_code(answer) is None


@pytest.mark.parametrize("answer", ["```python\n```", "```python\n   \n\n```", "text\n```\n\n```\nmore text"])
def test_empty_fence_gives_none(answer):
    assert extract_code(answer) is None


@pytest.mark.parametrize("answer", [None, 42, b"```python\nclass A: pass\n```", ["class A: pass"]])
def test_non_string_gives_none(answer):
    assert extract_code(answer) is None


def test_fenced_code_is_returned_verbatim_even_if_it_does_not_parse():
    """Inside a fence the text is the submission as written; judging syntax is the evaluator's job."""
    broken = "def f(:\n    pass\n"
    assert extract_code(f"```python\n{broken}```") == broken


BROKEN_MODULE = "import torch\n\nclass ModelNew(torch.nn.Module:\n    pass\n"


@pytest.mark.parametrize(
    "answer",
    [
        BROKEN_MODULE,
        "\n\n" + BROKEN_MODULE,
        "def forward(self, x:\n    return x\n",
        "from torch import nn\nx = (\n",
        "import torch, triton as t  # kernels\nclass ModelNew(\n",
        BROKEN_MODULE + "\nThis kernel masks every load.\n",  # code then prose: the prose line is the error
    ],
)
def test_unfenced_code_that_does_not_parse_is_still_code(answer):
    """Raw code with a syntax error is the submission (the evaluator names the error), not "no code"."""
    assert extract_code(answer) == answer.strip() + "\n"


@pytest.mark.parametrize(
    "answer",
    [
        "I would define class ModelNew, import triton and def a kernel.",  # keywords mid-sentence
        "Import triton first: then write the kernel.",  # capitalised, as prose starts sentences
        "from the reference: import nothing else",  # `from` + word + `:`, not `from x import y`
        "class is in session (sort of)",  # `class` + word, no `(`/`:` right after the name
        "def: a definition",
    ],
)
def test_unfenced_prose_that_does_not_parse_is_still_no_code(answer):
    assert extract_code(answer) is None


def test_a_non_python_block_before_the_python_block_is_skipped():
    """A ```bash block before the ```python block: fences pair up in order, the python one wins."""
    answer = f"Install:\n```bash\npip install triton\n```\nThen:\n```python\n{CODE}```\n"
    assert extract_code(answer) == CODE
