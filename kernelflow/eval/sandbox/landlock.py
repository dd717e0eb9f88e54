"""Landlock, called through its three system calls with ctypes: writes only where the worker may write.

A worker restricts itself (`restrict_writes`) at the very start of `worker.main()`, while it still
has a single thread, before torch, triton or CUDA exist and long before the submission is imported.
Landlock cannot be lifted once in force, and every thread and process created later inherits it.
Why so early, not after the warm-up: `landlock_restrict_self` confines the calling thread only (a
flag to sync all threads arrives with ABI 8; this host has ABI 7), and the warm-up starts threads
(OpenMP, the CUDA driver's). A submission with ctypes owns the whole address space, so an unconfined
thread is a way out. (The worker starts single-threaded because session/worker_handle.py sets OMP_NUM_THREADS=1;
`isolation.confine_early` checks it and refuses otherwise.)

The ruleset handles every write-like filesystem access the running ABI knows (write, truncate,
create files, directories, devices, sockets, FIFOs and symlinks, remove, rename/link across
directories) and allows them only beneath the writable directories (the worker's own directory,
`/dev/shm` where the backend needs it) and on the writable files (`/dev/null`, the `/dev/nvidia*`
nodes on CUDA). Reads and execution are not handled: the worker needs python, torch, triton and
`ptxas`, so reads of world-readable files stay possible (judge secrets are protected by the worker's
UID and file modes, not here). From ABI 4 TCP bind/connect is handled with no rule (no TCP at all);
from ABI 6 the domain is scoped, so the worker cannot signal, or connect to an abstract unix socket
of, any process outside its own domain (the judge, other workers), whatever its UID.

Why not the PyPI `landlock` package: its only release is a 1.0.0.dev pre-release; three syscalls and
two structs are less to trust than a pre-release dependency.
"""

from __future__ import annotations

import ctypes
import functools
import os

# Generic syscall numbers: the same on x86_64 and aarch64.
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the only rights a rule on a file may hold

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in <linux/landlock.h>
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class LandlockError(OSError):
    """Landlock is missing or refused the ruleset (the evaluator's fault, never the submission's)."""


def _syscall(number: int, *args) -> int:
    res = _libc.syscall(ctypes.c_long(number), *args)
    if res < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"landlock syscall {number}: {os.strerror(err)}")
    return res


@functools.cache
def abi() -> int:
    """The kernel's Landlock ABI version; 0 if Landlock is absent or disabled."""
    try:
        return _syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except LandlockError:
        return 0


def write_rights(version: int) -> int:
    """Every write-like access `version` knows (what the ruleset handles)."""
    rights = (WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO
              | MAKE_BLOCK | MAKE_SYM)
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    return rights


def restrict_writes(writable_dirs: list[str], writable_files: list[str]) -> list[str]:
    """Confine this thread and all it creates later (see the module docstring); returns what is in force.

    Paths that do not exist are skipped (e.g. no /dev/nvidia-uvm on this host). The caller must have
    set no_new_privs first. Raises LandlockError when Landlock is absent or refuses a rule.
    """
    version = abi()
    if version < 1:
        raise LandlockError(0, "Landlock is not available on this kernel (needs Linux >= 5.13 with lsm=landlock)")
    handled = write_rights(version)
    attr = _RulesetAttr(handled_access_fs=handled)
    features = [f"landlock-abi{version}-writes"]
    if version >= 4:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
        features.append("landlock-no-tcp")
    if version >= 6:
        attr.scoped = SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET
        features.append("landlock-scoped-signals")
    ruleset = _syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    try:
        for path, is_dir in [(p, True) for p in writable_dirs] + [(p, False) for p in writable_files]:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                dir_node = os.path.isdir(path)
                rights = handled if (is_dir and dir_node) else handled & _FILE_RIGHTS
                rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
                _syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                         ctypes.c_uint32(0))
            finally:
                os.close(fd)
        _syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return features
