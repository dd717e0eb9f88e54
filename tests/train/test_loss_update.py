"""The update path on fixed batches: masks, gradients, normaliser, which weights move, and which way."""

import dataclasses

import pytest
import torch

from kernelflow.tasks import build_messages, feedback_message, get_task
from kernelflow.train.advantages import Advantages
from kernelflow.train.config import LoraSettings
from kernelflow.train.loss import TrainingSequence, collate, policy_gradient_loss, token_logprobs, training_sequences
from kernelflow.train.policy import load_policy
from kernelflow.train.rollout import EpisodeRecord, TurnRecord
from kernelflow.train.transcript import feedback_ids, prompt_ids
from kernelflow.train.update import apply_update, build_optimizer, build_scheduler


@pytest.fixture
def policy(tiny_policy_config):
    return load_policy(tiny_policy_config, LoraSettings(r=4, alpha=8), seed=0)


def _turn(t, ids, fb=()):
    return TurnRecord(t, tuple(ids), tuple(fb), "", False, "ok", True, 1.0, "", None, None)


def two_turn_episode(policy, rollout, t1, t2):
    tok = policy.tokenizer
    p = prompt_ids(tok, build_messages(get_task("19_ReLU")))
    fb = feedback_ids(tok, feedback_message("status: incorrect."), True, policy.turn_end_id)
    return EpisodeRecord("19_ReLU", rollout, 0, tuple(p), (_turn(0, t1, fb), _turn(1, t2)), (0.0, 1.0), (0.4, 1.0), 0.4)


def test_training_sequences_spread_each_turns_advantage_over_its_tokens(policy):
    ep = two_turn_episode(policy, 0, [100, 101, policy.turn_end_id], [102, policy.turn_end_id])
    seq = training_sequences([ep], Advantages(((0.5, -2.0),), (1, 1)))[0]
    n_prompt, n_fb = len(ep.prompt_ids), len(ep.turns[0].feedback_ids)
    assert seq.mask == (0,) * n_prompt + (1, 1, 1) + (0,) * n_fb + (1, 1)
    assert seq.advantages == (0.0,) * n_prompt + (0.5,) * 3 + (0.0,) * n_fb + (-2.0,) * 2


def test_prompt_and_feedback_tokens_get_exactly_zero_gradient(policy):
    ep = two_turn_episode(policy, 0, [100, 101, policy.turn_end_id], [102, 103, policy.turn_end_id])
    seq = training_sequences([ep], Advantages(((1.5, -0.7),), (1, 1)))[0]
    batch = collate([seq], policy.pad_id, "cpu")
    logp, first = token_logprobs(policy.model, batch, policy.vocab_limit)
    logp.retain_grad()
    mask, adv = batch.loss_mask[:, first:], batch.advantages[:, first:]
    loss, stats = policy_gradient_loss(logp, mask, adv, denominator=4.0 * 16)
    loss.backward()
    g = logp.grad[0]
    assert stats["tokens"] == 6
    assert torch.equal(g[mask[0] == 0], torch.zeros(int((mask[0] == 0).sum())))  # feedback: exactly 0
    assert torch.allclose(g[mask[0] == 1], -adv[0][mask[0] == 1] / 64.0)  # model tokens: -A / (G * L)
    assert first == len(ep.prompt_ids) - 1  # prompt targets are not even materialised


def test_loss_is_token_sum_over_a_constant(policy):
    logp = torch.tensor([[-1.0, -2.0, -3.0, -4.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0, 1.0]])
    adv = torch.tensor([[2.0, 9.0, -1.0, -1.0]])
    loss, _ = policy_gradient_loss(logp, mask, adv, denominator=10.0)
    assert float(loss) == pytest.approx((2.0 * 1.0 + -1.0 * 3.0 + -1.0 * 4.0) / 10.0)
    # a KL term needs the reference and is non-negative
    with pytest.raises(ValueError, match="reference"):
        policy_gradient_loss(logp, mask, adv, 10.0, kl_weight=0.1)
    kl_loss, stats = policy_gradient_loss(logp, mask, adv, 10.0, ref_logp=logp - 0.5, kl_weight=0.1)
    assert float(kl_loss) > float(loss) and stats["kl_sum"] > 0


def _group(policy):
    a = two_turn_episode(policy, 0, [100, 101, policy.turn_end_id], [102, policy.turn_end_id])
    b = two_turn_episode(policy, 1, [110, 111, 112, 113, policy.turn_end_id], [114, policy.turn_end_id])
    return training_sequences([a, b], Advantages(((1.0, 0.5), (-1.0, -0.5)), (2, 2)))


