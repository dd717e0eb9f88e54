"""Settings of the environment server: episode shape, discounting, capacity, limits and access.

`EnvServerConfig` wraps the evaluator's `EvalConfig` (how a submission is judged) with what the
server adds: turns per episode, the discount of the returns, the number of concurrent sessions, the
largest submission it accepts, the idle-session timeout and the access token. It checks its own
invariants; it does not start anything (see `server/app.py` and `server/launch.py`).

JSON form (the `--config` file of `kernelflow serve`): the dataclass fields, with `eval` as a nested
object of `EvalConfig` fields, e.g. `{"max_turns": 2, "eval": {"backend": "interpret", "shape": "small"}}`;
fields left out take the served defaults (`EvalConfig.served`: `prewarm_workers` "auto", sized for the device).

Where evaluations run: `eval_backend` "local" (default: one `Evaluator`, its bounded worker pool on
this host) or "ray" (`RayEvaluator`: evaluation actors on a Ray cluster, set up by `ray`, a nested
object of `RayConfig` fields, e.g. `{"eval_backend": "ray", "ray": {"address": "auto", "num_actors": 8,
"gpus_per_actor": 1}}`). Either way the verdicts and the configuration hash are the same.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kernelflow.config_dicts import check_nested, config_from_dict
from kernelflow.eval import EVAL_BACKENDS, EvalConfig, RayConfig

MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class EnvServerConfig:
    """What the environment server does around the evaluator (see the module docstring)."""

    # A server judges many verdicts: its evaluator takes the served defaults (EvalConfig.served, i.e.
    # kernelflow/eval/config.py SERVE_DEFAULTS: pre-warmed workers sized for the device), also when `eval`
    # comes as a partial dict from the --config JSON. An EvalConfig passed in is used as it is.
    eval: EvalConfig = field(default_factory=EvalConfig.served)
    max_turns: int = 2  # submissions per episode
    gamma: float = 0.4  # discount of the per-turn returns (episode return = r1 + gamma * r2)
    stop_on_correct: bool = False  # end the episode at the first correct turn
    max_sessions: int = 16  # concurrent WebSocket sessions; at least the trainer's generation batch
    max_code_chars: int = 100_000  # longest answer accepted by `step`
    token: str | None = field(default=None, repr=False)  # access token clients must present
    session_timeout_s: float = 3600.0  # an idle session is closed after this long
    eval_backend: str = "local"  # "local": this host's worker pool; "ray": actors on a Ray cluster (`ray`)
    ray: RayConfig = field(default_factory=RayConfig)  # used when eval_backend is "ray"

    def __post_init__(self) -> None:
        check_nested(self, eval=EvalConfig, ray=RayConfig)  # a mapping goes through from_dict
        problems = []
        if self.eval_backend not in EVAL_BACKENDS:
            problems.append(f"eval_backend={self.eval_backend!r} (choose one of {EVAL_BACKENDS})")
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int) or self.max_turns < 1:
            problems.append(f"max_turns={self.max_turns!r} (need an int >= 1)")
        if not isinstance(self.gamma, (int, float)) or not math.isfinite(self.gamma) or not 0 <= self.gamma <= 1:
            problems.append(f"gamma={self.gamma!r} (must be in [0, 1])")
        if not isinstance(self.stop_on_correct, bool):
            problems.append(f"stop_on_correct={self.stop_on_correct!r} (must be true or false)")
        if isinstance(self.max_sessions, bool) or not isinstance(self.max_sessions, int) or self.max_sessions < 1:
            problems.append(f"max_sessions={self.max_sessions!r} (need an int >= 1)")
        if isinstance(self.max_code_chars, bool) or not isinstance(self.max_code_chars, int) or self.max_code_chars < 1:
            problems.append(f"max_code_chars={self.max_code_chars!r} (need an int >= 1)")
        if self.token is not None and (not isinstance(self.token, str) or len(self.token) < MIN_TOKEN_CHARS):
            problems.append(
                f"token (a {type(self.token).__name__} of length {len(self.token) if isinstance(self.token, str) else '?'})"
                f" must be a string of at least {MIN_TOKEN_CHARS} characters, e.g. from `openssl rand -hex 16`"
            )
        if (
            not isinstance(self.session_timeout_s, (int, float))
            or not math.isfinite(self.session_timeout_s)
            or self.session_timeout_s <= 0
        ):
            problems.append(f"session_timeout_s={self.session_timeout_s!r} (must be > 0)")
        if problems:
            raise ValueError("invalid EnvServerConfig: " + "; ".join(problems))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EnvServerConfig:
        """Build from a JSON-style dict (kernelflow/config_dicts.py): unknown keys, also nested ones, are an
        error (to catch typos); a partial `eval` keeps the served defaults, a partial `ray` RayConfig's."""
        if not isinstance(data, dict):
            raise ValueError(f"an EnvServerConfig must be a JSON object, got {type(data).__name__}")
        return config_from_dict(cls, data)

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> EnvServerConfig:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ValueError(f"cannot read the server config {path}: {exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the server config {path} is not valid JSON: {exc}") from None
        return cls.from_dict(data)

    def with_env_token(self) -> EnvServerConfig:
        """This config, with the token taken from $KERNELFLOW_ENV_TOKEN when none is set here."""
        # here, not at the top: models.py imports openenv (gradio, ~4 s), which composing a config must not pay
        from kernelflow.env.models import TOKEN_ENV_VAR

        if self.token is None and os.environ.get(TOKEN_ENV_VAR):
            return replace(self, token=os.environ[TOKEN_ENV_VAR])
        return self

    def to_dict(self, include_token: bool = False) -> dict[str, Any]:
        """JSON-friendly form (`from_dict` reads it back); the token is left out unless asked for."""
        data = asdict(self)
        if not include_token:
            data.pop("token")
        return data

    def worst_case_step_s(self) -> float:
        """An upper bound on one step's wall time: every session queued on the pool, each evaluation
        running to its timeout. Clients should wait at least this long for a step."""
        if self.eval_backend == "ray":  # all actors' pools, plus the calls lost to actors that died under it
            rounds = math.ceil(self.max_sessions / (self.eval.max_workers * self.ray.num_actors))
            lost = (self.ray.max_actor_deaths_per_submission - 1) * self.ray.call_timeout(self.eval)
            return rounds * self.eval.timeout_s + lost
        rounds = math.ceil(self.max_sessions / self.eval.max_workers)
        return rounds * self.eval.timeout_s
