"""The loop against an in-process fake environment: rollouts, metrics, evaluation, checkpoints and exact resume."""

import dataclasses
import json

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from kernelflow.train.checkpoint import CheckpointInfo, verify_checkpoint
from kernelflow.train.evaluation import TaskEvalResult
from kernelflow.train.metrics import UpdateMetrics
from kernelflow.train.policy import load_policy
from kernelflow.train.trainer import GRPOLoop

from .conftest import FakeSession

TASKS = ["19_ReLU", "21_Sigmoid"]


def make_loop(cfg, factory, **kw):
    policy = load_policy(cfg.policy, cfg.lora, seed=cfg.seed)
    return GRPOLoop(cfg, policy, session_factory=factory, **kw)


def lora_state(loop):
    return {n: p.detach().clone() for n, p in loop.policy.trainable_parameters()}


def test_epoch_makes_one_update_per_task_with_full_metrics(tiny_trainer_config, fake_env):
    cfg = dataclasses.replace(tiny_trainer_config, env_seed=5, env_shape="small")
    sessions = []

    def factory():
        s = FakeSession()
        sessions.append(s)
        return s

    loop = make_loop(cfg, factory, total_updates=4)
    FakeSession.log.clear()
    metrics = loop.train_epoch(1, TASKS)
    assert [m.update for m in metrics] == [1, 2] and loop.updates == 2 and loop.epochs_completed == 1
    assert sorted(m.task_id for m in metrics) == sorted(TASKS)
    assert len(sessions) == 2 * cfg.group_size and all(s.closed for s in sessions)
    assert all(entry[2:] == (5, "small") for entry in FakeSession.log)  # seed and shape reach reset
    m = metrics[0]
    assert m.group_size_per_turn == (2, 2) and len(m.correct_rate_per_turn) == 2
    assert sum(m.status_counts.values()) == cfg.group_size * cfg.max_turns
    assert 1 <= m.completion_tokens_mean <= cfg.max_new_tokens and 0 <= m.truncation_rate <= 1
    assert m.generation_tokens > 0 and m.generation_tokens_per_s > 0
    assert m.update_seconds >= m.generation_seconds + m.optimisation_seconds
    assert m.lr == cfg.learning_rate and m.grad_norm >= 0 and m.trained_tokens > 0
    assert 1 <= len(m.samples) <= cfg.samples_per_update
    scalars = m.scalars()
    assert {"loss", "grad_norm", "reward_mean", "correct_rate_turn1", "group_size_turn2"} <= set(scalars)
    assert all(isinstance(v, float) for v in scalars.values())
    for update in metrics:  # updates.json's record reads back as the same typed record
        assert UpdateMetrics.from_dict(json.loads(json.dumps(update.to_dict()))) == update
    assert "update 1/4" in m.summary(4)


def test_trloo_with_early_stop_logs_a_varying_group_size(tiny_trainer_config, fake_env):
    cfg = dataclasses.replace(tiny_trainer_config, estimator="trloo", group_size=4)
    loop = make_loop(cfg, fake_env(stop_when_correct=True))
    sizes = [m.group_size_per_turn for m in loop.train_epoch(1, TASKS)]
    for s in sizes:
        assert s[0] == 4 and (len(s) == 1 or s[1] <= 4)
    assert any(len(s) == 1 or s[1] < 4 for s in sizes), sizes  # some episode stopped after turn 1


def test_epochs_must_follow_in_order(tiny_trainer_config, fake_env):
    loop = make_loop(tiny_trainer_config, fake_env())
    with pytest.raises(ValueError, match="run epoch 1 next"):
        loop.train_epoch(2, TASKS)


def test_environment_turns_must_match_the_config(tiny_trainer_config, fake_env):
    loop = make_loop(tiny_trainer_config, fake_env(max_turns=3))
    with pytest.raises(ValueError, match="allows 3 turns per episode but trainer.max_turns=2"):
        loop.train_epoch(1, TASKS[:1])


