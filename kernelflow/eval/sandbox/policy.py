"""OS isolation of the worker: which mechanisms a worker gets, the level they add up to, and applying them.

A worker is confined by the operating system, not by Python, so that a submission that escapes every
in-process guard (ctypes, `os`, the channel object) still cannot reach the judge. Mechanisms, each
probed once per process (cached) and applied only where the host has it and the backend allows it:

- `no_new_privs` (the worker, at its start): no privileges gained through setuid or file-capability
  binaries;
- `no_caps` (`setpriv` at spawn): a root worker's capabilities (empty effective, permitted,
  inheritable and bounding sets);
- `landlock` (the worker, at its start, single-threaded; sandbox/landlock.py): writes outside its own
  directory (+ /dev/null, CUDA's device nodes and /dev/shm), TCP, and signals or abstract unix
  sockets to any process outside its domain;
- `seccomp` (the worker, after its warm-up; sandbox/seccomp_policy.py): ptrace and other cross-process reads,
  setsid/setpgid, new sockets, new namespaces, kernel attack surface;
- `netns` (`unshare` at spawn): the network (a fresh namespace has only a down loopback);
- `uid` (`setpriv` at spawn): reading or signalling the judge and the other workers: a fresh random
  UID/GID in [2^20, 2^31) per worker, no supplementary groups, its own directory chowned to it.
  Only where another UID can run the judge's Python (probed: not with pyenv under a 0700 /root);
- `pidns` (`unshare --pid --fork --mount-proc` at spawn, a shell as PID 1): seeing the judge at all
  (a fresh /proc), and descendants outliving the worker (all die with PID 1).

`protect_judge()` (called when an `Evaluator` is built) makes the judge non-dumpable, so a process of
the same UID without CAP_SYS_PTRACE (a CUDA worker, whose UID stays the judge's) can read neither its
memory nor its environment through /proc.

Levels, ordered; each adds mechanisms to the one before: `none` < `process` (no_new_privs, no_caps,
landlock, seccomp) < `network` (+ netns) < `user` (+ uid) < `full` (+ pidns). A worker's level is the
highest whose mechanisms are all in force. `BACKEND_MECHANISMS` is the one table that says which
mechanisms each backend may use; the backend's ceiling is the level of that row:
- interpret: everything (ceiling `full`);
- cuda: no `pidns` (legacy CUDA IPC handles cannot cross PID namespaces: the driver checks PIDs) and no
  `uid`: torch's CUDA IPC keeps a reference-count file per shared block in /dev/shm created with mode
  0600 by the judge, which a worker of another UID cannot open. Ceiling `network` until the judge
  chowns those files to the worker (session.py) and the H200 confirms it.

What a worker can still do: read every world-readable file (python, torch, the task suite, the
kernelflow sources; judge secrets are protected by the worker's UID and file modes: the evaluator's
cache dir under a root judge's 0700 home, its calibration and lock files created 0644 and never
writable by the worker; a CUDA worker, same UID as the judge, could read files only the judge's UID
may read), use the CPU and memory up to its limits, and write in its own directory.

A host that lacks a mechanism degrades explicitly: `plan()` leaves it out and says which are missing;
`EvalConfig.isolation` set to an explicit level refuses to run without all of its mechanisms, and the
environment server refuses to start below `EvalConfig.min_isolation` (`check_minimum`).
"""

from __future__ import annotations

import ctypes
import functools
import glob
import logging
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

MECHANISMS = ("no_new_privs", "no_caps", "landlock", "seccomp", "netns", "uid", "pidns")
LEVELS = ("none", "process", "network", "user", "full")
_ADDS = {"none": (), "process": ("no_new_privs", "no_caps", "landlock", "seccomp"), "network": ("netns",),
         "user": ("uid",), "full": ("pidns",)}
LEVEL_MECHANISMS = {lvl: tuple(m for i in range(LEVELS.index(lvl) + 1) for m in _ADDS[LEVELS[i]]) for lvl in LEVELS}

