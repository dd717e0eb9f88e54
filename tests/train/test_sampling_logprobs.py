"""The loss scores tokens under the distribution that sampled them (issue #18, item 1).

`generate(..., output_scores=True, return_dict_in_generate=True)` returns, per decode step, the scores
after every logits processor (the vocabulary limit, temperature, top-p): log_softmax of those is the
sampling distribution. The trainer's `token_logprobs` and the update's reported mean log-prob must equal
it at T = 0.8 (they took log_softmax of the raw logits before: T = 1), with and without a nucleus cut,
on a tiny model whose embedding is padded past the tokenizer (so the vocabulary limit is in force).
Covered: float32 on CPU, left-padded rows of different lengths. Not covered: bf16 or CUDA numerics
(the merged-adapter parity test covers bf16).
"""

import dataclasses

import pytest
import torch

from kernelflow.tasks import build_messages, get_task
from kernelflow.train.config import LoraSettings, TinyModelConfig
from kernelflow.train.generation import SamplingSettings, generation_settings, left_pad
from kernelflow.train.loss import TrainingSequence, collate, token_logprobs
from kernelflow.train.policy import load_policy
from kernelflow.train.transcript import prompt_ids
from kernelflow.train.update import apply_update, build_optimizer, build_scheduler

STEPS = 6


@pytest.fixture(scope="module")
def padded_policy(tiny_policy_config):
    """The tiny model with 1100 embedding rows for a 1024-token tokenizer (like Qwen's padded vocabulary)."""
    cfg = dataclasses.replace(tiny_policy_config, tiny=TinyModelConfig(vocab_size=1100))
    policy = load_policy(cfg, LoraSettings(r=4, alpha=8), seed=0)
    with torch.no_grad():  # a non-zero adapter, so the LoRA path is part of what is compared
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    assert policy.vocab_limit == 1024
    return policy


def _sample_with_scores(policy, settings: SamplingSettings, seed: int):
    """Sampled ids and the sampling distribution's log-probs of them, from generate's processed scores."""
    prompts = [prompt_ids(policy.tokenizer, build_messages(get_task(t))) for t in ("19_ReLU", "88_MinGPTNewGelu")]
    gen_config, processors = generation_settings(policy, settings)
    gen_config.eos_token_id = None  # every row runs all steps
    ids, att = left_pad(prompts, policy.pad_id, policy.device)
    policy.model.eval()
    torch.manual_seed(seed)
    with torch.no_grad():
        out = policy.model.generate(
            input_ids=ids, attention_mask=att, generation_config=gen_config, logits_processor=processors,
            return_dict_in_generate=True, output_scores=True,
        )
    new = out.sequences[:, ids.shape[1] :]
    assert new.shape[1] == STEPS
    sampled = torch.stack(
        [torch.log_softmax(s.float(), -1).gather(-1, new[:, k : k + 1]).squeeze(-1) for k, s in enumerate(out.scores)],
        dim=1,
    )
    seqs = [
        TrainingSequence(tuple(p) + tuple(new[i].tolist()), (0,) * len(p) + (1,) * STEPS, (0.0,) * len(p) + (1.0,) * STEPS)
        for i, p in enumerate(prompts)
    ]
    return seqs, sampled


@pytest.mark.parametrize("temperature, top_p", [(0.8, 1.0), (0.8, 0.9), (1.0, 1.0)])
def test_token_logprobs_equal_the_sampling_distribution(padded_policy, temperature, top_p):
    settings = SamplingSettings(max_new_tokens=STEPS, temperature=temperature, top_p=top_p)
    seqs, sampled = _sample_with_scores(padded_policy, settings, seed=3)
    batch = collate(seqs, padded_policy.pad_id, "cpu")
    with torch.no_grad():
        logp, _ = token_logprobs(padded_policy.model, batch, padded_policy.vocab_limit, temperature, top_p)
        raw, _ = token_logprobs(padded_policy.model, batch, padded_policy.vocab_limit)
    assert torch.isfinite(logp).all()
    assert (logp[:, -STEPS:] - sampled).abs().max() < 1e-5, (logp[:, -STEPS:], sampled)
    if temperature != 1.0:  # the raw softmax (what the loss took before) is another distribution
        assert (raw[:, -STEPS:] - sampled).abs().max() > 1e-3


