"""The synthetic SFT corpus: the training tasks' prompts, each answered by a templated Triton `ModelNew`.

The learnability experiment (docs/learnability.md) needs a policy that writes real kernels without
downloading any weights, and that starts imperfect, so the trainer has something to fix. This module
writes its supervised data from a seed, in code, never from a download:

- the prompt is the project's own first turn (`kernelflow.tasks.build_messages`), unchanged, so the
  policy is trained on exactly what the environment shows it;
- the answer is one ```python block holding a complete module in the style of the honest solutions
  in tests/fixtures/solutions (one masked, int64-indexed elementwise pass; `forward` only allocates
  and launches the @triton.jit kernel, as kernelflow/eval/static/checks.py demands), drawn from
  templates with varied block sizes, warp counts, names and algebraically equivalent formulas;
- a controlled share of answers (`mistake_rates`, per task) carries one realistic mistake, drawn
  with `mistake_weights` from `MISTAKES`: a missing mask (out-of-bounds tail), a wrong formula (a
  sign slip, a forgotten slope, a tanh that overflows to inf/inf at |x| > 44), an off-by-one grid
  (`n // BLOCK` drops the tail) or a non-power-of-two `tl.arange` (a compile error).

Every example records its intended outcome (`mistake`, None when it should be judged correct). Tests
judge a sample with the real evaluator and check that the labels hold (tests/train/test_corpus.py).
The same (config, seed) always gives the same examples, in the same order.

This module writes text only: it does not tokenize, train (sft.py) or judge (kernelflow/eval).
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from kernelflow.tasks import TASKS, build_messages, feedback_message
from kernelflow.train.config import SFTSettings

CORPUS_VERSION = "1"
MISTAKES = ("no_mask", "formula", "grid", "arange")
# Powers of two that are one token each or share no leading digits' token with another (Qwen's
# pre-tokenizer cuts numbers into groups of 3 digits: 1024 is "102" + "4", 2048 "204" + "8", and a
# small model recombines them into 2024 or 1028). Small blocks are slower on a GPU: the choice moves
# the roofline fraction, which the reward sees there.
BLOCK_SIZES = (128, 256, 512, 1024)
WARPS = (2, 4, 8)
# Not powers of two: tl.arange rejects them at compile time (a mistake a model makes when it sizes a
# block from the row length).
BAD_BLOCKS = (192, 384, 768)


@dataclass(frozen=True)
class Example:
    """One supervised example: the chat prompt, the assistant's answer, and what the answer should get."""

    task_id: str
    prompt: tuple[dict[str, str], ...]
    completion: str  # the assistant's whole answer: one fenced python block
    mistake: str | None  # None: meant to be judged correct; else one of MISTAKES
    block_size: int
    num_warps: int

    @property
    def second_turn(self) -> bool:
        """A two-turn example: the prompt ends with a mistaken answer and its feedback."""
        return len(self.prompt) > 2

    def to_record(self) -> dict:
        """The prompt-completion record TRL's SFTTrainer reads (conversational format)."""
        return {
            "prompt": [dict(m) for m in self.prompt],
            "completion": [{"role": "assistant", "content": self.completion}],
        }


# The first line of the evaluator's feedback for each mistake (kernelflow/eval/feedback.py words it;
# what follows there, the error's details, is left out). Two-turn examples show the policy that
# feedback asks for a corrected module; the real feedback of the environment is what it reads in training.
MISTAKE_FEEDBACK = {
    "no_mask": "Status: crashed. The process running the kernel crashed.",
    "formula": "Status: incorrect. The kernel ran but its output is wrong.",
    "grid": "Status: incorrect. The kernel ran but its output is wrong.",
    "arange": "Status: compile_error. The module failed to import or a kernel failed to compile.\n"
              "ValueError: arange's range must be a power of 2",
}


# The evaluator's whole feedback on judged corpus answers, made by scripts/make_feedback_samples.py (this
# module may not import the evaluator: the trainer reaches it only through the environment).
FEEDBACK_SAMPLES_FILE = Path(__file__).with_name("feedback_samples.json")


@functools.cache
def feedback_samples() -> dict[tuple[str, str], tuple[tuple[str, str], ...]]:
    """(task_id, kind) -> ((answer, feedback), ...) from `FEEDBACK_SAMPLES_FILE`; kind "ok" or a mistake."""
    try:
        data = json.loads(FEEDBACK_SAMPLES_FILE.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {FEEDBACK_SAMPLES_FILE}: {exc}; regenerate it with "
                         "`python scripts/make_feedback_samples.py`") from exc
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for e in data["entries"]:
        out.setdefault((e["task_id"], e["kind"]), []).append((e["answer"], e["feedback"]))
    return {k: tuple(v) for k, v in out.items()}


