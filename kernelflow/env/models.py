"""The environment's wire types: one action, one observation, one state (pydantic, as OpenEnv wants).

Everything a client needs travels in declared fields: openenv-core 0.3.0 drops `Observation.metadata`
on the wire, so nothing is put there. These models import no evaluator code, so the trainer can use
them (and the client) without the evaluation layer.

- `KernelAction.code`: the model's whole answer, raw Python or with a fenced ```python block (the
  evaluator extracts the code).
- `KernelObservation`: on reset the task prompt (`prompt`, `messages`); on each step the judgement of
  that submission (status, timing, feedback, the full verdict) and the step reward; once the episode
  is done also the per-turn returns and the episode return.
- `KernelState`: the episode so far (task, seed, shape, turn, every verdict, rewards, returns).

It also holds the protocol constants server and client share (the info path, the token variable).
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field, StrictStr

INFO_PATH = "/kernelflow/info"  # GET: evaluator version, backend, device, config hash, episode settings
TOKEN_ENV_VAR = "KERNELFLOW_ENV_TOKEN"  # the access token, on the server and (as a fallback) the client


class KernelAction(Action):
    """One submission: the model's answer text (raw code or a fenced ```python block)."""

    code: StrictStr = Field(description="The model's answer: a Python module, raw or in a ```python block")


class KernelObservation(Observation):
    """What the agent sees after reset (the prompt) or after a step (the verdict on its submission)."""

    prompt: str | None = Field(default=None, description="On reset: the task prompt as plain text")
    messages: list[dict[str, str]] | None = Field(
        default=None, description="On reset: the chat messages (system, user) for the first turn"
    )
    task_id: str | None = Field(default=None, description="The episode's task id (KernelBench file stem)")
    turn: int = Field(default=0, ge=0, description="Submissions judged so far in this episode")
    max_turns: int = Field(default=0, ge=0, description="Submissions allowed per episode")
    status: str | None = Field(default=None, description="The verdict's status (ok, incorrect, compile_error, ...)")
    compiled: bool | None = Field(default=None, description="Whether the module imported and its kernels compiled")
    correct: bool | None = Field(default=None, description="Whether every correctness check passed")
    runtime_ms: float | None = Field(default=None, description="Median kernel time (None without timing)")
    t_min_ms: float | None = Field(default=None, description="The roofline floor for this task and shape")
    roofline_fraction: float | None = Field(default=None, description="t_min / runtime, capped at 1")
    speedup_vs_eager: float | None = Field(default=None, description="Eager PyTorch time / kernel time")
    feedback: str | None = Field(default=None, description="What the model reads before its next attempt")
    verdict: dict[str, Any] | None = Field(default=None, description="The evaluator's full verdict")
    rewards: list[float] = Field(default_factory=list, description="Per-turn rewards so far")
    returns: list[float] | None = Field(default=None, description="Once done: per-turn returns G_t")
    episode_return: float | None = Field(default=None, description="Once done: G_1 = r1 + gamma r2 + ...")


class KernelState(State):
    """The server-side episode: everything needed to audit it or to compute advantages."""

    task_id: str | None = None
    seed: int | None = None
    shape: str | None = None
    turn: int = 0
    max_turns: int = 0
    verdicts: list[dict[str, Any]] = Field(default_factory=list)
    rewards: list[float] = Field(default_factory=list)
    returns: list[float] | None = None
    episode_return: float | None = None
    done: bool = False