def test_the_update_scores_tokens_at_the_training_temperature(padded_policy, tiny_trainer_config):
    """apply_update's mean log-prob (taken before its step) is the sampling distribution's, at T = 0.8."""
    cfg = dataclasses.replace(tiny_trainer_config, temperature=0.8, top_p=1.0, learning_rate=1e-6)
    seqs, sampled = _sample_with_scores(padded_policy, SamplingSettings(STEPS, temperature=0.8), seed=5)
    state = {n: p.detach().clone() for n, p in padded_policy.trainable_parameters()}
    opt = build_optimizer(padded_policy, cfg)
    result = apply_update(padded_policy, opt, build_scheduler(opt, cfg, None), seqs, cfg)
    with torch.no_grad():  # put the adapter back for the other tests of this module
        for n, p in padded_policy.trainable_parameters():
            p.copy_(state[n])
    assert result.tokens == 2 * STEPS
    assert result.mean_logp == pytest.approx(float(sampled.mean()), abs=1e-5)


def test_kl_reference_is_taken_at_the_training_temperature(padded_policy, tiny_trainer_config):
    """With the adapter on and kl_weight > 0, k3 against the base model is computed at T = 0.8 too:
    the update's KL equals k3 of the base's and the policy's temperature-0.8 log-probs."""
    cfg = dataclasses.replace(tiny_trainer_config, temperature=0.8, kl_weight=0.5, learning_rate=1e-6)
    seqs, _ = _sample_with_scores(padded_policy, SamplingSettings(STEPS, temperature=0.8), seed=7)
    batch = collate(seqs, padded_policy.pad_id, "cpu")
    with torch.no_grad():
        logp, first = token_logprobs(padded_policy.model, batch, padded_policy.vocab_limit, 0.8)
        with padded_policy.model.disable_adapter():
            ref, _ = token_logprobs(padded_policy.model, batch, padded_policy.vocab_limit, 0.8)
    mask = batch.loss_mask[:, first:]
    delta = ref - logp
    expected = float(((torch.exp(delta) - delta - 1.0) * mask).sum() / mask.sum())
    state = {n: p.detach().clone() for n, p in padded_policy.trainable_parameters()}
    opt = build_optimizer(padded_policy, cfg)
    result = apply_update(padded_policy, opt, build_scheduler(opt, cfg, None), seqs, cfg)
    with torch.no_grad():
        for n, p in padded_policy.trainable_parameters():
            p.copy_(state[n])
    assert expected > 1e-4  # the adapter is non-zero, so there is a KL to measure
    assert result.kl == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("backend", ["eager", "static_compiled"])
def test_generate_records_the_sampling_logprobs_the_loss_recomputes(padded_policy, backend):
    """Each sampled id carries log pi_sample(id), recorded from the sampler's final scores: in float32 the
    training forward at the same temperature and top_p gives them back (so the importance ratio is 1)."""
    from kernelflow.train.config import GenerationSettings
    from kernelflow.train.generation import generate

    # eager: the unmerged model (exactly the training forward); static: merged (float32, within 1e-5)
    padded_policy.generation = GenerationSettings(merge_adapter=backend != "eager", backend=backend, compile=False,
                                                  length_bucket=64)
    prompts = [prompt_ids(padded_policy.tokenizer, build_messages(get_task(t))) for t in ("19_ReLU", "22_Tanh")]
    torch.manual_seed(4)
    result = generate(padded_policy, prompts, SamplingSettings(max_new_tokens=STEPS, temperature=0.8, top_p=0.9))
    seqs = []
    for p, c in zip(prompts, result.completions, strict=True):
        assert c.logprobs is not None and len(c.logprobs) == len(c.ids)
        n = len(c.ids)
        seqs.append(TrainingSequence(tuple(p) + c.ids, (0,) * len(p) + (1,) * n, (0.0,) * len(p) + (1.0,) * n))
    batch = collate(seqs, padded_policy.pad_id, "cpu")
    with torch.no_grad():
        logp, first = token_logprobs(padded_policy.model, batch, padded_policy.vocab_limit, 0.8, 0.9)
    mask = batch.loss_mask[:, first:]
    for i, c in enumerate(result.completions):
        trained = logp[i][mask[i] == 1]
        assert torch.allclose(trained, torch.tensor(c.logprobs), atol=1e-5), (trained, c.logprobs)
    greedy = generate(padded_policy, prompts, SamplingSettings(max_new_tokens=3, do_sample=False))
    assert all(c.logprobs is None for c in greedy.completions)
