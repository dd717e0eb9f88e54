"""Device memory between the judge and a CUDA worker: the shared inputs, and the worker's output.

Inputs: one arena of the evaluator's `ArenaPool` per session (session/ipc_arena.py says why arenas are reused,
never freed), carved into the clock's done flag (clock/gpu_signal.py) and the inputs of every shape set of
the plan, and mapped into the worker once per shape set. The judge draws each call's fresh inputs
into private scratch tensors and copies them into the shared ones as the last step before its clock
starts (clock/gated_clock.py).

Output: the worker exports the storage of the tensor forward returned (`protocol.SharedOutput`); the
judge maps it and copies it into memory of its own right behind the clock's END event, so nothing
the worker does after that can change what is checked. `import_output` validates every field first
(device, sizes, the offset inside the storage) and imposes the expected shape and contiguous strides
itself: a worker that lies about its output gets its lie read as wrong values or a clean rejection.
After the session `unlink_ref_counters` removes the shared-memory reference-count files the killed
worker left behind (PyTorch's producer would have removed them at exit).
"""

from __future__ import annotations

import math
import os

import torch

from kernelflow.eval import protocol
from kernelflow.eval.session.ipc_arena import Arena, ArenaPool, bytes_needed


class SharedInputs:
    """The session's input buffers on the device, per shape set (see the module docstring)."""

    def __init__(self, arenas: ArenaPool, dtype: torch.dtype, shape_sets: list[tuple]):
        self.arenas = arenas
        self.dtype = dtype
        self.shape_sets = shape_sets
        self.arena: Arena | None = None
        self.flag: torch.Tensor | None = None
        self.slots: dict[tuple, list[torch.Tensor]] = {}
        self.scratch: dict[tuple, list[torch.Tensor]] = {}

    def _acquire(self) -> None:
        if self.arena is None:
            tensors = [((1,), torch.int32)] + [(tuple(s), self.dtype) for ss in self.shape_sets for s in ss]
            self.arena = self.arenas.acquire(bytes_needed(tensors))
            self.flag = self.arena.carve((1,), torch.int32)  # first, so every later carve keeps its place
            self.flag.zero_()  # a reused arena holds an earlier session's values; a done value is never 0

    def signal_flag(self) -> torch.Tensor:
        """The int32 the worker writes when a call's work is queued (clock/gated_clock.py), zeroed."""
        self._acquire()
        return self.flag

    def for_shapes(self, shapes: tuple, link) -> list[torch.Tensor]:
        """The inputs of one shape set, mapped into the worker on first use."""
        if shapes not in self.slots:
            self._acquire()
            bufs = [self.arena.carve(tuple(s), self.dtype) for s in shapes]
            link.send({"op": "map", "slot": str(shapes), "inputs": bufs})
            link.recv(protocol.Mapped)
            self.slots[shapes] = bufs
        return self.slots[shapes]

    def scratch_for(self, shapes: tuple, device: torch.device) -> list[torch.Tensor]:
        """Ordinary (unshared) tensors for a call's pristine inputs: drawn there before the clock opens,
        copied into the shared buffers behind its spin, compared with them after the call."""
        if shapes not in self.scratch:
            self.scratch[shapes] = [torch.empty(s, dtype=self.dtype, device=device) for s in shapes]
        return self.scratch[shapes]

    def release(self, clean: bool) -> None:
        """Give the arena back (only once the worker that mapped it is dead)."""
        self.slots.clear()
        self.scratch.clear()
        if self.arena is not None:
            self.arenas.release(self.arena, clean)
            self.arena = self.flag = None


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def import_output(shared: protocol.SharedOutput, device: torch.device, shape: tuple[int, ...],
                  dtype: torch.dtype) -> tuple[torch.Tensor | None, str | None]:
    """Map the worker's exported output as a tensor of `shape` and `dtype`; (None, why) if it cannot be."""
    if shared.device != (device.index or 0):
        return None, f"the output is on cuda:{shared.device}, expected {device}"
    needed = (shared.element_offset + math.prod(shape)) * dtype.itemsize
    if shared.storage_bytes < needed:
        return None, f"the output's storage holds {shared.storage_bytes} bytes, {needed} needed"
    try:
        storage = torch.UntypedStorage._new_shared_cuda(
            shared.device, bytes.fromhex(shared.handle), shared.storage_bytes, shared.storage_offset_bytes,
            shared.ref_counter.encode(), shared.ref_counter_offset, bytes.fromhex(shared.event_handle),
            False)  # never wait on the worker's event: one recorded behind a faulted kernel never completes
            # (clock/gpu_signal.py); the clock's flag wait already orders this read after the worker's work
        out = torch.empty(0, dtype=dtype, device=device)
        out.set_(storage, shared.element_offset, shape, _contiguous_strides(shape))
    except Exception as exc:  # noqa: BLE001 - a forged or stale export is the submission's, never ours
        return None, f"the judge could not map the output the worker exported ({type(exc).__name__})"
    return out, None


def unlink_ref_counters(names: set[str]) -> None:
    """Remove the shared-memory files a killed worker's exports left (names validated by the protocol)."""
    for name in names:
        if protocol.SHM_NAME.match(name):
            try:
                os.unlink("/dev/shm" + name)
            except OSError:
                pass
