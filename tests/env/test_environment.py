"""KernelEnvironment in process: episodes, rewards through the rubric, returns, and bad input.

Most tests use a stand-in evaluator (fast, exact rewards at any timing); the last one runs the real
interpreter-backend evaluator on a wrong and then an honest Triton ReLU.
"""

import pytest

from kernelflow.env.config import EnvServerConfig
from kernelflow.env.models import KernelAction, KernelObservation
from kernelflow.env.server.environment import EnvInputError, KernelEnvironment
from kernelflow.eval import EvalConfig
from kernelflow.tasks import build_messages, build_prompt_text, get_task
from tests.env.fakes import FakeEvaluator
from tests.env.kernels import HONEST_RELU, WRONG_RELU


def make_env(**kw):
    evaluator = FakeEvaluator()
    return KernelEnvironment(EnvServerConfig(**kw), evaluator=evaluator), evaluator


def test_reset_returns_the_prompt_and_messages():
    env, _ = make_env()
    obs = env.reset(task_id="21_Sigmoid", seed=7, shape="full")
    task = get_task("21_Sigmoid")
    assert obs.prompt == build_prompt_text(task)
    assert obs.messages == build_messages(task)
    assert (obs.task_id, obs.turn, obs.max_turns, obs.done, obs.reward, obs.rewards) == ("21_Sigmoid", 0, 2, False, None, [])
    state = env.state
    assert (state.task_id, state.seed, state.shape, state.turn, state.done) == ("21_Sigmoid", 7, "full", 0, False)


def test_two_turn_episode_rewards_and_returns():
    env, evaluator = make_env()
    env.reset(task_id="19_ReLU", seed=5)
    first = env.step(KernelAction(code="HALF"))
    assert first.reward == pytest.approx(1.65) and not first.done
    assert first.turn == 1 and first.rewards == [pytest.approx(1.65)]
    assert first.returns is None and first.episode_return is None
    assert env.rubric.last_score == pytest.approx(1.65)
    assert first.status == "ok" and first.correct and first.compiled and first.roofline_fraction == 0.5
    assert first.verdict["reward"] == first.reward and first.verdict["task_id"] == "19_ReLU"

    second = env.step(KernelAction(code="FAST"))
    assert second.done and second.turn == 2 and second.reward == pytest.approx(3.0)
    assert second.returns == [pytest.approx(1.65 + 0.4 * 3.0), pytest.approx(3.0)]
    assert second.episode_return == pytest.approx(2.85)
    state = env.state
    assert state.rewards == second.rewards and state.returns == second.returns
    assert state.episode_return == second.episode_return and state.done and state.step_count == 2
    assert [v["code_sha256"] for v in state.verdicts] == [first.verdict["code_sha256"], second.verdict["code_sha256"]]
    # the episode's seed and shape reach the evaluator on every turn
    assert [(c[0], c[2], c[3]) for c in evaluator.calls] == [("19_ReLU", 5, "small")] * 2


def test_stop_on_correct_ends_early_and_max_turns_is_honoured():
    env, _ = make_env(stop_on_correct=True, max_turns=3)
    env.reset(task_id="19_ReLU")
    assert not env.step(KernelAction(code="wrong")).done
    obs = env.step(KernelAction(code="FAST"))
    assert obs.done and obs.turn == 2 and obs.returns == [pytest.approx(1.2), pytest.approx(3.0)]

    env, _ = make_env(max_turns=3, gamma=0.5)
    env.reset(task_id="19_ReLU")
    obs = [env.step(KernelAction(code=c)) for c in ("FAST", "wrong", "HALF")]
    assert [o.done for o in obs] == [False, False, True]
    assert obs[-1].returns == [pytest.approx(3.0 + 0.25 * 1.65), pytest.approx(0.5 * 1.65), pytest.approx(1.65)]


