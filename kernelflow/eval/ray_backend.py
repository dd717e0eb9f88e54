"""Evaluation on a Ray cluster: one evaluation actor per GPU (or N CPU actors), nothing lost.

`RayEvaluator(eval_config, ray_config)` (settings: `RayConfig`, in `ray_config.py`) has
`Evaluator`'s interface (`evaluate`, `evaluate_async`, `info`, `close`) plus `evaluate_batch` and
`stats`. It starts `num_actors` actors (`EvalActor`), each owning one `Evaluator`: its own bounded
worker pool, caches and timing lock, on its own GPU (`gpus_per_actor=1`) or, for the interpreter
backend, on CPUs (`gpus_per_actor=0`).

Scheduling (in the driver, i.e. the environment server): a submission waits until some live actor
has a free pool slot (`eval.max_workers` per actor), then goes to the least-loaded free actor among
those that already served its task (their input/reference and verdict caches hold it), else to the
least-loaded free actor. Different tasks therefore spread over the actors, and one task spreads
too once its actors are busy.

Failure semantics: when an actor (or its node) dies, or does not answer within `call_timeout_s`,
each submission it held is re-sent to another live actor; the dead actor is replaced in the
background (at most `max_actor_replacements` times over the backend's life). Every submission gets
exactly one verdict: the first one an actor returns, or, after `max_actor_deaths_per_submission`
actor deaths under the same submission, a `crashed` verdict (a submission that kills whatever
runs it is not retried forever); `evaluator_error` when no actor is left. Those two are built by
`kernelflow.eval.failure.failure_verdict`. An innocent submission caught on actors that die for
other reasons twice in a row also ends `crashed`; raise the limit if nodes are that unreliable.

The worker subprocesses inside each actor still isolate submissions from the actor (a segfault
kills a worker, not the actor); actor deaths come from nodes, OOM killers, operators and faults
the worker does not contain.

Layers: `ray` is imported lazily, only in this module (CI checks both); without the `ray` extra
installed, constructing a `RayEvaluator` raises an ImportError saying what to install. On a GPU
actor, calibration and the timing lock live in a per-physical-GPU folder under `eval.cache_dir`
(Ray gives every actor its GPU as device 0, so the per-index lock file would otherwise be shared
by all GPUs of a host); the host's CLI and benchmarks do not take that lock. Ray starts its workers
at niceness 15 (`RAY_worker_niceness`), and the actors' worker subprocesses inherit it: on a host
shared with other work, start Ray with `RAY_worker_niceness=0` (`info()` reports each actor's).
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kernelflow.eval.config import EvalConfig, config_hash
from kernelflow.eval.evaluator import EVALUATOR_VERSION, Evaluator
from kernelflow.eval.failure import failure_verdict
from kernelflow.eval.ray_config import RayConfig
from kernelflow.eval.verdict import Status, Verdict
from kernelflow.tasks import Task

__all__ = ["EvalActor", "RayConfig", "RayEvaluator"]

log = logging.getLogger(__name__)


def _ray():
    try:
        import ray
    except ImportError as exc:  # the optional extra is missing
        raise ImportError(
            f"the Ray evaluation backend needs Ray ({exc}); install it with: pip install 'kernelflow[ray]' "
            "(on every node of the cluster), or use the local backend"
        ) from None
    return ray


class EvalActor:
    """One Ray actor's state: an `Evaluator` on this actor's device (a plain class; made remote at start).

    Methods return plain data (the verdict as `to_dict()`), so the driver rebuilds it with
    `Verdict.from_dict` and a version drift between nodes fails loudly.
    """

    def __init__(self, config: EvalConfig, slot: int):
        ray = _ray()
        gpu_ids = [str(g) for g in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]
        if gpu_ids:
            # Ray shows the actor its GPU as device 0; keep calibration and the timing lock per physical GPU.
            from kernelflow.eval.timing import cache_dir

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


@dataclass
class _Slot:
    """One actor position; a dead actor is replaced in place under a new generation."""

    index: int
    handle: Any = None
    generation: int = 0
    state: str = "starting"  # starting | ready | dead
    in_flight: int = 0
    served: int = 0  # verdicts returned by this slot's actors
    deaths: int = 0
    tasks: set[str] = field(default_factory=set)
    info: dict[str, Any] = field(default_factory=dict)
    error: str = ""


_RETRYABLE = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError", "NodeDiedError",
              "ObjectLostError", "OwnerDiedError", "GetTimeoutError", "ActorUnschedulableError")


class RayEvaluator:
    """`Evaluator`'s interface over Ray actors (see the module docstring). Thread-safe.

    `actor_class`: the plain class the actors run (default `EvalActor`); tests pass a subclass to
    inject faults. It must be importable on every node.
    """

    def __init__(self, config: EvalConfig | None = None, ray_config: RayConfig | None = None, *,
                 actor_class: type = EvalActor):
        self.config = config or EvalConfig()
        self.ray_config = ray_config or RayConfig()
        self._actor_class = actor_class
        self._capacity = self.config.max_workers
        self._call_timeout = self.ray_config.call_timeout(self.config)
        self._cond = threading.Condition()
        self._slots = [_Slot(i) for i in range(self.ray_config.num_actors)]
        self._replacements = 0
        self._closed = False
        self._counts = {"submitted": 0, "verdicts": 0, "retries": 0, "crashed": 0, "evaluator_error": 0}
        self._info: dict[str, Any] = {}
        self._expected_hash = config_hash(self.config, EVALUATOR_VERSION)
        ray = _ray()
        self._owns_ray = False
        if not ray.is_initialized():
            rc = self.ray_config
            kwargs: dict[str, Any] = dict(address=rc.address, namespace=rc.namespace, include_dashboard=False,
                                          log_to_driver=rc.log_to_driver)
            if rc.num_cpus is not None:
                kwargs["num_cpus"] = rc.num_cpus
            ray.init(**kwargs)
            self._owns_ray = True
        self._remote = ray.remote(self._actor_class)
        try:
            self._start_all()
        except BaseException:
            self.close()
            raise

    # ---- public ----------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """The actors' evaluator info (all equal; checked at start) plus the Ray layout."""
        with self._cond:
            actors = [{"slot": s.index, "state": s.state, "host": s.info.get("host"), "pid": s.info.get("pid"),
                       "gpu_ids": s.info.get("gpu_ids"), "niceness": s.info.get("niceness")} for s in self._slots]
        devices = sorted({str(s.info.get("device")) for s in self._slots if s.info})
        return {
            **self._info,
            "device": f"{' / '.join(devices)} x{len(self._slots)} (ray)",
            "eval_backend": "ray",
            "num_actors": len(self._slots),
            "total_workers": len(self._slots) * self._capacity,
            "max_actor_deaths_per_submission": self.ray_config.max_actor_deaths_per_submission,
            "actors": actors,
        }

    def stats(self) -> dict[str, Any]:
        """Driver-side counters and per-slot state (for benchmarks, logs and tests); no remote calls."""
        with self._cond:
            return {
                **self._counts,
                "replacements": self._replacements,
                "slots": [{"slot": s.index, "state": s.state, "generation": s.generation, "in_flight": s.in_flight,
                           "served": s.served, "deaths": s.deaths, "tasks": sorted(s.tasks), "pid": s.info.get("pid"),
                           "error": s.error} for s in self._slots],
            }

    def actor_stats(self) -> list[dict[str, Any] | None]:
        """Each live actor's `Evaluator.stats()` (None for a slot without a live actor)."""
        ray = _ray()
        out: list[dict[str, Any] | None] = []
        for s in list(self._slots):
            try:
                out.append(ray.get(s.handle.stats.remote(), timeout=30) if s.state == "ready" else None)
            except Exception:  # noqa: BLE001 - a dying actor just has no stats
                out.append(None)
        return out

    def actor(self, slot: int) -> Any:
        """The Ray handle of the actor now in `slot` (operations and fault tests: `ray.kill(ev.actor(0))`)."""
        with self._cond:
            return self._slots[slot].handle

    def evaluate(self, task: Task | str, answer: str | None, *, seed: int | None = None,
                 shape: str | None = None) -> Verdict:
        """Judge one answer on some actor. Never raises for what the answer does; exactly one verdict."""
        task_id = task if isinstance(task, str) else task.task_id
        started = time.monotonic()
        with self._cond:
            self._counts["submitted"] += 1
        try:
            verdict = self._evaluate(task_id, answer, seed, shape, started)
        except Exception as exc:  # noqa: BLE001 - our own fault must still yield exactly one verdict
            log.exception("the Ray backend failed on a %s submission", task_id)
            verdict = self._failure(task_id, answer, Status.EVALUATOR_ERROR.value,
                                    f"the Ray evaluation backend failed: {type(exc).__name__}: {exc}", seed, shape, started)
        with self._cond:
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

        threads = min(len(calls), len(self._slots) * self._capacity + len(self._slots))
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ray-eval") as pool:
            return list(pool.map(one, calls))

    def close(self) -> None:
        """Kill the actors (verdicts in flight become `evaluator_error`) and stop a Ray instance we started."""
        ray = _ray()
        with self._cond:
            if self._closed:
                return
            self._closed = True
            handles = [s.handle for s in self._slots if s.handle is not None]
            for s in self._slots:
                s.state = "dead"
            self._cond.notify_all()
        for handle in handles:
            try:
                ray.kill(handle)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()

    def __enter__(self) -> RayEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- actors ----------------------------------------------------------------------------------
    def _new_handle(self, slot: _Slot) -> Any:
        rc = self.ray_config
        return self._remote.options(
            num_cpus=rc.cpus_per_actor, num_gpus=rc.gpus_per_actor, max_restarts=0, max_task_retries=0,
            max_concurrency=self._capacity + 2,  # + 2: ready/stats calls are answered while the pool is busy
            namespace=rc.namespace,
        ).remote(self.config, slot.index)

    def _start_all(self) -> None:
        ray = _ray()
        for s in self._slots:
            s.handle = self._new_handle(s)
        refs = [s.handle.ready.remote() for s in self._slots]
        deadline = time.monotonic() + self.ray_config.actor_start_timeout_s
        problems = []
        for s, ref in zip(self._slots, refs, strict=True):
            try:
                s.info = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
                s.state = "ready"
            except Exception as exc:  # noqa: BLE001 - reported together below
                s.state, s.error = "dead", f"{type(exc).__name__}: {str(exc)[:400]}"
                problems.append(f"actor {s.index}: {s.error}")
        if problems:
            rc = self.ray_config
            raise RuntimeError(
                f"{len(problems)} of {len(self._slots)} evaluation actors did not start within "
                f"{rc.actor_start_timeout_s:.0f} s (each needs {rc.cpus_per_actor} CPU and {rc.gpus_per_actor} GPU; "
                f"cluster resources: {ray.cluster_resources()}): " + " | ".join(problems)
            )
        hashes = {s.info.get("config_hash") for s in self._slots}
        if hashes != {self._expected_hash}:
            found = {s.index: (s.info.get("host"), s.info.get("evaluator_version")) for s in self._slots}
            raise RuntimeError(
                f"the evaluation actors judge differently from this server (evaluator {EVALUATOR_VERSION}): {found}; "
                "install the same kernelflow version on every node of the Ray cluster"
            )
        first = self._slots[0].info
        self._info = {k: v for k, v in first.items() if k not in ("slot", "pid", "host", "gpu_ids", "niceness")}
        log.info("ray backend: %d actors ready (%s)", len(self._slots),
                 ", ".join(f"{s.info.get('host')}:{s.info.get('pid')}" for s in self._slots))

    def _actor_failed(self, slot: _Slot, generation: int, why: str) -> None:
        """Retire the slot's actor of `generation` (once) and start a replacement in the background."""
        ray = _ray()
        with self._cond:
            if slot.generation != generation or self._closed:
                return  # another submission on the same actor already handled it
            old = slot.handle
            slot.deaths += 1
            slot.state, slot.error, slot.in_flight = "dead", why, 0
            slot.tasks.clear()
            replace_it = self._replacements < self.ray_config.max_actor_replacements
            if replace_it:
                self._replacements += 1
                slot.generation += 1
                slot.state = "starting"
            self._cond.notify_all()
        log.warning("ray backend: actor %d (generation %d) lost: %s%s", slot.index, generation, why,
                    "; replacing it" if replace_it else "; replacement budget spent, the slot stays empty")
        try:
            ray.kill(old)  # a hung actor must not keep its GPU
        except Exception:  # noqa: BLE001 - already gone
            pass
        if replace_it:
            threading.Thread(target=self._replace, args=(slot, slot.generation), daemon=True,
                             name=f"ray-replace-{slot.index}").start()

    def _replace(self, slot: _Slot, generation: int) -> None:
        ray = _ray()
        try:
            handle = self._new_handle(slot)
            with self._cond:
                if slot.generation == generation and not self._closed:
                    slot.handle = handle
            info = ray.get(handle.ready.remote(), timeout=self.ray_config.actor_start_timeout_s)
        except Exception as exc:  # noqa: BLE001 - the slot stays empty; submissions go elsewhere
            with self._cond:
                if slot.generation == generation:
                    slot.state, slot.error = "dead", f"replacement failed: {type(exc).__name__}: {str(exc)[:300]}"
                self._cond.notify_all()
            log.error("ray backend: replacing actor %d failed: %s", slot.index, exc)
            return
        with self._cond:
            if slot.generation == generation and not self._closed:
                slot.info, slot.state, slot.error = info, "ready", ""
            self._cond.notify_all()
        if info.get("config_hash") != self._expected_hash:  # a node with another kernelflow joined
            self._actor_failed(slot, generation, f"replacement on {info.get('host')} judges differently "
                                                 f"(evaluator {info.get('evaluator_version')})")

    # ---- scheduling ------------------------------------------------------------------------------
    def _acquire(self, task_id: str) -> tuple[_Slot, int, Any] | None:
        """Wait for a free pool slot on a live actor; prefer actors that served `task_id` (their caches)."""
        deadline = time.monotonic() + self.ray_config.actor_start_timeout_s
        with self._cond:
            while True:
                if self._closed:
                    return None
                ready = [s for s in self._slots if s.state == "ready"]
                free = [s for s in ready if s.in_flight < self._capacity]
                if free:
                    warm = [s for s in free if task_id in s.tasks]
                    # Least loaded; among equals the actor holding the fewest tasks, so new tasks spread too.
                    slot = min(warm or free, key=lambda s: (s.in_flight, len(s.tasks), s.index))
                    slot.in_flight += 1
                    slot.tasks.add(task_id)
                    return slot, slot.generation, slot.handle
                if not ready:
                    starting = any(s.state == "starting" for s in self._slots)
                    if not starting or time.monotonic() > deadline:
                        return None
                self._cond.wait(timeout=1.0)

    def _release(self, slot: _Slot, generation: int, served: bool) -> None:
        with self._cond:
            if slot.generation == generation and slot.in_flight > 0:
                slot.in_flight -= 1
            if served:
                slot.served += 1
            self._cond.notify_all()

    def _evaluate(self, task_id: str, answer: str | None, seed: int | None, shape: str | None,
                  started: float) -> Verdict:
        ray = _ray()
        deaths: list[str] = []
        limit = self.ray_config.max_actor_deaths_per_submission
        while True:
            got = self._acquire(task_id)
            if got is None:
                why = "closed" if self._closed else "no live evaluation actor (all died and could not be replaced)"
                return self._failure(task_id, answer, Status.EVALUATOR_ERROR.value,
                                     f"the Ray evaluation backend has {why}; the submission was not judged", seed,
                                     shape, started)
            slot, generation, handle = got
            try:
                ref = handle.evaluate.remote(task_id, answer, seed, shape)
                data = ray.get(ref, timeout=self._call_timeout)
            except Exception as exc:
                self._release(slot, generation, served=False)
                if type(exc).__name__ not in _RETRYABLE and not isinstance(exc, ray.exceptions.RayActorError):
                    raise  # the actor answered with an error of ours: evaluator_error above, no retry
                why = f"actor {slot.index} lost ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"
                deaths.append(why)
                self._actor_failed(slot, generation, why)
                if len(deaths) >= limit:
                    return self._failure(
                        task_id, answer, Status.CRASHED.value,
                        f"the evaluation actor died {len(deaths)} times while judging this submission "
                        f"(limit max_actor_deaths_per_submission={limit}); it is not retried again: "
                        + "; ".join(deaths), seed, shape, started)
                with self._cond:
                    self._counts["retries"] += 1
                continue
            self._release(slot, generation, served=True)
            return Verdict.from_dict(data)

    def _failure(self, task_id: str, answer: str | None, status: str, detail: str, seed: int | None,
                 shape: str | None, started: float) -> Verdict:
        return failure_verdict(task_id, answer, status, detail, config=self.config,
                               backend=self._info.get("backend", self.config.backend),
                               device=self.info()["device"] if self._info else "ray", seed=seed, shape=shape,
                               check_name="ray_actor", wall_s=time.monotonic() - started,
                               evaluator_version=self._info.get("evaluator_version", EVALUATOR_VERSION))
