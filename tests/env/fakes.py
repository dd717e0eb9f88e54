"""A stand-in evaluator for fast in-process tests: verdicts from a lookup, rewards from compute_reward.

An answer containing "FAST" is correct at the roofline (reward 3.0), "HALF" correct at half of it
(reward 0.3 + 2.7 * 0.5 = 1.65), anything else incorrect (reward 0). `gate` lets a test hold an
evaluation open (to race it against other calls).
"""

from __future__ import annotations

import threading

from kernelflow.eval import RewardConfig, Verdict, code_sha256, compute_reward


class FakeEvaluator:
    def __init__(self, reward: RewardConfig | None = None):
        self.reward = reward or RewardConfig()
        self.calls: list[tuple[str, str, int, str]] = []
        self.closed = False
        self.gate: threading.Event | None = None

    def info(self) -> dict:
        return {"evaluator_version": "fake", "backend": "interpret", "device": "cpu", "config_hash": "f" * 64}

    def close(self) -> None:
        self.closed = True

    def evaluate(self, task_id: str, answer: str, *, seed: int, shape: str) -> Verdict:
        if self.gate is not None:
            assert self.gate.wait(30), "the test never opened the gate"
        self.calls.append((task_id, answer, seed, shape))
        t_min = 1.0
        if "FAST" in answer:
            status, runtime = "ok", 1.0
        elif "HALF" in answer:
            status, runtime = "ok", 2.0
        else:
            status, runtime = "incorrect", None
        correct = status == "ok"
        return Verdict(
            task_id=task_id, status=status, correct=correct,
            reward=compute_reward(correct, t_min if correct else None, runtime, self.reward),
            feedback=f"{status} (fake)", code_sha256=code_sha256(answer), evaluator_version="fake",
            backend="interpret", device="cpu", shape=shape, seeds=[seed],
            runtime_ms=runtime, t_min_ms=t_min if correct else None,
            roofline_fraction=(t_min / runtime) if correct else None,
        )