def test_greedy_evaluation_is_batched_deterministic_and_stops_when_correct(tiny_trainer_config, fake_env):
    loop = make_loop(tiny_trainer_config, fake_env())
    a = loop.greedy_evaluate(TASKS + ["23_Softmax"])
    b = loop.greedy_evaluate(TASKS + ["23_Softmax"])
    assert [r.to_dict() for r in a] == [r.to_dict() for r in b]
    assert [r.task_id for r in a] == TASKS + ["23_Softmax"]
    for r in a:
        assert len(r.turns) == (1 if r.turns[0].correct else 2)
        assert r.correct == any(t.correct for t in r.turns) and r.turns[0].turn == 1
        assert TaskEvalResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r  # results.json reads back
    assert loop.last_eval_timing.tasks == 3
    loop.config = dataclasses.replace(tiny_trainer_config, eval_batch_size=2)
    assert [r.to_dict() for r in loop.greedy_evaluate(TASKS + ["23_Softmax"])] == [r.to_dict() for r in a]
    loop.config = dataclasses.replace(tiny_trainer_config, eval_attempts=1)
    assert all(len(r.turns) == 1 for r in loop.greedy_evaluate(TASKS))


def test_resume_from_checkpoint_makes_the_same_next_update(tiny_trainer_config, fake_env, tmp_path):
    cfg = tiny_trainer_config
    straight = make_loop(cfg, fake_env())
    straight.train_epoch(1, TASKS)
    straight.save_checkpoint(tmp_path / "epoch-1")
    m_straight = straight.train_epoch(2, TASKS)
    w_straight = lora_state(straight)

    torch.manual_seed(12345)  # a different process state before resuming must not matter
    resumed = make_loop(cfg, fake_env())
    info = resumed.load_checkpoint(tmp_path / "epoch-1")
    assert (info.updates, info.epochs_completed, info.train_tasks) == (2, 1, tuple(TASKS))
    m_resumed = resumed.train_epoch(2, TASKS)
    for a, b in zip(m_straight, m_resumed, strict=True):
        assert (a.task_id, a.loss, a.grad_norm, a.reward_mean) == (b.task_id, b.loss, b.grad_norm, b.reward_mean)
    w_resumed = lora_state(resumed)
    assert all(torch.equal(w_straight[n], w_resumed[n]) for n in w_straight)


def test_checkpoint_is_a_standard_peft_adapter_with_hashes_and_a_card(tiny_trainer_config, fake_env, tmp_path):
    loop = make_loop(tiny_trainer_config, fake_env())
    loop.train_epoch(1, TASKS[:1])
    results = loop.greedy_evaluate(TASKS)
    info = loop.save_checkpoint(tmp_path / "final", eval_results={"trained": results})
    meta = verify_checkpoint(info.path)
    assert CheckpointInfo.read(info.path) == info  # what a process that did not write it reads back
    assert meta["updates"] == 1 and meta["seed"] == tiny_trainer_config.seed
    assert meta["base_model"] == loop.policy.base_id and meta["base_revision"] is None
    assert set(meta["weight_sha256"]) == {"adapter/adapter_model.safetensors"}
    assert "training_state.pt" in meta["sha256"]

    base = AutoModelForCausalLM.from_pretrained(loop.policy.base_id)
    peft_model = PeftModel.from_pretrained(base, str(info.adapter_path))
    ids = torch.tensor([loop.policy.tokenizer("def forward(self, x):")["input_ids"]])
    loop.policy.model.eval()
    with torch.no_grad():
        assert torch.allclose(peft_model(input_ids=ids).logits, loop.policy.model(input_ids=ids).logits, atol=1e-6)

    card = (info.adapter_path / "README.md").read_text()
    assert card.startswith("---\n") and "library_name: peft" in card
    assert meta["weight_sha256"]["adapter/adapter_model.safetensors"] in card
    assert "PeftModel.from_pretrained" in card and "### trained" in card and "19_ReLU" in card

    (info.adapter_path / "adapter_model.safetensors").write_bytes(b"corrupt")
    with pytest.raises(ValueError, match="sha256"):
        loop.load_checkpoint(info.path)


def test_checkpoint_refuses_another_base_model(tiny_trainer_config, fake_env, tmp_path):
    loop = make_loop(tiny_trainer_config, fake_env())
    loop.save_checkpoint(tmp_path / "c")
    other_cfg = dataclasses.replace(
        tiny_trainer_config,
        policy=dataclasses.replace(
            tiny_trainer_config.policy, tiny=dataclasses.replace(tiny_trainer_config.policy.tiny, seed=99)
        ),
    )
    other = make_loop(other_cfg, fake_env())
    with pytest.raises(ValueError, match="load the same base model"):
        other.load_checkpoint(tmp_path / "c")


