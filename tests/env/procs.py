"""Process-tree helpers from /proc (Linux): a server's descendants, to prove no worker outlives its job."""

from __future__ import annotations

import os


def descendants(pid: int) -> list[int]:
    """PIDs of every live descendant of `pid`."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":  # a zombie has exited; only its parent's wait() is missing
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    out, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as gone: it has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
