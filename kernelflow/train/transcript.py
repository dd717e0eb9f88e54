"""Token layout of a multi-turn episode: prompt, the model's turns, and the feedback between them.

An episode's tokens are built by concatenation, never by re-rendering the whole conversation: the
model's sampled ids are kept exactly as sampled (decode -> re-render -> re-tokenize does not give them
back; notes/trl_multiturn.md section 4). The pieces:

    prompt ids      chat template of [system, user], with the assistant header     mask 0
    turn 1 ids      what the model generated, cut after its first eos              mask 1
    feedback ids    [<|im_end|> if turn 1 did not end with it] + the rest of the   mask 0
                    template: "\\n<|im_start|>user\\n{feedback}<|im_end|>\\n<|im_start|>assistant\\n"
    turn 2 ids      ...                                                            mask 1

The feedback piece is found by rendering a conversation around a sentinel and keeping what follows
the closed assistant turn, so it follows whatever chat template the tokenizer carries.
This module does not decide advantages (advantages.py) or compute losses (loss.py).
"""

from __future__ import annotations

from dataclasses import dataclass

_SENTINEL = "\u2063KERNELFLOW_SENTINEL\u2063"


def prompt_ids(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """The first-turn input: the chat template of `messages` followed by the assistant header."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def continuation_text(tokenizer, message: dict[str, str]) -> str:
    """Template text between a closed assistant turn (after its end token) and the next assistant turn."""
    convo = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": _SENTINEL},
        message,
    ]
    text = tokenizer.apply_chat_template(convo, add_generation_prompt=True, tokenize=False)
    rest = text[text.index(_SENTINEL) + len(_SENTINEL) :]
    end = tokenizer.eos_token
    if not rest.startswith(end):
        raise ValueError(f"chat template does not close an assistant turn with eos {end!r}: {rest[:40]!r}")
    return rest[len(end) :]


def feedback_ids(tokenizer, message: dict[str, str], turn_ended: bool, turn_end_id: int) -> list[int]:
    """Ids appended after a model turn to carry `message` (the next user turn) and open the next answer.

    `turn_ended` says whether the model's turn already ends with the template's end-of-turn token; if
    it was cut by the token limit (or ended on another eos), that token is inserted first.
    """
    ids = list(tokenizer(continuation_text(tokenizer, message), add_special_tokens=False)["input_ids"])
    return ids if turn_ended else [turn_end_id, *ids]


@dataclass(frozen=True)
class TokenLayout:
    """One episode flattened: ids, a 0/1 loss mask, and the turn each id belongs to (-1: not the model's)."""

    ids: tuple[int, ...]
    mask: tuple[int, ...]
    turn: tuple[int, ...]

    def __post_init__(self) -> None:
        if not len(self.ids) == len(self.mask) == len(self.turn):
            lengths = f"ids {len(self.ids)}, mask {len(self.mask)}, turn {len(self.turn)}"
            raise ValueError(f"layout lengths differ: {lengths}")


def layout(prompt: list[int] | tuple[int, ...], turns: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> TokenLayout:
    """Flatten a prompt and (completion ids, following feedback ids) per turn into one `TokenLayout`."""
    ids, mask, turn = list(prompt), [0] * len(prompt), [-1] * len(prompt)
    for t, (completion, feedback) in enumerate(turns):
        ids += completion
        mask += [1] * len(completion)
        turn += [t] * len(completion)
        ids += feedback
        mask += [0] * len(feedback)
        turn += [-1] * len(feedback)
    return TokenLayout(tuple(ids), tuple(mask), tuple(turn))