def test_update_changes_lora_weights_and_no_base_weight(policy, tiny_trainer_config):
    cfg = tiny_trainer_config
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    opt = build_optimizer(policy, cfg)
    res = apply_update(policy, opt, build_scheduler(opt, cfg, None), _group(policy), cfg)
    assert res.grad_norm > 0 and res.tokens == 12 and res.lr == cfg.learning_rate
    changed = {n for n, p in policy.model.named_parameters() if not torch.equal(p, before[n])}
    lora = {n for n, _ in policy.trainable_parameters()}
    assert changed and changed <= lora
    assert {n for n in lora if "lora_B" in n} <= changed  # every B moved off zero
    base = [n for n in before if n not in lora]
    assert base and all(torch.equal(dict(policy.model.named_parameters())[n], before[n]) for n in base)


def test_micro_batching_does_not_change_the_update(tiny_policy_config, tiny_trainer_config):
    results = []
    for mb in (1, 2):
        pol = load_policy(tiny_policy_config, LoraSettings(r=4, alpha=8), seed=0)
        # eps 1 makes Adam's first step proportional to the gradient (not its sign), so this compares gradients
        cfg = dataclasses.replace(tiny_trainer_config, micro_batch_size=mb, adam_eps=1.0, learning_rate=1.0)
        opt = build_optimizer(pol, cfg)
        apply_update(pol, opt, build_scheduler(opt, cfg, None), _group(pol), cfg)
        results.append({n: p.detach().clone() for n, p in pol.trainable_parameters()})
    for n in results[0]:
        diff = (results[0][n] - results[1][n]).abs().max()
        assert diff <= 1e-5 * results[0][n].abs().max(), (n, float(diff))


def test_higher_advantage_completion_gains_log_probability(policy, tiny_trainer_config):
    cfg = dataclasses.replace(tiny_trainer_config, learning_rate=5e-3)
    p = prompt_ids(policy.tokenizer, build_messages(get_task("21_Sigmoid")))
    good, bad = [200, 201, 202, policy.turn_end_id], [300, 301, 302, policy.turn_end_id]

    def seq(c, a):
        return TrainingSequence(tuple(p) + tuple(c), (0,) * len(p) + (1,) * len(c), (0.0,) * len(p) + (a,) * len(c))

    def completion_logp(c):
        batch = collate([seq(c, 0.0)], policy.pad_id, "cpu")
        with torch.no_grad():
            lp, first = token_logprobs(policy.model, batch, policy.vocab_limit)
        return float((lp * batch.loss_mask[:, first:]).sum())

    g0, b0 = completion_logp(good), completion_logp(bad)
    opt = build_optimizer(policy, cfg)
    sched = build_scheduler(opt, cfg, None)
    for _ in range(3):
        apply_update(policy, opt, sched, [seq(good, 1.0), seq(bad, -1.0)], cfg)
    assert completion_logp(good) > g0 + 0.1
    assert completion_logp(bad) < b0 - 0.1


def test_schedulers(policy, tiny_trainer_config):
    cfg = dataclasses.replace(tiny_trainer_config, lr_scheduler="cosine", warmup_updates=1)
    opt = build_optimizer(policy, cfg)
    sched = build_scheduler(opt, cfg, total_updates=5)
    lrs = []
    for _ in range(5):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == pytest.approx(cfg.learning_rate / 2) and lrs[1] == pytest.approx(cfg.learning_rate)
    assert lrs[1] > lrs[2] > lrs[3] > lrs[4]
    with pytest.raises(ValueError, match="needs total_updates"):
        build_scheduler(opt, cfg, None)


def test_gradient_checkpointing_gives_the_same_update(tiny_policy_config, tiny_trainer_config):
    results = []
    for gc in (False, True):
        pcfg = dataclasses.replace(tiny_policy_config, gradient_checkpointing=gc)
        pol = load_policy(pcfg, LoraSettings(r=4, alpha=8), seed=0)
        cfg = dataclasses.replace(tiny_trainer_config, policy=pcfg, adam_eps=1.0, learning_rate=1.0)
        opt = build_optimizer(pol, cfg)
        res = apply_update(pol, opt, build_scheduler(opt, cfg, None), _group(pol), cfg)
        results.append((res, {n: p.detach().clone() for n, p in pol.trainable_parameters()}))
    assert results[0][0].grad_norm == pytest.approx(results[1][0].grad_norm, rel=1e-5)
    for n, w in results[0][1].items():
        assert torch.allclose(w, results[1][1][n], rtol=1e-4, atol=1e-7), n


def test_kl_term_uses_the_base_model_as_reference(policy, tiny_trainer_config):
    cfg = dataclasses.replace(tiny_trainer_config, kl_weight=0.5)
    opt = build_optimizer(policy, cfg)
    sched = build_scheduler(opt, cfg, None)
    first = apply_update(policy, opt, sched, _group(policy), cfg)
    assert first.kl == pytest.approx(0.0, abs=1e-6)  # LoRA B starts at 0: policy == reference
    second = apply_update(policy, opt, sched, _group(policy), cfg)
    assert second.kl > 0


