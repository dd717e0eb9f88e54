"""Sampled evaluation (n episodes per task at a temperature) against the in-process fake environment.

The fake environment scores an answer by a hash of its text (conftest.py), so which samples are
correct depends on what the tiny random model samples; the tests check the structure, the counts
against the episodes, reproducibility from the evaluation's own seed, and that the training RNG is
left where it was.
"""

import dataclasses
import json

import pytest
import torch

from kernelflow.train.evaluation import SampledEvalSettings, SampledTaskResult, sample_evaluate
from kernelflow.train.policy import load_policy
from kernelflow.train.trainer import GRPOLoop

from .conftest import FakeSession

TASKS = ["19_ReLU", "21_Sigmoid", "23_Softmax"]


@pytest.fixture
def loop(tiny_trainer_config, fake_env):
    cfg = dataclasses.replace(tiny_trainer_config, eval_batch_size=4, env_seed=3)
    policy = load_policy(cfg.policy, cfg.lora, seed=cfg.seed)
    return GRPOLoop(cfg, policy, session_factory=fake_env())


def answers(results):
    return [[t.answer for t in e.turns] for r in results for e in r.episodes]


def test_n_sampled_episodes_per_task_with_counts_that_match_them(loop):
    FakeSession.log.clear()
    results = loop.sample_evaluate(TASKS, SampledEvalSettings(samples=5, temperature=1.0))
    assert [r.task_id for r in results] == TASKS
    for r in results:
        assert r.samples == len(r.episodes) == 5 and r.seed == 3
        assert {e.task_id for e in r.episodes} == {r.task_id}
        assert r.first_correct == sum(e.turns[0].correct for e in r.episodes)
        assert r.correct == sum(any(t.correct for t in e.turns) for e in r.episodes)
        for e in r.episodes:  # the greedy evaluation's structure: a second attempt only after a failure
            assert len(e.turns) == (1 if e.turns[0].correct else 2)
        d = json.loads(json.dumps(r.to_dict()))
        assert (d["samples"], d["first_correct"], d["correct"]) == (5, r.first_correct, r.correct)
        assert len(d["episodes"]) == 5 and SampledTaskResult.from_dict(d) == r  # results.json reads back
    resets = [entry for entry in FakeSession.log if entry[0] == "reset"]
    assert len(resets) == 15 and {seed for _, _, seed, _ in resets} == {3}  # every episode on the evaluation inputs
    # sampled, not greedy: the five first answers of a task are not all the same text
    assert all(len({e.turns[0].answer for e in r.episodes}) > 1 for r in results)
    assert loop.last_eval_timing.tasks == 3 and loop.last_eval_timing.generation_tokens > 0


def test_the_same_seed_draws_the_same_samples_and_training_rng_is_untouched(loop):
    settings = SampledEvalSettings(samples=3, temperature=1.0, seed=11)
    before = torch.get_rng_state()
    a = loop.sample_evaluate(TASKS, settings)
    assert torch.equal(torch.get_rng_state(), before)  # training draws the same as without the evaluation
    torch.rand(7)  # the global RNG moves on; the evaluation's own seed still decides its samples
    b = loop.sample_evaluate(TASKS, settings)
    assert answers(a) == answers(b)
    c = loop.sample_evaluate(TASKS, dataclasses.replace(settings, seed=12))
    assert answers(c) != answers(a)


def test_the_seed_defaults_to_the_trainer_seed(loop):
    a = loop.sample_evaluate(TASKS[:1], SampledEvalSettings(samples=2, temperature=1.0))
    b = loop.sample_evaluate(TASKS[:1], SampledEvalSettings(samples=2, temperature=1.0, seed=loop.config.seed))
    assert answers(a) == answers(b)


def test_single_attempt_samples(loop):
    results = loop.sample_evaluate(TASKS, SampledEvalSettings(samples=2, temperature=1.0, attempts=1))
    assert all(len(e.turns) == 1 for r in results for e in r.episodes)
    assert all(r.first_correct == r.correct for r in results)


def test_bad_requests_fail_naming_the_setting(loop):
    with pytest.raises(ValueError, match="samples >= 1"):
        loop.sample_evaluate(TASKS, SampledEvalSettings(samples=0))
    with pytest.raises(ValueError, match="repeated task ids"):
        loop.sample_evaluate(["19_ReLU", "19_ReLU"], SampledEvalSettings(samples=1))
    with pytest.raises(ValueError, match="attempts=3 > max_turns=2"):
        sample_evaluate(loop.policy, loop.sessions, TASKS, loop.config, SampledEvalSettings(samples=1, attempts=3))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"samples": -1}, "samples=-1"), ({"temperature": 0.0}, "temperature=0.0"), ({"top_p": 1.5}, "top_p=1.5"),
     ({"attempts": 0}, "attempts=0"), ({"seed": -2}, "seed=-2")],
)
def test_settings_check_themselves(kwargs, message):
    with pytest.raises(ValueError, match=f"invalid SampledEvalSettings: {message}"):
        SampledEvalSettings(**kwargs)
    assert not SampledEvalSettings().enabled and SampledEvalSettings(samples=1).enabled
