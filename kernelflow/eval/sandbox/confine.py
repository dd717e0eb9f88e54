"""The worker's side of the sandbox: the mechanisms a worker applies to itself, in the worker process.

`policy.py` (the judge's side) decides what each worker gets and sends it as the bootstrap's `self_setup`;
this module applies it: `confine_early` at the worker's start (single-threaded: no_new_privs, then Landlock
where it may come early), `confine_late` after the warm-up and before the submission is imported (Landlock
where it must come late, then the seccomp filter). It imports only the standard library and its two
mechanism modules (`sandbox/landlock.py`, `sandbox/seccomp_policy.py`), so the worker folder can use it without reaching
any judge-side code. What is not here: probing the host, choosing levels, the spawn prefix (policy.py).
"""

from __future__ import annotations

import ctypes
import os

_PR_SET_NO_NEW_PRIVS = 38


def confine_early(setup: dict | None) -> list[str]:
    """At the worker's start, single-threaded: no_new_privs, then Landlock. Returns what is in force."""
    if not setup:
        return []
    applied = []
    if setup.get("no_new_privs") or setup.get("landlock") or setup.get("seccomp"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        applied.append("no_new_privs")
    rules = setup.get("landlock")
    if rules and not rules.get("late"):
        threads = len(os.listdir("/proc/self/task"))
        if threads != 1:
            raise RuntimeError(f"Landlock must be applied while the worker has one thread, it has {threads}")
        from kernelflow.eval.sandbox.landlock import restrict_writes

        restrict_writes(rules["dirs"], rules["files"])
        applied.append("landlock")
    return applied


def confine_late(setup: dict | None) -> list[str]:
    """After the warm-up, before the submission exists: Landlock where it must come late
    (`BACKEND_LANDLOCK_LATE`), then the seccomp filter on every thread."""
    if not setup:
        return []
    applied = []
    rules = setup.get("landlock")
    if rules and rules.get("late"):
        from kernelflow.eval.sandbox.landlock import restrict_writes

        restrict_writes(rules["dirs"], rules["files"])
        applied.append("landlock")
    if setup.get("seccomp"):
        from kernelflow.eval.sandbox.seccomp_policy import install

        # a missing key means the stricter setting: a setup that does not say so gets no new processes
        install(allow_sockets=bool(setup["seccomp"].get("allow_sockets")),
                allow_processes=bool(setup["seccomp"].get("allow_processes", False)))
        applied.append("seccomp")
    return applied