# The one per-backend table (see the module docstring): change a row after a probe on the GPU host.
BACKEND_MECHANISMS = {
    "interpret": frozenset(MECHANISMS),
    "cuda": frozenset({"no_new_privs", "no_caps", "landlock", "seccomp", "netns"}),
}
# Writable beyond the worker's own directory. CUDA: the driver opens its device nodes read-write, and
# torch's CUDA IPC opens the judge's reference-count files in /dev/shm read-write.
BACKEND_WRITABLE = {
    "interpret": {"dirs": (), "files": ("/dev/null",)},
    # /dev as a file rule: writes to existing device nodes beneath it (the driver's), no new nodes.
    "cuda": {"dirs": ("/dev/shm",), "files": ("/dev",)},
}
# When Landlock is applied: at the worker's very start (single-threaded: every thread it later starts
# inherits the domain), or after the warm-up. On CUDA it must be after: with Landlock in force before
# CUDA's initialisation, `torch.cuda.set_device` failed on the H200 (2026-12-01, benchmarks/
# worker_start_probe.py: the worker started with every mechanism but Landlock, and with none it did
# not), while Landlock applied after the warm-up ran whole verdicts there (benchmarks/probes/trust_probe.py).
# The cost: threads the CUDA driver started during the warm-up are outside the domain; the
# submission's Python runs on the main thread, inside it, and so does every thread it starts.
BACKEND_LANDLOCK_LATE = {"interpret": False, "cuda": True}
# Whether the seccomp filter lets the worker create sockets (its channel is open before the filter).
# CUDA: denied, unverified on the H200 (legacy CUDA IPC is not expected to need a socket).
BACKEND_SOCKETS_ALLOWED = {"interpret": False, "cuda": False}
# Whether the worker may start processes (fork/exec) once the seccomp filter is on. CUDA: Triton forks and
# execs `ptxas` for every compile. The interpreter compiles nothing, so a child there could only be the
# submission doing its work where the in-process guard cannot see it (red team round 1, a09).
BACKEND_PROCESSES_ALLOWED = {"interpret": False, "cuda": True}
UID_RANGE = (1 << 20, 1 << 31)

_PR_SET_DUMPABLE = 4


class IsolationError(ValueError):
    """An isolation level that cannot be had here (the message names what is missing and what to do)."""


def level_of(mechanisms) -> str:
    """The highest level whose mechanisms are all in `mechanisms`."""
    have = set(mechanisms)
    return [lvl for lvl in LEVELS if set(LEVEL_MECHANISMS[lvl]) <= have][-1]


def ceiling(backend: str) -> str:
    """The strongest level `backend` allows on a host that has every mechanism."""
    return level_of(BACKEND_MECHANISMS[backend])


def _runs(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _userns_prefix() -> list[str]:
    return [] if os.geteuid() == 0 else ["--user", "--map-root-user"]


@functools.cache
def host_mechanisms() -> dict[str, str | None]:
    """Each mechanism -> None if this host has it, else why not (probed once per process)."""
    from kernelflow.eval.sandbox import landlock

    root = os.geteuid() == 0
    setpriv, unshare = shutil.which("setpriv"), shutil.which("unshare")
    found: dict[str, str | None] = {"no_new_privs": None}
    found["no_caps"] = None if (setpriv or not root) else "util-linux `setpriv` is not installed (apt-get install util-linux)"
    abi = landlock.abi()
    found["landlock"] = None if abi >= 1 else "the kernel has no Landlock (needs Linux >= 5.13 booted with lsm=...,landlock)"
    try:
        import pyseccomp

        pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
        found["seccomp"] = None
    except Exception as exc:  # noqa: BLE001 - any failure means no seccomp here
        found["seccomp"] = (f"pyseccomp/libseccomp unusable ({type(exc).__name__}: {exc}); "
                            "pip install kernelflow[eval] and apt-get install libseccomp2")
    if unshare is None:
        found["netns"] = found["pidns"] = "util-linux `unshare` is not installed (apt-get install util-linux)"
    else:
        pre = [unshare, *_userns_prefix()]
        found["netns"] = None if _runs([*pre, "--net", "true"]) else \
            "`unshare --net` fails here (no CAP_SYS_ADMIN and no user namespaces)"
        found["pidns"] = None if _runs([*pre, "--pid", "--fork", "--mount-proc", "true"]) else \
            "`unshare --pid --fork --mount-proc` fails here (no CAP_SYS_ADMIN and no user namespaces)"
    if not root:
        found["uid"] = "the judge does not run as root, so it cannot give workers their own UID"
    elif setpriv is None:
        found["uid"] = "util-linux `setpriv` is not installed (apt-get install util-linux)"
    else:
        found["uid"] = _other_uid_runs_our_python(setpriv)
    return found


_SAME_PYTHON = ("import os, sys, importlib.util as u; "
                "print(os.__file__, sys.version, *(getattr(u.find_spec(m), 'origin', None) for m in ('torch', 'kernelflow')))")


def _other_uid_runs_our_python(setpriv: str) -> str | None:
    """None if a fresh UID runs this interpreter with this stdlib, torch and kernelflow; else why not.

    A Python installed under a 0700 home (pyenv in /root) is not readable by another UID: the worker
    would start a different stdlib or none at all.
    """
    import sys

    uid = str(UID_RANGE[0] + secrets.randbelow(UID_RANGE[1] - UID_RANGE[0]))
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "VIRTUAL_ENV", "LANG")}
    cmd = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", "/bin/sh", "-c", '"$@"', "probe",
           sys.executable, "-c", _SAME_PYTHON]
    try:
        theirs = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=env, cwd="/").stdout.strip()
        ours = subprocess.run([sys.executable, "-c", _SAME_PYTHON], capture_output=True, text=True, timeout=30,
                              env=env, cwd="/").stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"could not probe a worker UID ({exc})"
    if theirs != ours or not ours:
        return (f"another UID cannot run this Python as the judge does ({sys.executable} -> "
                f"{os.path.realpath(sys.executable)}; saw {theirs or 'nothing'!r}): install Python, the venv and "
                "kernelflow where other users can read them (not under a 0700 home such as /root)")
    return None


