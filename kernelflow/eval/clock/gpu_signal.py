"""The worker's "done" signal to the judge's clock: a value in the judge's memory, which the judge can write too.

Why not an inter-process event: measured on the H200 (benchmarks/probes/ipc_wait_probe.py, 2026-12-01,
docs/evaluator.md "Session 10"), a stream that waits on an inter-process event whose last record was
made by a worker that then faulted (an illegal address) or was killed never resumes: not when the
worker dies, not ever. The judge's stream, and everything that synchronises its context, then hung
for good (session 9's CUDA corpus stalled so). A stream that waits for a value in memory
(`cuStreamWaitValue32`, equal) resumes as soon as anyone writes the value: the worker,
right after forward's launches, in the normal case; the judge, when the worker's work will never
finish (it reported a GPU fault, it died, or the call's limit passed). The same probe read the same
windows with either wait (empty call 0.287 / 0.285 ms; 1 ms of work 1.289 / 1.287 ms).

The judge writes it from a short-lived helper process (`release`), through the driver API with
ctypes and no torch import (well under a second): while the judge's stream is blocked, CUDA calls in
the judge's own process may block too (lazy module loading synchronises the context; the probe's
in-process releases hung).

The flag lives in the session's own IPC arena (session/ipc_arena.py), next to the inputs: the submission's
kernels can write it (pointer arithmetic from an input needs no Python), so the value is a fresh
random nonce per call (`next_value`) that only the worker's own code learns (in the call message), and
the wait is for equality. A kernel that writes the flag early writes a wrong value and ends nothing:
the window still ends at the worker's own write, after forward's work. Had the value been guessable
(the call's number, or any value for a greater-or-equal wait), an early write would have ended the
judge's window while forward's kernel still ran; with time-sliced contexts the judge's copy can lag
behind that kernel and read a complete output, so the shorter time would have been believed. Only
this session's worker maps the arena, so no submission can touch another verdict's flag.

Not covered: GPUs or drivers without stream memory operations (`cuStreamWaitValue32` returns an
error, which the judge raises at the first call: this evaluator then cannot time on that device). And
the nonce is a secret of the worker's Python: it is in the worker's memory while forward runs (the
worker needs it right after). Code that could read the worker's Python objects (frames, `gc`, the
link's buffers) could learn it and have a kernel write it early. That is the same reach as replacing
the worker's own functions, which the static checks and the runtime checks keep out
(static/escapes.py, worker/controls.py); the nonce only closes the route that needs no Python, pointer
arithmetic from a kernel.
"""

from __future__ import annotations

import ctypes
import secrets
import subprocess
import sys
from dataclasses import dataclass

_WAIT_EQ = 0x1  # CU_STREAM_WAIT_VALUE_EQ: *addr == value
_LAZY_PEER_ACCESS = 0x1  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
RELEASE_TIMEOUT_S = 30.0


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]  # CUipcMemHandle


_lib = None


def _fn(symbol: str, argtypes: list):
    """A driver API entry point by its exact symbol (cuda.h maps e.g. cuMemsetD32 to cuMemsetD32_v2)."""
    global _lib
    if _lib is None:
        _lib = ctypes.CDLL("libcuda.so.1")
    fn = getattr(_lib, symbol)
    fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return fn


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what} failed with CUresult {rc}")


def next_value() -> int:
    """A call's done value: random, never 0 (a fresh flag's value), fits an int32 (see the module docstring)."""
    return secrets.randbelow((1 << 31) - 1) + 1


def wait_value(stream_handle: int, address: int, value: int) -> None:
    """Queue on `stream_handle` a wait until the int32 at device `address` equals `value` (no kernel)."""
    fn = _fn("cuStreamWaitValue32_v2", [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint])
    _check(fn(ctypes.c_void_p(stream_handle), address, value, _WAIT_EQ), "cuStreamWaitValue32")


@dataclass(frozen=True)
class SharedFlag:
    """What another process needs to write the flag: its allocation's IPC handle and the flag's offset."""

    device: int  # ordinal among the devices this process sees (the helper inherits the same environment)
    handle: bytes  # the 64-byte CUipcMemHandle of the allocation holding the flag
    offset: int  # bytes from the allocation's base to the flag


def share(address: int, device: int) -> SharedFlag:
    """The flag at device `address` as a `SharedFlag` (call while the judge's context is healthy)."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    get_range = _fn("cuMemGetAddressRange_v2", [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                                             ctypes.c_uint64])
    _check(get_range(ctypes.byref(base), ctypes.byref(size), address), "cuMemGetAddressRange")
    handle = _IpcHandle()
    get_handle = _fn("cuIpcGetMemHandle", [ctypes.POINTER(_IpcHandle), ctypes.c_uint64])
    _check(get_handle(ctypes.byref(handle), base.value), "cuIpcGetMemHandle")
    return SharedFlag(device, bytes(handle.reserved), address - base.value)


def release(flag: SharedFlag, value: int, timeout_s: float = RELEASE_TIMEOUT_S) -> str | None:
    """Write `value` into the flag from a helper process; None if done, else why not."""
    argv = [sys.executable, "-I", __file__, str(flag.device), flag.handle.hex(), str(flag.offset), str(value)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the release helper did not finish ({type(exc).__name__})"
    if proc.returncode != 0 or "released" not in proc.stdout:
        return f"the release helper failed (status {proc.returncode}): {proc.stderr.strip()[-300:]}"
    return None


def _write(device: int, handle_hex: str, offset: int, value: int) -> None:
    """The helper process's whole work: map the judge's allocation and write the value."""
    _check(_fn("cuInit", [ctypes.c_uint])(0), "cuInit")
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    _check(_fn("cuDeviceGet", [ctypes.POINTER(ctypes.c_int), ctypes.c_int])(ctypes.byref(dev), device), "cuDeviceGet")
    _check(_fn("cuDevicePrimaryCtxRetain", [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int])(ctypes.byref(ctx), dev),
           "cuDevicePrimaryCtxRetain")
    _check(_fn("cuCtxSetCurrent", [ctypes.c_void_p])(ctx), "cuCtxSetCurrent")
    handle = _IpcHandle.from_buffer_copy(bytes.fromhex(handle_hex))
    _check(_fn("cuIpcOpenMemHandle_v2", [ctypes.POINTER(ctypes.c_uint64), _IpcHandle, ctypes.c_uint])(
        ctypes.byref(ptr), handle, _LAZY_PEER_ACCESS), "cuIpcOpenMemHandle")
    _check(_fn("cuMemsetD32_v2", [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t])(ptr.value + offset, value, 1),
           "cuMemsetD32")
    _check(_fn("cuCtxSynchronize", [])(), "cuCtxSynchronize")
    _fn("cuIpcCloseMemHandle", [ctypes.c_uint64])(ptr.value)


if __name__ == "__main__":
    _write(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    print("released", flush=True)
