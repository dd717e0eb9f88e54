"""The worker's seccomp filter (through pyseccomp): system calls a submission has no use for fail with EPERM.

Installed by the worker on itself after its warm-up (torch and triton imported, CUDA initialised, the
warm-up kernel run) and before the submission exists, on every thread at once (TSYNC). A filter can
only be tightened, never removed, and every child inherits it (no_new_privs is set first). Default
action ALLOW, with a deny list: the worker still forks and execs `ptxas` for Triton's CUDA compile,
writes in its directory, maps memory and talks to the judge over its already-connected socket.

Denied, and why (the hack or escape each one stops):
- ptrace, process_vm_readv/writev, kcmp, pidfd_getfd, pidfd_open: reading or driving another
  process (the judge's memory, its file descriptors);
- setsid, setpgid: leaving the worker's process group, so the judge's `killpg` reaches every
  descendant (also on CUDA, where there is no PID namespace);
- socket, socketpair: any new socket (network, netlink, unix to local daemons); the channel to the
  judge is an fd opened before the filter;
- mount, umount2, pivot_root, chroot, unshare, setns, clone with a namespace flag, clone3 (ENOSYS, so
  glibc falls back to clone, whose flags a filter can see): new namespaces are kernel attack surface
  and a way around the PID/network namespaces;
- bpf, perf_event_open, userfaultfd, io_uring_*, keyctl/add_key/request_key, init/finit/delete_module,
  kexec_*, reboot, swapon/swapoff, personality, acct, quotactl, lookup_dcookie: kernel attack
  surface a kernel-writing submission never needs;
- setuid/setgid/setreuid/setregid/setresuid/setresgid/setfsuid/setfsgid/setgroups, capset: no
  identity changes (there are no capabilities to gain, but there is nothing to lose by refusing).
- with `allow_processes=False` (the interpreter backend: nothing there compiles, so nothing needs a child):
  execve, execveat, fork, vfork, and clone without CLONE_THREAD: the worker cannot start a process at
  all, so no work can happen in a child the in-process guard never sees (red team round 1, a09: a child
  `python3` computed the answer on a memory-mapped file). Threads stay allowed. On CUDA, Triton forks and
  execs `ptxas` for every compile, so there the worker keeps fork/exec.
Not denied: kill/tkill/tgkill. Signals to processes outside the worker are stopped by Landlock's
signal scope (ABI 6), by the distinct UID where the worker has one and by the PID namespace on
interpret; a filter cannot express "inside my process group" for a positive pid without also
breaking `subprocess`'s own kills of its children.
"""

from __future__ import annotations

import errno

DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "pidfd_open",
    "setsid", "setpgid",
    "socket", "socketpair",
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "fsopen", "fsmount", "fsconfig", "fspick",
    "move_mount", "open_tree", "mount_setattr",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "reboot", "swapon", "swapoff", "personality", "acct", "quotactl", "lookup_dcookie",
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups",
    "capset",
)
# clone(2) flags that create a namespace (linux/sched.h).
_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)


_CLONE_THREAD = 0x00010000
_PROCESS_CALLS = ("execve", "execveat", "fork", "vfork")


def install(allow_sockets: bool = False, allow_processes: bool = True) -> list[str]:
    """Load the filter on every thread of this process; returns what it denies (names this arch knows)."""
    import pyseccomp as seccomp

    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    f.set_attr(seccomp.Attr.CTL_TSYNC, 1)
    denied = []
    for name in DENIED:
        if allow_sockets and name in ("socket", "socketpair"):
            continue
        try:
            f.add_rule(seccomp.ERRNO(errno.EPERM), name)
        except (RuntimeError, ValueError, OSError):  # not a syscall on this architecture
            continue
        denied.append(name)
    for flag in _NAMESPACE_FLAGS:
        f.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    denied += ["clone(namespace flags)", "clone3"]
    if not allow_processes:
        for name in _PROCESS_CALLS:
            try:
                f.add_rule(seccomp.ERRNO(errno.EPERM), name)
            except (RuntimeError, ValueError, OSError):  # fork/vfork do not exist on every architecture
                continue
            denied.append(name)
        # clone without CLONE_THREAD is a new process (glibc's fork() is such a clone); threads set the flag
        f.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_THREAD, 0))
        denied.append("clone(new process)")
    f.load()
    return denied