@dataclass(frozen=True)
class Resolved:
    """The mechanisms every worker of one evaluator gets, and what that adds up to."""

    backend: str
    requested: str
    mechanisms: tuple[str, ...]
    missing: dict[str, str] = field(default_factory=dict)  # allowed by the backend, absent here: why

    @property
    def level(self) -> str:
        return level_of(self.mechanisms)

    def describe(self, reasons: bool = True) -> str:
        """The level and its mechanisms; `reasons=False` names the missing mechanisms without saying why (the
        why names the judge's paths, which a verdict must not carry: it goes to logs and `info()`)."""
        text = f"{self.level} ({', '.join(self.mechanisms) or 'no mechanisms'})"
        if self.missing and reasons:
            text += "; missing here: " + "; ".join(f"{m}: {why}" for m, why in self.missing.items())
        elif self.missing:
            text += "; missing here: " + ", ".join(self.missing)
        return text


_warned: set = set()


def resolve(backend: str, requested: str = "auto") -> Resolved:
    """Which mechanisms a `backend` worker gets for `requested` ("auto": all this host has and the
    backend allows; a level: exactly its mechanisms, IsolationError if one is unavailable)."""
    allowed = BACKEND_MECHANISMS[backend]
    host = host_mechanisms()
    missing = {m: host[m] for m in MECHANISMS if m in allowed and host[m] is not None}
    if requested == "auto":
        chosen = tuple(m for m in MECHANISMS if m in allowed and host[m] is None)
        if missing and (backend, tuple(missing)) not in _warned:
            _warned.add((backend, tuple(missing)))
            log.warning("worker isolation on %s degraded to %s", backend,
                        Resolved(backend, requested, chosen, missing).describe())
        return Resolved(backend, requested, chosen, missing)
    if requested not in LEVELS:
        raise IsolationError(f"isolation={requested!r} (choose 'auto' or one of {LEVELS})")
    need = LEVEL_MECHANISMS[requested]
    barred = [m for m in need if m not in allowed]
    if barred:
        raise IsolationError(f"isolation={requested!r} needs {barred}, which backend {backend!r} cannot use "
                             f"(sandbox/policy.py BACKEND_MECHANISMS says why); its ceiling is {ceiling(backend)!r}")
    absent = {m: host[m] for m in need if host[m] is not None}
    if absent:
        raise IsolationError(f"isolation={requested!r} needs mechanisms this host lacks: "
                             + "; ".join(f"{m}: {why}" for m, why in absent.items())
                             + "; fix the host or set isolation='auto' (or a lower level)")
    return Resolved(backend, requested, tuple(m for m in MECHANISMS if m in need), {})


def default_minimum(backend: str) -> str:
    """The floor when `min_isolation` is None: what this host gives the interpreter, capped at the backend's
    ceiling (a host that loses a mechanism later, or a backend that gets less than the host can give, fails)."""
    here = resolve("interpret", "auto").level
    return min(here, ceiling(backend), key=LEVELS.index)


def check_minimum(level: str, minimum: str | None, backend: str, missing: dict | None = None) -> None:
    """Raise IsolationError if `level` is below `minimum` (None: `default_minimum(backend)`)."""
    floor = minimum or default_minimum(backend)
    if LEVELS.index(level) >= LEVELS.index(floor):
        return
    lacking = [m for m in LEVEL_MECHANISMS[floor] if m not in LEVEL_MECHANISMS[level]]
    why = "; ".join(f"{m}: {(missing or {}).get(m, 'not in force')}" for m in lacking)
    raise IsolationError(f"worker isolation is {level!r} on {backend}, below the required {floor!r}; missing: {why}. "
                         f"Fix the host, or set eval.min_isolation to {level!r} to accept the weaker isolation knowingly")