def test_an_update_with_all_advantages_zero_skips_forward_backward_and_step(policy, tiny_trainer_config, monkeypatch):
    """Zero advantages (and no KL) give a zero gradient: nothing runs, nothing moves, and the result says so."""
    import kernelflow.train.update as update_module

    calls = []
    monkeypatch.setattr(update_module, "token_logprobs", lambda *a, **k: calls.append(1) or (_ for _ in ()).throw(
        AssertionError("forward ran")))
    cfg = dataclasses.replace(tiny_trainer_config, lr_scheduler="linear", warmup_updates=0)
    opt = build_optimizer(policy, cfg)
    sched = build_scheduler(opt, cfg, total_updates=4)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    zero = [dataclasses.replace(s, advantages=tuple(0.0 for _ in s.advantages)) for s in _group(policy)]
    res = apply_update(policy, opt, sched, zero, cfg)
    assert res.skipped and calls == [] and res.tokens == 0 and res.grad_norm == 0.0
    assert all(torch.equal(p, before[n]) for n, p in policy.model.named_parameters())
    assert opt.state == {} or all(not s for s in opt.state.values())  # AdamW never stepped
    assert opt.param_groups[0]["lr"] == pytest.approx(cfg.learning_rate * 3 / 4)  # the schedule still advanced
    # with a KL term the gradient is not zero, so the update runs
    monkeypatch.undo()
    kl_cfg = dataclasses.replace(tiny_trainer_config, kl_weight=0.1)
    assert not apply_update(policy, opt, sched, zero, kl_cfg).skipped
    nonzero = apply_update(policy, opt, sched, _group(policy), cfg)
    assert not nonzero.skipped and nonzero.tokens == 12


def test_truncated_importance_sampling_weights_each_token_by_the_capped_ratio():
    logp = torch.tensor([[-1.0, -2.0, -0.5, -3.0]], requires_grad=True)
    sampling = torch.tensor([[-1.0, -2.5, -2.0, -3.0]])  # ratios e^0, e^0.5, e^1.5 (capped at 3), masked
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    adv = torch.tensor([[1.0, 1.0, -2.0, 5.0]])
    loss, stats = policy_gradient_loss(logp, mask, adv, 10.0, sampling_logp=sampling, is_cap=3.0)
    loss.backward()
    w = torch.tensor([1.0, float(torch.exp(torch.tensor(0.5))), 3.0, 0.0])
    assert torch.allclose(logp.grad[0], -adv[0] * w * mask[0] / 10.0)  # the weight is not differentiated
    assert stats["is_truncated"] == 1 and stats["logp_diff_max"] == pytest.approx(1.5)
    assert stats["is_ratio_max"] == pytest.approx(float(torch.exp(torch.tensor(1.5))))
    with pytest.raises(ValueError, match="sampler's log-probabilities"):
        policy_gradient_loss(logp, mask, adv, 10.0, is_cap=3.0)


def test_importance_sampling_on_its_own_samples_is_a_ratio_of_one(policy, tiny_trainer_config):
    """Sampled through the unmerged float32 model, the recorded log-probs are the training forward's: the
    update with token_truncate reports ratio 1 and gives the same step as without it."""
    from kernelflow.train.config import GenerationSettings
    from kernelflow.train.generation import SamplingSettings, generate

    policy.generation = GenerationSettings(merge_adapter=False)
    tok = policy.tokenizer
    prompts = [prompt_ids(tok, build_messages(get_task(t))) for t in ("19_ReLU", "21_Sigmoid")]
    torch.manual_seed(0)
    gen = generate(policy, prompts, SamplingSettings(max_new_tokens=6, temperature=0.8))
    seqs = [TrainingSequence(tuple(p) + c.ids, (0,) * len(p) + (1,) * len(c.ids),
                             (0.0,) * len(p) + (a,) * len(c.ids), (0.0,) * len(p) + c.logprobs)
            for p, c, a in zip(prompts, gen.completions, (1.0, -1.0), strict=True)]
    results = []
    for mode in ("off", "token_truncate"):
        cfg = dataclasses.replace(tiny_trainer_config, temperature=0.8, importance_sampling=mode, adam_eps=1.0)
        pol_state = {n: p.detach().clone() for n, p in policy.trainable_parameters()}
        opt = build_optimizer(policy, cfg)
        res = apply_update(policy, opt, build_scheduler(opt, cfg, None), seqs, cfg)
        results.append((res, {n: p.detach().clone() for n, p in policy.trainable_parameters()}))
        with torch.no_grad():
            for n, p in policy.trainable_parameters():
                p.copy_(pol_state[n])
    off, on = results
    assert on[0].is_ratio_mean == pytest.approx(1.0, abs=1e-5) and on[0].logp_diff_max < 1e-5
    assert on[0].is_truncated_fraction == 0.0 and off[0].is_ratio_mean == 1.0
    for n, w in off[1].items():
        assert torch.allclose(w, on[1][n], atol=1e-6), n