def _judged(task_id: str, kind: str, rng: random.Random) -> tuple[str, str]:
    """A judged first answer of `kind` for `task_id` and the evaluator's feedback on it."""
    pool = feedback_samples().get((task_id, kind))
    if not pool:
        raise ValueError(f"{FEEDBACK_SAMPLES_FILE.name} has no judged {kind!r} answer for {task_id}; regenerate it "
                         "with `python scripts/make_feedback_samples.py` or set sft.real_feedback=false")
    return rng.choice(pool)


# Per task: the operator's name as the reference's docstring spells it, whether it takes
# LeakyReLU's slope, the correct formula variants (lines computing `y` from a float32 `x`) and the wrong ones.
_TASK_FORMS: dict[str, dict] = {
    "19_ReLU": {
        "title": "ReLU",
        "correct": (
            ("y = tl.maximum(x, 0.0)",),
            ("y = tl.where(x > 0.0, x, 0.0)",),
        ),
        "wrong": (
            ("y = tl.where(x > 0.0, x, 0.01 * x)",),  # LeakyReLU's formula
            ("y = tl.abs(x)",),
        ),
    },
    "20_LeakyReLU": {
        "title": "LeakyReLU",
        "slope": True,
        "correct": (
            ("y = tl.where(x > 0.0, x, x * negative_slope)",),
            ("y = tl.where(x >= 0.0, x, negative_slope * x)",),
        ),
        "wrong": (
            ("y = tl.maximum(x, 0.0)",),  # the slope forgotten: plain ReLU
            ("y = tl.where(x > 0.0, x, negative_slope)",),  # the multiply forgotten
        ),
    },
    "21_Sigmoid": {
        "title": "Sigmoid",
        "correct": (
            ("y = 1.0 / (1.0 + tl.exp(-x))",),
            ("e = tl.exp(-tl.abs(x))", "r = 1.0 / (1.0 + e)", "y = tl.where(x >= 0.0, r, e * r)"),
        ),
        "wrong": (
            ("y = 1.0 / (1.0 + tl.exp(x))",),  # the sign slip: sigmoid(-x)
            ("y = tl.exp(-x) / (1.0 + tl.exp(-x))",),  # 1 - sigmoid(x), and inf/inf = NaN at x << 0
        ),
    },
    "22_Tanh": {
        "title": "Tanh",
        "correct": (
            ("y = 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)",),
            ("e = tl.exp(-2.0 * tl.abs(x))", "t = (1.0 - e) / (1.0 + e)", "y = tl.where(x < 0.0, -t, t)"),
        ),
        "wrong": (
            ("e = tl.exp(2.0 * x)", "y = (e - 1.0) / (e + 1.0)"),  # inf / inf = NaN for x > 44
            ("e = tl.exp(-2.0 * x)", "y = (1.0 - e) / (1.0 + e)"),  # NaN for x < -44
        ),
    },
}


def corpus_tasks() -> tuple[str, ...]:
    """The task ids the corpus has templates for."""
    return tuple(_TASK_FORMS)


def _module(task_id: str, rng: random.Random, mistake: str | None, blocks: tuple[int, ...] = BLOCK_SIZES,
            warps_from: tuple[int, ...] = WARPS, variety: int = 2) -> tuple[str, int, int]:
    """One complete module for `task_id` with at most one mistake; returns (source, block, warps).

    The formula (and the wrong formula of a `formula` mistake) is drawn from its first `variety`
    alternatives. Names are fixed, the kernel's too (`elementwise_kernel` for every task): a small model
    trained for minutes does not learn to repeat a name it chose twenty lines earlier (`tanh_kernel`
    defined, `sigmoid_kernel` launched: a failure that is none of the mistakes this corpus controls).
    """
    form = _TASK_FORMS[task_id]
    slope = form.get("slope", False)

    def pick(options):
        return rng.choice(options[:variety])

    block = pick(BAD_BLOCKS) if mistake == "arange" else rng.choice(blocks)
    warps = rng.choice(warps_from)
    formula = pick(form["wrong"] if mistake == "formula" else form["correct"])
    offs = "offsets"
    pid_axis = "tl.program_id(axis=0)"
    kparams = ", negative_slope" if slope else ""
    kargs = ", self.negative_slope" if slope else ""
    init_sig = ", negative_slope: float = 0.01" if slope else ""
    init_body = "\n        self.negative_slope = negative_slope" if slope else ""
    if mistake == "no_mask":
        load = f"x = tl.load(x_ptr + {offs}).to(tl.float32)"
        store = f"tl.store(out_ptr + {offs}, y)"
        mask_line = ""
    else:
        load = f"x = tl.load(x_ptr + {offs}, mask=mask, other=0.0).to(tl.float32)"
        store = f"tl.store(out_ptr + {offs}, y, mask=mask)"
        mask_line = f"    mask = {offs} < n_elements\n"
    grid = "(n // BLOCK_SIZE,)" if mistake == "grid" else "(triton.cdiv(n, BLOCK_SIZE),)"
    body = "\n".join(f"    {line}" for line in formula)
    # The docstring names the operator first, as the honest solutions do: the one decision that
    # depends on the prompt comes early, and what follows can copy it from nearby.
    source = f'''"""{form["title"]}(x) in one masked, int64-indexed elementwise Triton pass."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_SIZE = {block}
NUM_WARPS = {warps}


@triton.jit
def elementwise_kernel(x_ptr, out_ptr, n_elements{kparams}, BLOCK_SIZE: tl.constexpr):
    pid = {pid_axis}.to(tl.int64)
    {offs} = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
{mask_line}    {load}
{body}
    {store}


class ModelNew(nn.Module):
    def __init__(self{init_sig}):
        super().__init__(){init_body}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        grid = {grid}
        elementwise_kernel[grid](x, out, n{kargs}, BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS)
        return out
'''
    return source, block, warps