@dataclass(frozen=True)
class WorkerPlan:
    """One worker's isolation: its command prefix, its fresh UID/GID, and what it applies to itself."""

    resolved: Resolved
    uid: int | None
    gid: int | None
    prefix: tuple[str, ...]
    self_setup: dict  # sent in the bootstrap; the worker applies it (`confine_early`, `confine_late`)

    def exit_status(self, code: int | None) -> int | None:
        """The worker's exit status as Popen reports it for an unwrapped process (-N: killed by signal N)."""
        if code is not None and "pidns" in self.resolved.mechanisms and 128 < code < 128 + 65:
            return -(code - 128)
        return code

    @property
    def self_applied(self) -> tuple[str, ...]:
        return tuple(m for m in ("no_new_privs", "landlock", "seccomp") if m in self.resolved.mechanisms)


def plan_worker(resolved: Resolved, workdir: str) -> WorkerPlan:
    """A fresh plan for one worker whose own directory is `workdir` (a new random UID each call)."""
    mech = set(resolved.mechanisms)
    uid = gid = None
    prefix: list[str] = []
    ns = (["--net"] if "netns" in mech else []) + (["--pid", "--fork", "--mount-proc", "--kill-child"] if "pidns" in mech else [])
    if ns:
        prefix += [shutil.which("unshare") or "unshare", *_userns_prefix(), *ns, "--"]
    if "uid" in mech:
        uid = gid = UID_RANGE[0] + secrets.randbelow(UID_RANGE[1] - UID_RANGE[0])
    if "no_caps" in mech and (os.geteuid() == 0 or ns):
        prefix += [shutil.which("setpriv") or "setpriv"]
        if uid is not None:
            prefix += [f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
        prefix += ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    if "pidns" in mech:
        # PID 1 of a namespace ignores every signal it has no handler for unless the kernel forces it:
        # a worker as PID 1 would survive its own SIGXFSZ (output flood) and SIGABRT. So a shell is
        # PID 1 and the worker its child; it exits 128+N when the worker dies of signal N, which the
        # judge reads back as -N (`exit_status`). The shell is out of the worker's reach: outside its
        # Landlock domain (no signals), and ptrace/process_vm_* are denied by seccomp.
        prefix += ["/bin/sh", "-c", '"$@"; exit $?', "kf-worker-init"]
    writable = BACKEND_WRITABLE[resolved.backend]
    files = [p for pattern in writable["files"] for p in sorted(glob.glob(pattern))]
    self_setup = {
        "no_new_privs": "no_new_privs" in mech,
        "landlock": {"dirs": [workdir, *writable["dirs"]], "files": files,
                     "late": BACKEND_LANDLOCK_LATE[resolved.backend]} if "landlock" in mech else None,
        "seccomp": {"allow_sockets": BACKEND_SOCKETS_ALLOWED[resolved.backend],
                    "allow_processes": BACKEND_PROCESSES_ALLOWED[resolved.backend]} if "seccomp" in mech else None,
    }
    return WorkerPlan(resolved, uid, gid, tuple(prefix), self_setup)


def reachable_tempdir() -> str:
    """A temp dir a worker of another UID can reach (every ancestor searchable by others): the usual one
    ($TMPDIR, tempfile.tempdir) if it is, else /tmp."""
    import stat
    import tempfile

    def reachable(path: str) -> bool:
        parts = os.path.realpath(path).split(os.sep)
        prefixes = [os.sep + os.path.join(*parts[1:i]) if i > 1 else os.sep for i in range(1, len(parts) + 1)]
        return all(os.stat(p).st_mode & stat.S_IXOTH for p in prefixes)

    for candidate in (tempfile.gettempdir(), "/tmp"):
        if reachable(candidate):
            return candidate
    raise IsolationError("no temp dir is searchable by other users (a worker with its own UID could not reach its "
                         "directory); set TMPDIR to one, or isolation to 'network'")


_judge_protected = False


def protect_judge() -> None:
    """Make this (the judge's) process non-dumpable once: no same-UID /proc/<pid>/mem or environ reads."""
    global _judge_protected
    if not _judge_protected:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_DUMPABLE, 0) failed: errno %d", ctypes.get_errno())
        _judge_protected = True