def test_reset_starts_over_mid_episode():
    env, _ = make_env()
    env.reset(task_id="19_ReLU")
    env.step(KernelAction(code="FAST"))
    env.reset(task_id="22_Tanh", seed=1)
    state = env.state
    assert (state.task_id, state.turn, state.rewards, state.verdicts) == ("22_Tanh", 0, [], [])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({}, "reset needs task_id"),
        ({"task_id": "99_Nope"}, "unknown task '99_Nope'; list the ids with `kernelflow tasks`"),
        ({"task_id": "relu"}, "unknown task 'relu'; did you mean '19_ReLU'"),
        ({"task_id": 19}, "unknown task 19: a task id is a string"),
        ({"task_id": "19_ReLU", "seed": "3"}, "seed '3' must be an integer"),
        ({"task_id": "19_ReLU", "seed": True}, "seed True must be an integer"),
        ({"task_id": "19_ReLU", "seed": -1}, "seed -1 must be an integer"),
        ({"task_id": "19_ReLU", "shape": "huge"}, "unknown shape 'huge'"),
        ({"task_id": "19_ReLU", "temperature": 1.0}, r"unknown arguments \['temperature'\]"),
    ],
)
def test_bad_reset_is_a_clear_error_and_keeps_the_episode(kwargs, match):
    env, _ = make_env()
    env.reset(task_id="20_LeakyReLU", seed=4)
    env.step(KernelAction(code="HALF"))
    with pytest.raises(EnvInputError, match=match):
        env.reset(**kwargs)
    state = env.state
    assert (state.task_id, state.seed, state.turn) == ("20_LeakyReLU", 4, 1)
    assert env.step(KernelAction(code="FAST")).done


def test_step_errors_leave_the_session_usable():
    env, evaluator = make_env(max_code_chars=50)
    with pytest.raises(EnvInputError, match="step before reset"):
        env.step(KernelAction(code="FAST"))
    env.reset(task_id="19_ReLU")
    with pytest.raises(EnvInputError, match=r"51 characters, over this server's limit of 50 \(max_code_chars\)"):
        env.step(KernelAction(code="x" * 51))
    assert env.state.turn == 0 and evaluator.calls == []
    env.step(KernelAction(code="wrong"))
    env.step(KernelAction(code="FAST"))
    with pytest.raises(EnvInputError, match="the episode is done after 2 of 2 turns; send reset"):
        env.step(KernelAction(code="FAST"))
    assert env.state.turn == 2 and len(evaluator.calls) == 2
    env.reset(task_id="19_ReLU")
    assert env.step(KernelAction(code="FAST")).turn == 1


def test_close_keeps_a_shared_evaluator_and_refuses_further_use():
    env, evaluator = make_env()
    env.reset(task_id="19_ReLU")
    env.close()
    assert not evaluator.closed
    with pytest.raises(EnvInputError, match="session was closed"):
        env.step(KernelAction(code="FAST"))


def test_observation_declares_every_field_the_trainer_reads():
    # openenv-core 0.3.0 drops Observation.metadata: everything must be a declared field.
    needed = {
        "prompt", "messages", "task_id", "turn", "max_turns", "status", "compiled", "correct", "runtime_ms",
        "t_min_ms", "roofline_fraction", "speedup_vs_eager", "feedback", "verdict", "returns", "episode_return",
        "rewards", "done", "reward",
    }
    assert needed <= set(KernelObservation.model_fields)


@pytest.mark.slow
def test_real_evaluator_wrong_then_right_kernel():
    config = EnvServerConfig(eval=EvalConfig(backend="interpret", shape="small", seeds=1, timed_runs=1, max_workers=1))
    env = KernelEnvironment(config)
    try:
        env.reset(task_id="19_ReLU", seed=11)
        wrong = env.step(KernelAction(code=WRONG_RELU))
        assert wrong.status == "incorrect" and wrong.compiled and not wrong.correct and wrong.reward == 0.0
        assert wrong.feedback and not wrong.done
        right = env.step(KernelAction(code=HONEST_RELU))
        assert right.status == "ok" and right.correct and right.reward == pytest.approx(0.3), right.feedback
        assert right.done and right.rewards == [0.0, pytest.approx(0.3)]
        assert right.returns == [pytest.approx(0.12), pytest.approx(0.3)]
        assert right.episode_return == pytest.approx(0.12)
        assert right.verdict["seeds"] == [11]
    finally:
        env.close()


def test_real_evaluator_names_an_unfenced_syntax_error_and_keeps_prose_no_code():
    """Through the environment too: broken raw code is compile_error with line and column (decided by the
    static checks, before any worker starts), prose is no_code; both are turns of the episode."""
    config = EnvServerConfig(eval=EvalConfig(backend="interpret", shape="small", seeds=1, timed_runs=1, max_workers=1))
    env = KernelEnvironment(config)
    try:
        env.reset(task_id="19_ReLU", seed=1)
        broken = env.step(KernelAction(code="import torch\n\nclass ModelNew(torch.nn.Module:\n    pass\n"))
        assert broken.status == "compile_error" and not broken.compiled and broken.reward == 0.0
        assert "line 3, column" in broken.feedback and "SyntaxError" in broken.feedback, broken.feedback
        prose = env.step(KernelAction(code="I would write a masked Triton kernel for this."))
        assert prose.status == "no_code" and "```python block" in prose.feedback and prose.done
    finally:
        env.close()
