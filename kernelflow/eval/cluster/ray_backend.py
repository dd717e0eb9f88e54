"""Evaluation on a Ray cluster: one evaluation actor per GPU (or N CPU actors), nothing lost.

`RayEvaluator(eval_config, ray_config)` (settings: `RayConfig`, in `cluster/ray_config.py`) has
`Evaluator`'s interface (`evaluate`, `evaluate_async`, `info`, `close`) plus `evaluate_batch` and
`stats`. It connects to Ray (or starts a local instance, which it stops at `close`) and judges on
an `ActorPool` (`cluster/actor_pool.py`) of `num_actors` actors (`EvalActor`, here), each owning one
`Evaluator`: its own bounded worker pool, caches and timing lock, on its own GPU
(`gpus_per_actor=1`) or, for the interpreter backend, on CPUs (`gpus_per_actor=0`).

This module is the evaluator-facing facade: it turns the pool's answer into exactly one `Verdict`
per submission and counts them. Scheduling (least-loaded, tasks kept on the actors that served
them), replacing dead actors and the failure policy are the pool's (`cluster/actor_pool.py` says how).
In short: every submission gets exactly one verdict: the first one an actor returns, or, after
`max_actor_deaths_per_submission` actor deaths under the same submission, a `crashed` verdict (a
submission that kills whatever runs it is not retried forever); `evaluator_error` when no actor is
left. Those two are built here by `kernelflow.eval.cluster.failure.failure_verdict`. An innocent
submission caught on actors that die for other reasons twice in a row also ends `crashed`; raise
the limit if nodes are that unreliable.

The worker subprocesses inside each actor still isolate submissions from the actor (a segfault
kills a worker, not the actor); actor deaths come from nodes, OOM killers, operators and faults
the worker does not contain.

Layers: `ray` is imported lazily, through `actor_pool.import_ray` only (CI checks that no module
outside the Ray backend imports it, and none at module level); without the `ray` extra installed,
constructing a `RayEvaluator` raises an ImportError saying what to install. On a GPU actor,
calibration and the timing lock live in a per-physical-GPU folder under `eval.cache_dir` (Ray gives
every actor its GPU as device 0, so the per-index lock file would otherwise be shared by all GPUs
of a host); the host's CLI and benchmarks do not take that lock. Ray starts its workers at niceness
15 (`RAY_worker_niceness`), and the actors' worker subprocesses inherit it: on a host shared with
other work, start Ray with `RAY_worker_niceness=0` (`info()` reports each actor's).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernelflow.eval.cluster.actor_pool import ActorPool, Unjudged, import_ray
from kernelflow.eval.cluster.failure import failure_verdict
from kernelflow.eval.cluster.ray_config import RayConfig
from kernelflow.eval.config import EvalConfig
from kernelflow.eval.evaluator import EVALUATOR_VERSION, Evaluator
from kernelflow.eval.verdict import Status, Verdict
from kernelflow.tasks import Task

__all__ = ["EvalActor", "RayConfig", "RayEvaluator"]

log = logging.getLogger(__name__)


class EvalActor:
    """One Ray actor's state: an `Evaluator` on this actor's device (a plain class; made remote at start).

    Methods return plain data (the verdict as `to_dict()`), so the driver rebuilds it with
    `Verdict.from_dict` and a version drift between nodes fails loudly.
    """

    def __init__(self, config: EvalConfig, slot: int):
        ray = import_ray()
        gpu_ids = [str(g) for g in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]
        if gpu_ids:
            # Ray shows the actor its GPU as device 0; keep calibration and the timing lock per physical GPU.
            from kernelflow.eval.clock.timing import cache_dir

            folder = Path(cache_dir(config.cache_dir)) / f"ray-gpu{'-'.join(gpu_ids)}"
            config = replace(config, device_index=0, cache_dir=str(folder))
        self.slot = slot
        self.gpu_ids = gpu_ids
        self.evaluator = Evaluator(config)

    def ready(self) -> dict[str, Any]:
        """The evaluator's info plus where this actor runs (answered once the Evaluator is built)."""
        return {**self.evaluator.info(), "slot": self.slot, "pid": os.getpid(), "host": socket.gethostname(),
                "gpu_ids": self.gpu_ids, "niceness": os.nice(0)}

    def evaluate(self, task_id: str, answer: str | None, seed: int | None, shape: str | None) -> dict[str, Any]:
        return self.evaluator.evaluate(task_id, answer, seed=seed, shape=shape).to_dict()

    def stats(self) -> dict[str, Any]:
        return self.evaluator.stats()

    def close(self) -> None:
        self.evaluator.close()