def answer(task_id: str, rng: random.Random, mistake: str | None = None, blocks: tuple[int, ...] = BLOCK_SIZES,
           warps: tuple[int, ...] = WARPS, variety: int = 2) -> tuple[str, int, int]:
    """An assistant answer (one fenced python block) for `task_id`: (text, block size, warps)."""
    if task_id not in _TASK_FORMS:
        raise ValueError(f"the synthetic corpus has no templates for task {task_id!r}; known: {corpus_tasks()}")
    if mistake is not None and mistake not in MISTAKES:
        raise ValueError(f"unknown mistake {mistake!r}; choose one of {MISTAKES} or None")
    source, block, n_warps = _module(task_id, rng, mistake, blocks, warps, variety)
    return f"```python\n{source}```", block, n_warps


def build_corpus(settings: SFTSettings) -> list[Example]:
    """`settings.examples_per_task` examples per task, interleaved across tasks, from `settings.corpus_seed`.

    Exactly round(rate x n) answers of a task carry a mistake (a controlled share, not a coin flip
    per example), so a small corpus keeps the configured balance. On top of those, round(
    `second_turn_share` x n) two-turn examples per task show a mistaken first answer, the feedback's
    first line (`MISTAKE_FEEDBACK`) and a correct second answer (the completion). With
    `real_feedback`, the first answer and the evaluator's whole feedback on it come from
    `FEEDBACK_SAMPLES_FILE`, and a share `second_turn_ok_share` of them were correct (feedback `ok`).
    """
    rng = random.Random(f"kernelflow-corpus:{settings.corpus_seed}")
    per_task: dict[str, list[Example]] = {}
    for task_id, rate in zip(settings.tasks, settings.mistake_rates, strict=True):
        n = settings.examples_per_task
        n_wrong = round(rate * n)
        kinds = rng.choices(MISTAKES, weights=settings.mistake_weights, k=n_wrong) + [None] * (n - n_wrong)
        rng.shuffle(kinds)
        prompt = tuple(build_messages(TASKS[task_id]))
        examples = []
        draw = (settings.block_sizes, settings.num_warps, settings.variety)
        for kind in kinds:
            text, block, warps = answer(task_id, rng, kind, *draw)
            examples.append(Example(task_id, prompt, text, kind, block, warps))
        for _ in range(round(settings.second_turn_share * n)):
            if settings.real_feedback:
                ok_first = rng.random() < settings.second_turn_ok_share
                kind = "ok" if ok_first else rng.choices(MISTAKES, weights=settings.mistake_weights)[0]
                first, feedback = _judged(task_id, kind, rng)
            else:
                kind = rng.choices(MISTAKES, weights=settings.mistake_weights)[0]
                first, _, _ = answer(task_id, rng, kind, *draw)
                feedback = MISTAKE_FEEDBACK[kind]
            text, block, warps = answer(task_id, rng, None, *draw)
            turns = (*prompt, {"role": "assistant", "content": first}, feedback_message(feedback))
            examples.append(Example(task_id, turns, text, None, block, warps))
        per_task[task_id] = examples
    out = []
    for i in range(max(len(v) for v in per_task.values())):
        out.extend(per_task[t][i] for t in settings.tasks if i < len(per_task[t]))
    return out


def corpus_hash(settings: SFTSettings) -> str:
    """sha256 over the corpus version, the settings that shape the corpus and every example's text."""
    h = hashlib.sha256(CORPUS_VERSION.encode())
    h.update(json.dumps(asdict(settings), sort_keys=True).encode())
    for ex in build_corpus(settings):
        h.update(hashlib.sha256(json.dumps(ex.to_record(), sort_keys=True).encode()).digest())
    return h.hexdigest()


def mistake_counts(examples: list[Example]) -> dict[str, dict[str, int]]:
    """Per task: how many first answers carry each mistake ("none": meant to be correct), and how many
    two-turn examples there are ("second_turn")."""
    out: dict[str, dict[str, int]] = {}
    for ex in examples:
        row = out.setdefault(ex.task_id, {})
        key = "second_turn" if ex.second_turn else (ex.mistake or "none")
        row[key] = row.get(key, 0) + 1
    return out
