"""The kernel-writing environment: one multi-turn episode per WebSocket session.

`reset(task_id=..., seed=..., shape=...)` starts an episode and returns the task prompt. Each `step`
judges one submission through the shared `kernelflow.eval.Evaluator` (a bounded worker pool and a
per-GPU timing lock, shared by every session of the server) and returns its verdict, feedback and
reward. An episode allows `max_turns` submissions and is done after the last one, or after the first
correct one when `stop_on_correct` is set. The step reward is the evaluator's, read through
`VerdictRewardRubric`; the per-turn returns come from `kernelflow.env.returns` and are put into the
final observation and the state.

Bad input raises `EnvInputError`, a pydantic `ValidationError` whose one error names the field and
says what to send instead: OpenEnv's server answers pydantic validation errors with a
`VALIDATION_ERROR` frame (its code for invalid input; any other exception becomes
`EXECUTION_ERROR`, which here means a fault of ours) and keeps the session usable (the episode is
unchanged). Each episode start, each verdict (task, status, reward, seconds) and each episode end
(its last turn, or abandoned by a new reset or the session's end) is one info-level line on the
`kernelflow.env.server.environment` logger. An evaluation runs to completion even when
its client has gone: the evaluator bounds it by its own timeout, so its worker slot always returns.

This module does not serve anything (see `app.py`) and does not judge code (the evaluator does).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, Protocol

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata
from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from kernelflow.env.config import EnvServerConfig
from kernelflow.env.models import KernelAction, KernelObservation, KernelState
from kernelflow.env.returns import episode_return, per_turn_returns
from kernelflow.env.server.rubric import VerdictRewardRubric
from kernelflow.tasks import (
    FAMILY_TASKS,
    SHAPE_PROFILES,
    TASKS,
    build_messages,
    build_prompt_text,
    get_task,
    unknown_task_message,
)

log = logging.getLogger(__name__)

MAX_SEED = 2**63 - 1
RESET_ARGS = ("task_id", "seed", "shape", "episode_id")


class EvaluatorLike(Protocol):
    """What the environment needs from `kernelflow.eval.Evaluator` (a fake satisfies it in tests)."""

    def evaluate(self, task_id: str, answer_text: str, *, seed: int, shape: str) -> Any: ...

    def info(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


def build_evaluator(config: EnvServerConfig) -> EvaluatorLike:
    """The server's evaluator: this host's worker pool (`eval_backend="local"`, the default) or
    evaluation actors on a Ray cluster (`"ray"`, set up by `config.ray`; needs the `ray` extra)."""
    from kernelflow.eval import make_evaluator  # the evaluator's public API; Ray only for "ray"

    return make_evaluator(config.eval_backend, config.eval, config.ray)


# What bad input raises. pydantic's ValidationError (a ValueError), because that is what OpenEnv's
# WebSocket loop answers with VALIDATION_ERROR; `input_error` builds one.
EnvInputError = ValidationError


def input_error(field: str, message: str) -> ValidationError:
    """The error for bad client input: one `env_input` error at `field` whose text is `message`.

    The offending value is not echoed (it may be a 100 kB submission); `message` quotes what matters.
    """
    return ValidationError.from_exception_data(
        "kernelflow environment input",
        [{"type": PydanticCustomError("env_input", "{message}", {"message": message}), "loc": (field,), "input": None}],
    )


class KernelEnvironment(Environment[KernelAction, KernelObservation, KernelState]):
    """One session's episodes (see the module docstring).

    `evaluator`: the server-wide evaluator; when None, this environment builds its own from
    `config.eval` and closes it in `close()` (convenient in process, wasteful per session).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, config: EnvServerConfig | None = None, evaluator: EvaluatorLike | None = None):
        super().__init__(rubric=VerdictRewardRubric())
        self.config = config or EnvServerConfig()
        self._owns_evaluator = evaluator is None
        self._evaluator = build_evaluator(self.config) if evaluator is None else evaluator
        # The server reads `state` on its event loop while a step may run in the session's thread.
        self._lock = threading.Lock()
        self._state = KernelState(max_turns=self.config.max_turns)
        self._started = False
        self._closed = False

    # -- OpenEnv API -------------------------------------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        shape: str | None = None,
        **kwargs: Any,
    ) -> KernelObservation:
        """Start an episode of `task_id`; `seed` drives the evaluation inputs, `shape` the shape profile."""
        self._check_open()
        if kwargs:
            raise input_error(
                "data", f"reset got unknown arguments {sorted(kwargs)}; it accepts {', '.join(RESET_ARGS)}"
            )
        if task_id is None:
            raise input_error("task_id", f"reset needs task_id, one of: {', '.join(TASKS)}")
        # both suites: the pilot's and the second-tier families (`tasks=families` evaluates those)
        if not isinstance(task_id, str) or (task_id not in TASKS and task_id not in FAMILY_TASKS):
            raise input_error("task_id", unknown_task_message(task_id))  # the closest ids, as the CLI says
        seed = 0 if seed is None else seed
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
            raise input_error("seed", f"seed {seed!r} must be an integer in [0, 2**63 - 1]")
        shape = self.config.eval.shape if shape is None else shape
        if shape not in SHAPE_PROFILES:
            raise input_error("shape", f"unknown shape {shape!r}; choose one of {', '.join(SHAPE_PROFILES)}")
        if episode_id is not None and not isinstance(episode_id, str):
            raise input_error("episode_id", f"episode_id {episode_id!r} must be a string")

        task = get_task(task_id)
        self._reset_rubric()
        self._log_abandoned("a new reset")
        with self._lock:
            self._state = KernelState(
                episode_id=episode_id or uuid.uuid4().hex,
                step_count=0,
                task_id=task_id,
                seed=seed,
                shape=shape,
                turn=0,
                max_turns=self.config.max_turns,
            )
            self._started = True
        log.info("episode start: task %s, seed %d, shape %s, episode %s", task_id, seed, shape, self._state.episode_id)
        return KernelObservation(
            prompt=build_prompt_text(task),
            messages=build_messages(task),
            task_id=task_id,
            turn=0,
            max_turns=self.config.max_turns,
            rewards=[],
            done=False,
            reward=None,
        )

    def step(self, action: KernelAction, timeout_s: float | None = None, **kwargs: Any) -> KernelObservation:
        """Judge one submission; the evaluator's own timeout bounds it (`timeout_s` is not used)."""
        self._check_open()
        with self._lock:
            if not self._started:
                raise input_error("type", "step before reset: send reset(task_id=...) to start an episode first")
            if self._state.done:
                raise input_error(
                    "type", f"the episode is done after {self._state.turn} of {self._state.max_turns} turns; "
                    "send reset(task_id=...) to start a new one"
                )
            episode = self._state
            task_id, seed, shape = episode.task_id, episode.seed, episode.shape
        code = getattr(action, "code", None)
        if not isinstance(code, str):
            raise input_error("code", f"action.code must be a string, got {type(code).__name__}")
        if len(code) > self.config.max_code_chars:
            raise input_error(
                "code", f"the submission is {len(code)} characters, over this server's limit of "
                f"{self.config.max_code_chars} (max_code_chars); submit the module alone, without long comments"
            )

        # Outside the lock: an evaluation takes seconds to minutes.
        started = time.monotonic()
        verdict = self._evaluator.evaluate(task_id, code, seed=seed, shape=shape)
        seconds = time.monotonic() - started
        vdict = verdict.to_dict()

        obs = KernelObservation(
            task_id=task_id,
            max_turns=self.config.max_turns,
            status=verdict.status,
            compiled=verdict.compiled,
            correct=verdict.correct,
            runtime_ms=verdict.runtime_ms,
            t_min_ms=verdict.t_min_ms,
            roofline_fraction=verdict.roofline_fraction,
            speedup_vs_eager=verdict.speedup_vs_eager,
            feedback=verdict.feedback,
            verdict=vdict,
        )
        reward = self._apply_rubric(action, obs)

        with self._lock:
            state = self._state
            if state is not episode or state.done:  # a reset raced this step (cannot happen over one socket)
                raise input_error("session", "the episode changed while this submission was judged; its verdict was dropped")
            state.turn += 1
            state.step_count += 1
            state.verdicts.append(vdict)
            state.rewards.append(reward)
            done = state.turn >= state.max_turns or (self.config.stop_on_correct and bool(verdict.correct))
            if done:
                state.returns = per_turn_returns(state.rewards, self.config.gamma)
                state.episode_return = episode_return(state.rewards, self.config.gamma)
                state.done = True
            obs.turn = state.turn
            obs.rewards = list(state.rewards)
            obs.returns = list(state.returns) if done else None
            obs.episode_return = state.episode_return if done else None
        obs.reward = reward
        obs.done = done
        log.info("verdict: task %s, turn %d/%d, status %s, reward %.3f, %.2f s, episode %s", task_id, obs.turn,
                 self.config.max_turns, verdict.status, reward, seconds, episode.episode_id)
        if done:
            log.info("episode end: task %s after %d turns, rewards %s, return %.3f, episode %s", task_id, obs.turn,
                     [round(r, 3) for r in obs.rewards], obs.episode_return, episode.episode_id)
        return obs

    @property
    def state(self) -> KernelState:
        with self._lock:
            return self._state.model_copy(deep=True)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="kernelflow",
            description=(
                "Write a Triton kernel for a KernelBench task; each step judges one submission "
                f"(max_turns={self.config.max_turns}, gamma={self.config.gamma})."
            ),
            version=_kernelflow_version(),
        )

    def close(self) -> None:
        """End this session; the shared evaluator stays open (the server closes it on shutdown)."""
        if not self._closed:
            self._log_abandoned("the session's end")
        self._closed = True
        if self._owns_evaluator:
            self._evaluator.close()

    # -- helpers -----------------------------------------------------------------------------------

    def _log_abandoned(self, cause: str) -> None:
        """The episode-end line for an episode left unfinished (a finished one was logged by its last step)."""
        with self._lock:
            state, started = self._state, self._started
        if started and not state.done:
            log.info("episode end: task %s abandoned after %d of %d turns by %s, episode %s", state.task_id,
                     state.turn, state.max_turns, cause, state.episode_id)

    def _check_open(self) -> None:
        if self._closed:
            raise input_error(
                "session", "this session was closed (idle longer than the server's session_timeout_s, or shut down); "
                "open a new connection"
            )


def _kernelflow_version() -> str:
    from kernelflow import __version__

    return __version__
