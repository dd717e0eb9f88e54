"""Settings of the Ray evaluation backend (`cluster/ray_backend.py`): where the actors run, how failures end.

A plain frozen dataclass that checks its own values; importing it imports neither Ray nor the
backend, so the environment server's config can hold one whether or not the `ray` extra is installed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kernelflow.eval.config import EvalConfig


@dataclass(frozen=True)
class RayConfig:
    """Where the evaluation actors run and how failures are handled (see the module docstring)."""

    address: str | None = None  # None: start a local Ray instance; "auto", "host:6379" or "ray://host:10001": join
    num_actors: int = 1  # one per GPU on a CUDA cluster; N CPU actors for the interpreter backend
    gpus_per_actor: float = 0.0  # 1 on a GPU cluster (the actor's Evaluator uses its GPU); 0: interpreter/CPU
    cpus_per_actor: float = 1.0  # Ray CPUs reserved per actor (its workers run in the same reservation)
    max_actor_deaths_per_submission: int = 2  # deaths under one submission before it is judged `crashed`
    max_actor_replacements: int = 32  # dead actors replaced over the backend's life; then the slot stays empty
    actor_start_timeout_s: float = 300.0  # an actor must be ready (Evaluator built) within this
    call_timeout_s: float | None = None  # a call not answered by then counts as a dead actor; None: 2 x eval.timeout_s + 120
    namespace: str = "kernelflow"
    num_cpus: int | None = None  # CPUs of a local instance (address None only); None: Ray's default (all)
    log_to_driver: bool = False  # forward actor stdout/stderr to the server's log

    def __post_init__(self) -> None:
        problems = []

        def number(name: str, minimum: float, integer: bool, allow_none: bool = False) -> None:
            value = getattr(self, name)
            if value is None and allow_none:
                return
            ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
            if isinstance(value, bool) or not ok_type or not math.isfinite(value) or value < minimum:
                kind = "an int" if integer else "a number"
                problems.append(f"{name}={value!r} (need {kind} >= {minimum})")

        if self.address is not None and (not isinstance(self.address, str) or not self.address.strip()):
            problems.append(f"address={self.address!r} (null for a local instance, or e.g. 'auto', 'head:6379')")
        number("num_actors", 1, True)
        number("gpus_per_actor", 0, False)
        number("cpus_per_actor", 0, False)
        number("max_actor_deaths_per_submission", 1, True)
        number("max_actor_replacements", 0, True)
        number("actor_start_timeout_s", 1, False)
        number("call_timeout_s", 1, False, allow_none=True)
        number("num_cpus", 1, True, allow_none=True)
        if isinstance(self.gpus_per_actor, (int, float)) and self.gpus_per_actor > 1 and self.gpus_per_actor % 1:
            problems.append(f"gpus_per_actor={self.gpus_per_actor} (a fraction of one GPU, or a whole number)")
        if self.num_cpus is not None and self.address is not None:
            problems.append(f"num_cpus={self.num_cpus} applies to a local instance only (address={self.address!r}); "
                            "set it to null, or address to null")
        if not isinstance(self.namespace, str) or not self.namespace:
            problems.append(f"namespace={self.namespace!r} (need a non-empty string)")
        if not isinstance(self.log_to_driver, bool):
            problems.append(f"log_to_driver={self.log_to_driver!r} (must be true or false)")
        if problems:
            raise ValueError("invalid RayConfig: " + "; ".join(problems))

    def call_timeout(self, eval_config: EvalConfig) -> float:
        return self.call_timeout_s if self.call_timeout_s is not None else 2 * eval_config.timeout_s + 120
