"""The Ray backend's actor pool: which actor judges a submission, and what happens when one dies.

`ActorPool(config, ray_config, actor_class)` starts `ray_config.num_actors` Ray actors of
`actor_class` (`ray_backend.EvalActor` or a test subclass), one per slot, and checks that each
judges with this driver's `config_hash`. `ActorPool.submit(task_id, answer, seed, shape)` returns
the verdict one actor produced (as `Verdict.to_dict()` data) or, when no actor could produce one,
`Unjudged(status, detail)`; it never raises for an actor's death.

Scheduling: a submission waits until some live actor has a free pool slot (`eval.max_workers`
per actor), then goes to the least-loaded free actor among those that already served its task
(their input/reference and verdict caches hold it), else to the least-loaded free actor, ties
broken towards the actor holding the fewest tasks.

Failure policy: an actor that dies mid-call (Ray's actor, node, worker and object errors in
`_RETRYABLE`) or does not answer within `call_timeout_s` is retired once (`ray.kill`, so a hung one
frees its GPU) and replaced in the background in the same slot under a new generation, at most
`max_actor_replacements` times over the pool's life; the submission goes to another live actor.
After `max_actor_deaths_per_submission` deaths under one submission it is `Unjudged("crashed")`;
with no live actor left (or the pool closed), `Unjudged("evaluator_error")`. A replacement that
judges differently (another kernelflow on its node) is retired like a dead actor. Any other error
an actor answers with is ours and is raised to the caller, not retried.

It does not build verdicts, count submissions or connect to the cluster (`cluster/ray_backend.py`), and
holds no evaluator: the actors do. Layers: `ray` is imported lazily, inside functions, by
`import_ray` here (which `cluster/ray_backend.py` uses as well); CI checks that no other module imports it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kernelflow.eval.cluster.ray_config import RayConfig
from kernelflow.eval.config import EvalConfig, config_hash
from kernelflow.eval.evaluator import EVALUATOR_VERSION
from kernelflow.eval.verdict import Status

__all__ = ["ActorPool", "Unjudged", "import_ray"]

log = logging.getLogger(__name__)


def import_ray():
    """The `ray` module, or an ImportError that says how to install it (the optional extra)."""
    try:
        import ray
    except ImportError as exc:  # the optional extra is missing
        raise ImportError(
            f"the Ray evaluation backend needs Ray ({exc}); install it with: pip install 'kernelflow[ray]' "
            "(on every node of the cluster), or use the local backend"
        ) from None
    return ray


@dataclass(frozen=True)
class Unjudged:
    """No actor returned a verdict for the submission: the status it gets instead, and why."""

    status: str  # crashed | evaluator_error
    detail: str


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
_PER_ACTOR = ("slot", "pid", "host", "gpu_ids", "niceness")  # keys of an actor's info that differ between actors


class ActorPool:
    """Ray actors judging submissions, kept alive and busy (see the module docstring). Thread-safe.

    Needs a connected Ray (`ray.init` done by the caller). Raises at construction when an actor does
    not start within `actor_start_timeout_s` or judges differently from this driver.
    """

    def __init__(self, config: EvalConfig, ray_config: RayConfig, actor_class: type):
        self.config = config
        self.ray_config = ray_config
        self.capacity = config.max_workers  # submissions one actor judges at once (its worker pool)
        self._call_timeout = ray_config.call_timeout(config)
        self._cond = threading.Condition()
        self._slots = [_Slot(i) for i in range(ray_config.num_actors)]
        self._replacements = 0
        self._retries = 0
        self._closed = False
        self._expected_hash = config_hash(config, EVALUATOR_VERSION)
        self.common_info: dict[str, Any] = {}  # the actors' evaluator info without the per-actor keys (set at start)
        self._remote = import_ray().remote(actor_class)

    @property
    def size(self) -> int:
        return len(self._slots)

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- start and stop --------------------------------------------------------------------------
    def start(self) -> None:
        """Start every slot's actor and wait until all are ready and judge as this driver does."""
        ray = import_ray()
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
        self.common_info = {k: v for k, v in first.items() if k not in _PER_ACTOR}
        log.info("ray backend: %d actors ready (%s)", len(self._slots),
                 ", ".join(f"{s.info.get('host')}:{s.info.get('pid')}" for s in self._slots))

    def close(self) -> bool:
        """Kill the actors (submissions waiting or in flight end `Unjudged`); False if already closed."""
        ray = import_ray()
        with self._cond:
            if self._closed:
                return False
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
        return True

    # ---- what the facade reports -----------------------------------------------------------------
    def actors(self) -> list[dict[str, Any]]:
        """Where each slot's actor runs (for `info`)."""
        with self._cond:
            return [{"slot": s.index, "state": s.state, "host": s.info.get("host"), "pid": s.info.get("pid"),
                     "gpu_ids": s.info.get("gpu_ids"), "niceness": s.info.get("niceness")} for s in self._slots]

    def devices(self) -> list[str]:
        """The distinct devices the actors reported, sorted."""
        return sorted({str(s.info.get("device")) for s in self._slots if s.info})

    def stats(self) -> dict[str, Any]:
        """Retries, replacements and per-slot state; no remote calls."""
        with self._cond:
            return {
                "retries": self._retries,
                "replacements": self._replacements,
                "slots": [{"slot": s.index, "state": s.state, "generation": s.generation, "in_flight": s.in_flight,
                           "served": s.served, "deaths": s.deaths, "tasks": sorted(s.tasks), "pid": s.info.get("pid"),
                           "error": s.error} for s in self._slots],
            }

    def actor_stats(self) -> list[dict[str, Any] | None]:
        """Each live actor's `Evaluator.stats()` (None for a slot without a live actor)."""
        ray = import_ray()
        out: list[dict[str, Any] | None] = []
        for s in list(self._slots):
            try:
                out.append(ray.get(s.handle.stats.remote(), timeout=30) if s.state == "ready" else None)
            except Exception:  # noqa: BLE001 - a dying actor just has no stats
                out.append(None)
        return out

    def actor(self, slot: int) -> Any:
        """The Ray handle of the actor now in `slot`."""
        with self._cond:
            return self._slots[slot].handle

    # ---- judging ---------------------------------------------------------------------------------
    def submit(self, task_id: str, answer: str | None, seed: int | None, shape: str | None
               ) -> dict[str, Any] | Unjudged:
        """One actor's verdict data for the submission, after as many actor deaths as the policy allows."""
        ray = import_ray()
        deaths: list[str] = []
        limit = self.ray_config.max_actor_deaths_per_submission
        while True:
            got = self._acquire(task_id)
            if got is None:
                why = "closed" if self._closed else "no live evaluation actor (all died and could not be replaced)"
                return Unjudged(Status.EVALUATOR_ERROR.value,
                                f"the Ray evaluation backend has {why}; the submission was not judged")
            slot, generation, handle = got
            try:
                ref = handle.evaluate.remote(task_id, answer, seed, shape)
                data = ray.get(ref, timeout=self._call_timeout)
            except Exception as exc:
                self._release(slot, generation, served=False)
                if type(exc).__name__ not in _RETRYABLE and not isinstance(exc, ray.exceptions.RayActorError):
                    raise  # the actor answered with an error of ours: the caller's evaluator_error, no retry
                why = f"actor {slot.index} lost ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"
                deaths.append(why)
                self._actor_failed(slot, generation, why)
                if len(deaths) >= limit:
                    return Unjudged(
                        Status.CRASHED.value,
                        f"the evaluation actor died {len(deaths)} times while judging this submission "
                        f"(limit max_actor_deaths_per_submission={limit}); it is not retried again: "
                        + "; ".join(deaths))
                with self._cond:
                    self._retries += 1
                continue
            self._release(slot, generation, served=True)
            return data

    def _acquire(self, task_id: str) -> tuple[_Slot, int, Any] | None:
        """Wait for a free pool slot on a live actor; prefer actors that served `task_id` (their caches)."""
        deadline = time.monotonic() + self.ray_config.actor_start_timeout_s
        with self._cond:
            while True:
                if self._closed:
                    return None
                ready = [s for s in self._slots if s.state == "ready"]
                free = [s for s in ready if s.in_flight < self.capacity]
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

    # ---- replacing actors ------------------------------------------------------------------------
    def _new_handle(self, slot: _Slot) -> Any:
        rc = self.ray_config
        return self._remote.options(
            num_cpus=rc.cpus_per_actor, num_gpus=rc.gpus_per_actor, max_restarts=0, max_task_retries=0,
            max_concurrency=self.capacity + 2,  # + 2: ready/stats calls are answered while the pool is busy
            namespace=rc.namespace,
        ).remote(self.config, slot.index)

    def _actor_failed(self, slot: _Slot, generation: int, why: str) -> None:
        """Retire the slot's actor of `generation` (once) and start a replacement in the background."""
        ray = import_ray()
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
        ray = import_ray()
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
