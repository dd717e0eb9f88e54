"""Token layout of two-turn episodes, and generation that agrees with the trainer's forward pass."""

import pytest
import torch

from kernelflow.tasks import build_messages, feedback_message, get_task
from kernelflow.train.config import LoraSettings
from kernelflow.train.generation import SamplingSettings, cut_at_eos, generate, left_pad
from kernelflow.train.loss import TrainingSequence, collate, token_logprobs
from kernelflow.train.policy import load_policy
from kernelflow.train.transcript import continuation_text, feedback_ids, layout, prompt_ids


@pytest.fixture(scope="module")
def policy(tiny_policy_config):
    return load_policy(tiny_policy_config, LoraSettings(r=4, alpha=8), seed=0)


def test_concatenated_ids_render_the_same_conversation_as_the_template(policy):
    tok = policy.tokenizer
    messages = build_messages(get_task("19_ReLU"))
    answer = "```python\nprint(1)\n```"
    fb = feedback_message("status: incorrect. max abs error 1.0")
    p = prompt_ids(tok, messages)
    t1 = tok(answer, add_special_tokens=False)["input_ids"] + [policy.turn_end_id]
    f = feedback_ids(tok, fb, turn_ended=True, turn_end_id=policy.turn_end_id)
    full = tok.apply_chat_template(
        [*messages, {"role": "assistant", "content": answer}, fb], add_generation_prompt=True, tokenize=False
    )
    assert tok.decode(p + t1 + f) == full
    assert continuation_text(tok, fb).startswith("\n<|im_start|>user\n")
    assert continuation_text(tok, fb).endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_truncated_turn_is_closed_before_the_feedback(policy):
    tok = policy.tokenizer
    fb = feedback_message("x")
    closed = feedback_ids(tok, fb, turn_ended=True, turn_end_id=policy.turn_end_id)
    cut = feedback_ids(tok, fb, turn_ended=False, turn_end_id=policy.turn_end_id)
    assert cut == [policy.turn_end_id, *closed]


def test_layout_masks_only_the_models_tokens():
    lay = layout([1, 2, 3], [((10, 11), (20, 21, 22)), ((12,), ())])
    assert lay.ids == (1, 2, 3, 10, 11, 20, 21, 22, 12)
    assert lay.mask == (0, 0, 0, 1, 1, 0, 0, 0, 1)
    assert lay.turn == (-1, -1, -1, 0, 0, -1, -1, -1, 1)


def test_cut_at_first_eos_and_left_pad():
    assert cut_at_eos([5, 6, 2, 7, 2], (2, 0)).ids == (5, 6, 2)
    c = cut_at_eos([5, 6], (2,))
    assert c.truncated and c.ended_with is None
    ids, mask = left_pad([[1, 2, 3], [4]], pad_id=0, device="cpu")
    assert ids.tolist() == [[1, 2, 3], [0, 0, 4]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_generation_is_batched_cut_and_reproducible(policy):
    tok = policy.tokenizer
    prompts = [prompt_ids(tok, build_messages(get_task(t))) for t in ("19_ReLU", "88_MinGPTNewGelu")]
    settings = SamplingSettings(max_new_tokens=12, temperature=0.8)
    torch.manual_seed(0)
    a = generate(policy, prompts, settings)
    torch.manual_seed(0)
    b = generate(policy, prompts, settings)
    assert [c.ids for c in a.completions] == [c.ids for c in b.completions]
    for c in a.completions:
        assert 1 <= len(c.ids) <= 12
        assert c.truncated or c.ids[-1] in policy.eos_ids
    greedy = generate(policy, prompts, SamplingSettings(max_new_tokens=12, do_sample=False))
    greedy2 = generate(policy, prompts, SamplingSettings(max_new_tokens=12, do_sample=False))
    assert [c.ids for c in greedy.completions] == [c.ids for c in greedy2.completions]
    policy.model.train()
    generate(policy, prompts[:1], SamplingSettings(max_new_tokens=2))
    assert policy.model.training  # generation runs in eval mode and restores the caller's mode


def test_training_forward_matches_generation_logprobs_with_left_padding(policy):
    """The update scores the sampled tokens as generate() saw them, across rows of different lengths."""
    tok = policy.tokenizer
    prompts = [prompt_ids(tok, build_messages(get_task(t))) for t in ("19_ReLU", "88_MinGPTNewGelu")]
    ids, att = left_pad(prompts, policy.pad_id, policy.device)
    policy.model.eval()
    torch.manual_seed(1)
    with torch.no_grad():
        out = policy.model.generate(
            input_ids=ids, attention_mask=att, max_new_tokens=6, do_sample=True, top_k=0, temperature=1.0,
            eos_token_id=None, pad_token_id=policy.pad_id, return_dict_in_generate=True, output_logits=True,
        )
    new = out.sequences[:, ids.shape[1] :]
    gen_logp = torch.stack(
        [torch.log_softmax(step.float(), -1).gather(-1, new[:, k : k + 1]).squeeze(-1) for k, step in enumerate(out.logits)],
        dim=1,
    )
    seqs = [
        TrainingSequence(tuple(p) + tuple(new[i].tolist()), (0,) * len(p) + (1,) * 6, (0.0,) * (len(p) + 6))
        for i, p in enumerate(prompts)
    ]
    batch = collate(seqs, policy.pad_id, "cpu")
    with torch.no_grad():
        logp, first = token_logprobs(policy.model, batch, policy.vocab_limit)
    train_logp = logp[:, -6:]
    assert (train_logp - gen_logp).abs().max() < 1e-5, (train_logp, gen_logp)