def test_turn_credit_reaches_the_update(tiny_trainer_config):
    """trainer.credit=turn: the second turn's tokens are credited with r2's baseline, not the episode's."""
    script = iter([(0.0, 3.0), (3.0, 0.0)])  # sessions are made in rollout order: rollout 0 repairs, 1 breaks

    def factory():
        rewards = iter(next(script))
        return FakeSession(reward_fn=lambda code: next(rewards))

    for credit, expected in (("episode", 0.9), ("turn", (0.9 + 0.9 + 1.5 + 1.5) / 4)):
        script = iter([(0.0, 3.0), (3.0, 0.0)])
        loop = make_loop(dataclasses.replace(tiny_trainer_config, credit=credit), factory)
        m = loop.train_group(1, "19_ReLU")
        # episode: R = (1.2, 3.0) -> -0.9, +0.9 on every turn; turn: G_1 -> -0.9, +0.9 and G_2 = (3, 0) -> +1.5, -1.5
        assert m.credit == credit
        assert m.advantage_abs_mean == pytest.approx(expected)


def test_zero_advantage_update_is_skipped_and_says_so_in_its_metrics(tiny_trainer_config):
    """Every rollout earns the same reward: the update's metrics say it was skipped; weights do not move."""
    loop = make_loop(tiny_trainer_config, lambda: FakeSession(reward_fn=lambda code: 0.0))
    before = lora_state(loop)
    m = loop.train_group(1, "19_ReLU")
    assert m.update_skipped and m.scalars()["update_skipped"] == 1.0 and m.trained_tokens == 0
    assert "skipped" in m.summary()
    assert all(torch.equal(p, before[n]) for n, p in loop.policy.trainable_parameters())
    assert loop.updates == 1  # it still counts as an update (the schedule and the task order move on)


def test_generation_metrics_count_tokens_produced_and_decode_steps(tiny_trainer_config):
    m = make_loop(tiny_trainer_config, FakeSession).train_group(1, "19_ReLU")
    turns = m.group_size_per_turn
    # each turn's batch runs at most max_new_tokens steps, and produces at most one token per row per step
    assert len(turns) <= m.generation_decode_steps <= len(turns) * tiny_trainer_config.max_new_tokens
    assert m.generation_decode_steps <= m.generation_tokens <= sum(turns) * m.generation_decode_steps
    assert m.generation_steps_per_s == pytest.approx(m.generation_decode_steps / m.generation_seconds)
    assert not m.update_skipped


def test_sampling_logprobs_travel_from_generation_to_the_importance_weights(tiny_trainer_config):
    """importance_sampling=token_truncate through the loop: every turn carries the sampler's log-probs, and
    merged float32 sampling gives ratios of 1 against the unmerged update forward (bf16 would not)."""
    cfg = dataclasses.replace(tiny_trainer_config, importance_sampling="token_truncate")
    loop = make_loop(cfg, FakeSession)
    m = loop.train_group(1, "19_ReLU")
    assert not m.update_skipped and m.trained_tokens > 0
    assert m.is_ratio_mean == pytest.approx(1.0, abs=1e-4) and m.logp_diff_max < 1e-4
    assert m.scalars()["is_truncated_fraction"] == 0.0


def test_rollout_groups_generate_several_groups_in_one_batch_then_update_each(tiny_trainer_config, monkeypatch):
    import kernelflow.train.rollout as rollout_module

    batch_rows = []
    real_generate = rollout_module.generate

    def spy(policy, prompts, settings):
        batch_rows.append(len(prompts))
        return real_generate(policy, prompts, settings)

    monkeypatch.setattr(rollout_module, "generate", spy)
    cfg = dataclasses.replace(tiny_trainer_config, rollout_groups=2, env_seed=3, env_seed_per_update=True)
    FakeSession.log.clear()
    loop = make_loop(cfg, FakeSession)
    metrics = loop.train_epoch(1, TASKS)
    assert batch_rows == [4, 4]  # turn 1 and turn 2, each one batch of 2 groups x 2 episodes
    assert [m.rollout_staleness for m in metrics] == [0, 1] and loop.updates == 2
    assert [m.task_id for m in metrics] == loop.task_order(1, TASKS)
    by_task = {}
    for _, task, seed, _ in FakeSession.log:
        by_task.setdefault(task, set()).add(seed)
    assert {task: seeds for task, seeds in by_task.items()} == {metrics[0].task_id: {3}, metrics[1].task_id: {4}}
    for m in metrics:
        assert m.group_size_per_turn == (2, 2) and sum(m.status_counts.values()) == 4
        assert m.generation_tokens > 0 and m.update_seconds >= m.generation_seconds + m.optimisation_seconds