class RayEvaluator:
    """`Evaluator`'s interface over Ray actors (see the module docstring). Thread-safe.

    `actor_class`: the plain class the actors run (default `EvalActor`); tests pass a subclass to
    inject faults. It must be importable on every node.
    """

    def __init__(self, config: EvalConfig | None = None, ray_config: RayConfig | None = None, *,
                 actor_class: type = EvalActor):
        self.config = config or EvalConfig()
        self.ray_config = ray_config or RayConfig()
        self._lock = threading.Lock()
        self._counts = {"submitted": 0, "verdicts": 0, "crashed": 0, "evaluator_error": 0}
        ray = import_ray()
        self._owns_ray = False
        if not ray.is_initialized():
            rc = self.ray_config
            kwargs: dict[str, Any] = dict(address=rc.address, namespace=rc.namespace, include_dashboard=False,
                                          log_to_driver=rc.log_to_driver)
            if rc.num_cpus is not None:
                kwargs["num_cpus"] = rc.num_cpus
            ray.init(**kwargs)
            self._owns_ray = True
        self._pool = ActorPool(self.config, self.ray_config, actor_class)
        try:
            self._pool.start()
        except BaseException:
            self.close()
            raise

    # ---- public ----------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """The actors' evaluator info (all equal; checked at start) plus the Ray layout."""
        pool = self._pool
        actors = pool.actors()
        return {
            **pool.common_info,
            "device": f"{' / '.join(pool.devices())} x{pool.size} (ray)",
            "eval_backend": "ray",
            "num_actors": pool.size,
            "total_workers": pool.size * pool.capacity,
            "max_actor_deaths_per_submission": self.ray_config.max_actor_deaths_per_submission,
            "actors": actors,
        }

    def stats(self) -> dict[str, Any]:
        """Driver-side counters and per-slot state (for benchmarks, logs and tests); no remote calls."""
        pool = self._pool.stats()
        with self._lock:
            counts = dict(self._counts)
        return {"submitted": counts["submitted"], "verdicts": counts["verdicts"], "retries": pool["retries"],
                "crashed": counts["crashed"], "evaluator_error": counts["evaluator_error"],
                "replacements": pool["replacements"], "slots": pool["slots"]}

    def actor_stats(self) -> list[dict[str, Any] | None]:
        """Each live actor's `Evaluator.stats()` (None for a slot without a live actor)."""
        return self._pool.actor_stats()

    def actor(self, slot: int) -> Any:
        """The Ray handle of the actor now in `slot` (operations and fault tests: `ray.kill(ev.actor(0))`)."""
        return self._pool.actor(slot)

    def evaluate(self, task: Task | str, answer: str | None, *, seed: int | None = None,
                 shape: str | None = None) -> Verdict:
        """Judge one answer on some actor. Never raises for what the answer does; exactly one verdict."""
        task_id = task if isinstance(task, str) else task.task_id
        started = time.monotonic()
        with self._lock:
            self._counts["submitted"] += 1
        try:
            outcome = self._pool.submit(task_id, answer, seed, shape)
            if isinstance(outcome, Unjudged):
                verdict = self._failure(task_id, answer, outcome.status, outcome.detail, seed, shape, started)
            else:
                verdict = Verdict.from_dict(outcome)
        except Exception as exc:  # noqa: BLE001 - our own fault must still yield exactly one verdict
            log.exception("the Ray backend failed on a %s submission", task_id)
            verdict = self._failure(task_id, answer, Status.EVALUATOR_ERROR.value,
                                    f"the Ray evaluation backend failed: {type(exc).__name__}: {exc}", seed, shape, started)
        with self._lock:
            self._counts["verdicts"] += 1
            if verdict.status in ("crashed", "evaluator_error") and verdict.checks.get("ray_actor"):
                self._counts[verdict.status] += 1
        return verdict

    async def evaluate_async(self, task: Task | str, answer: str | None, **kwargs: Any) -> Verdict:
        """`evaluate` without blocking the event loop (a thread waits on the actor)."""
        return await asyncio.to_thread(self.evaluate, task, answer, **kwargs)

    def evaluate_batch(self, items: Iterable[Sequence[Any] | dict[str, Any]], *, progress_every_s: float = 30.0
                       ) -> list[Verdict]:
        """Judge many submissions at once; verdict i belongs to item i.

        An item is `(task, answer)`, `(task, answer, seed)`, `(task, answer, seed, shape)` or a dict
        of `evaluate`'s arguments. All actors are kept busy; progress is logged every `progress_every_s`.
        """
        calls = [dict(item) if isinstance(item, dict) else dict(zip(("task", "answer", "seed", "shape"), item, strict=False))
                 for item in items]
        if not calls:
            return []
        done = [0]
        lock = threading.Lock()
        t0 = time.monotonic()
        last = [t0]

        def one(call: dict[str, Any]) -> Verdict:
            verdict = self.evaluate(call["task"], call.get("answer"), seed=call.get("seed"), shape=call.get("shape"))
            with lock:
                done[0] += 1
                now = time.monotonic()
                if now - last[0] >= progress_every_s:
                    last[0] = now
                    log.info("ray batch: %d/%d verdicts, %.2f verdicts/s", done[0], len(calls), done[0] / (now - t0))
            return verdict

        threads = min(len(calls), self._pool.size * self._pool.capacity + self._pool.size)
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ray-eval") as pool:
            return list(pool.map(one, calls))

    def close(self) -> None:
        """Kill the actors (verdicts in flight become `evaluator_error`) and stop a Ray instance we started."""
        if not self._pool.close():
            return
        ray = import_ray()
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()

    def __enter__(self) -> RayEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _failure(self, task_id: str, answer: str | None, status: str, detail: str, seed: int | None,
                 shape: str | None, started: float) -> Verdict:
        common = self._pool.common_info
        return failure_verdict(task_id, answer, status, detail, config=self.config,
                               backend=common.get("backend", self.config.backend),
                               device=self.info()["device"] if common else "ray", seed=seed, shape=shape,
                               check_name="ray_actor", wall_s=time.monotonic() - started,
                               evaluator_version=common.get("evaluator_version", EVALUATOR_VERSION))
