"""What the worker's own code calls after forward, captured before any submission exists.

Issue #32, item 2 (class 2 of its findings): worker code that ran after forward looked up methods on
classes the submission can change from any module it imports (`torch.Tensor.contiguous`, `.fill_`,
`json.dumps`, `Connection.send_bytes`, a TorchFunctionMode entered at import), so the output the
judge received, the report, or the done signal could come from the submission's replacement (the
red team's rt_export_contiguous, rt_forged_report_json, rt_forged_report_channel,
rt_function_mode_export, rt_done_signal_fill). Here the worker takes, once, at warm-up:

- tensor and storage accessors from torch's C base classes (`torch._C.TensorBase`,
  `torch._C.StorageBase`), which are immutable types: no module can set an attribute on them, and a
  captured method is the C implementation whatever later happens to `torch.Tensor`;
- `torch.Tensor` and `type` themselves, so "a plain tensor" means the class that existed then
  (a rebound `torch.Tensor`, a subclass or a replaced `__class__` is refused);
- `DisableTorchFunction`, under which every read runs: no function mode or subclass hook sees it;
- the frame writer for the judge's socket (`FrameWriter`): multiprocessing's framing (a 4-byte
  big-endian length, then the bytes) written with the captured `os.write` on the socket's file
  descriptor, never through `Connection`'s Python methods.

Every worker module also runs on a private copy of the builtins taken at its import (`frozen_builtins`),
so rebinding `builtins.type` or `len` later changes nothing the worker calls.

Not covered: a submission that reaches the worker's own objects (this module's globals, the Worker,
its `Refs`) through frames, `gc` or `sys.modules` can still replace them; the static checks and the
allow-listed submission language close those names, and the judge decides from its own evidence
(it reads the output and the clock itself, session/). CUDA internals behind a captured Python
function (`torch.cuda.current_stream` calls into `torch._C`) are captured only at that function.
"""

from __future__ import annotations

import builtins as _builtins_module
import os
import struct


def frozen_builtins() -> dict:
    """A private copy of the builtins for a worker module's `__builtins__` (see the module docstring).

    A function takes its builtins from its module's `__builtins__` when it is defined, so a module
    that assigns this before its first `def` keeps today's `type`, `len`, `isinstance`, ..."""
    return dict(vars(_builtins_module))


__builtins__ = frozen_builtins()

_HEADER = struct.Struct("!i")  # multiprocessing.connection's frame header (a C type: its pack is fixed)
_LONG_HEADER = struct.Struct("!Q")


class FrameWriter:
    """Writes frames onto the judge's socket the way `Connection.send_bytes` frames them.

    Holds the descriptor and `os.write` as they were at warm-up: a replaced `Connection` method, a
    rebound `os.write` or `struct.pack` cannot rewrite what the worker says."""

    __slots__ = ("_fd", "_write", "_pack", "_pack_long", "_view")

    def __init__(self, fd: int):
        self._fd = int(fd)
        self._write = os.write
        self._pack = _HEADER.pack
        self._pack_long = _LONG_HEADER.pack
        self._view = memoryview

    def __call__(self, data: bytes) -> None:
        n = len(data)
        header = self._pack(n) if n <= 0x7FFFFFFF else self._pack(-1) + self._pack_long(n)
        self._all(header)
        self._all(data)

    def _all(self, data) -> None:
        view = self._view(data)
        while len(view):
            view = view[self._write(self._fd, view):]


class Refs:
    """The accessors the worker uses on tensors, storages and CUDA after forward (see the module docstring)."""

    def __init__(self, torch):
        tb, sb = torch._C.TensorBase, torch._C.StorageBase
        self.tensor = torch.Tensor
        self.type = type
        self.size = tb.size
        self.stride = tb.stride
        self.dtype = tb.__dict__["dtype"].__get__
        self.device = tb.__dict__["device"].__get__
        self.is_contiguous = tb.is_contiguous
        self.untyped_storage = tb.untyped_storage
        self.storage_offset = tb.storage_offset
        self.element_size = tb.element_size
        self.numel = tb.numel
        self.detach = tb.detach
        self.numpy = tb.numpy
        self.fill_ = tb.fill_
        self.is_view = tb._is_view
        self.nbytes = sb.nbytes
        self.data_ptr = sb.data_ptr
        self.share_cuda = getattr(sb, "_share_cuda_", None)
        self.no_torch_function = torch._C.DisableTorchFunction
        self.function_modes = torch._C._len_torch_function_stack
        self.dtypes = {str(d).removeprefix("torch."): d for d in vars(torch).values() if isinstance(d, torch.dtype)}
        self.current_stream = torch.cuda.current_stream
        self.stream_synchronize = torch.cuda.Stream.synchronize
        self.stream_wait_event = torch.cuda.Stream.wait_event
        self.cuda_synchronize = torch.cuda.synchronize
        self.cuda_initialized = torch.cuda.is_initialized

    def as_bytes(self, t) -> bytes:
        """A tensor's elements in C order as immutable bytes, read through the captured C accessors."""
        with self.no_torch_function():
            return self.numpy(self.detach(t), force=True).tobytes()
