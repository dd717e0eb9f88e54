"""Fixtures for the trainer's tests: the tiny local model, a policy on it, and an in-process fake environment.

The fake environment speaks the env client's contract (reset/step/close, observations with messages,
feedback, reward, done, rewards, returns, episode_return) and scores an answer by a fixed rule on its
text, so rollouts, advantages and updates can be tested without a server. Its returns follow the
environment's definition (G_t = sum gamma^(k-t) r_k, gamma = 0.4); it is a test double, not a second
implementation used anywhere else. The live-server test (test_live_env.py) checks the real thing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import pytest

from kernelflow.tasks import build_messages, get_task
from kernelflow.train.config import LoraSettings, PolicyConfig, TinyModelConfig, TrainerConfig

GAMMA = 0.4


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny-models")


@pytest.fixture(scope="session")
def tiny_policy_config(tiny_cache) -> PolicyConfig:
    return PolicyConfig(
        source="tiny", dtype="float32", device="cpu", gradient_checkpointing=False,
        tiny=TinyModelConfig(), cache_dir=str(tiny_cache),
    )


@pytest.fixture
def tiny_trainer_config(tiny_policy_config) -> TrainerConfig:
    return TrainerConfig(
        policy=tiny_policy_config,
        lora=LoraSettings(r=4, alpha=8),
        group_size=2,
        max_new_tokens=8,
        max_turns=2,
        epochs=2,
        learning_rate=1e-2,  # tiny random model: gradients are small, a large rate makes steps visible
        seed=7,
    )


@dataclass
class FakeObservation:
    messages: list | None = None
    task_id: str = ""
    max_turns: int = 2
    turn: int = 0
    status: str = ""
    compiled: bool = False
    correct: bool = False
    reward: float | None = None
    feedback: str = ""
    runtime_ms: float | None = None
    roofline_fraction: float | None = None
    verdict: dict = field(default_factory=dict)
    done: bool = False
    rewards: list = field(default_factory=list)
    returns: list | None = None
    episode_return: float | None = None


def fake_reward(code: str) -> float:
    """A deterministic score of the answer text in [0, 3): varies across random answers."""
    return (hashlib.sha256(code.encode()).digest()[0] % 4) * 0.75


class FakeSession:
    """One episode; `stop_when_correct` ends it after a correct turn, like the env's early-stop option."""

    log: list = []

    def __init__(self, max_turns: int = 2, stop_when_correct: bool = False, reward_fn=fake_reward):
        self.max_turns = max_turns
        self.stop_when_correct = stop_when_correct
        self.reward_fn = reward_fn
        self.rewards: list[float] = []
        self.task_id = None
        self.closed = False

    def reset(self, task_id, seed=0, shape=None):
        self.task_id, self.rewards = task_id, []
        FakeSession.log.append(("reset", task_id, seed, shape))
        return FakeObservation(messages=build_messages(get_task(task_id)), task_id=task_id, max_turns=self.max_turns)

    def step(self, code):
        assert self.task_id is not None, "step before reset"
        r = self.reward_fn(code)
        self.rewards.append(r)
        correct = r > 0
        done = len(self.rewards) >= self.max_turns or (self.stop_when_correct and correct)
        obs = FakeObservation(
            task_id=self.task_id, max_turns=self.max_turns, turn=len(self.rewards),
            status="ok" if correct else "incorrect", compiled=True, correct=correct, reward=r,
            feedback=f"status: {'ok' if correct else 'incorrect'}. reward {r:.2f}.", done=done,
            rewards=list(self.rewards), verdict={"status": "ok" if correct else "incorrect", "reward": r},
        )
        if done:
            n = len(self.rewards)
            obs.returns = [sum(GAMMA ** (k - t) * self.rewards[k] for k in range(t, n)) for t in range(n)]
            obs.episode_return = obs.returns[0]
        return obs

    def close(self):
        self.closed = True


@pytest.fixture
def fake_env():
    """A factory of fake sessions; keyword arguments configure every session it makes."""

    def make(**kwargs):
        return lambda: FakeSession(**kwargs)

    return make
