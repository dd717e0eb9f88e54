"""The judge-worker protocol: every message type, how it is encoded, and how the judge decodes one.

The message sequence of one session (judge -> worker messages are pickled dicts, since the worker
trusts the judge; worker -> judge messages are JSON objects that the judge treats as hostile input):

    worker: warm                      imports done, CUDA initialised, launch counter installed
    worker: confined(applied, error)  seccomp loaded too (sandbox/policy.py); a worker that could not is discarded
    judge:  gates(gate, flag)         CUDA: the gate event and the done flag (clock/gated_clock.py)
    judge:  probe(seq)                only on a calibration worker, which never gets a submission
    worker: probed
    judge:  judge(submission_path)    the one submission (a pre-warmed worker may wait long for it)
    worker: ready | import_failed
    judge:  map(slot, inputs)         CUDA: the shared input buffers of one shape set, once
    worker: mapped
    judge:  call(slot | input bytes, seq)  one forward; CUDA: behind the gate, then flag = seq (clock/gated_clock.py)
    worker: called | call_failed      CPU: `called` is followed by raw frames: output, then each input
    worker: gpu_fault                 CUDA, only if the call's GPU work then failed (the worker waits for it)
    ...                               one call per planned call
    judge:  exit
    worker: bye(released)

`decode(data)` turns one worker frame into a frozen message object or raises `ProtocolViolation`:
a frame larger than `MAX_FRAME`, not JSON, nested deeper than `MAX_DEPTH`, an unknown event, a
missing, extra or ill-typed field, a string or list over its bound. A violation is the submission's
fault (the worker's Python is the submission's): the judge gives `rejected_runtime_check` and kills
the worker; it is never an evaluator error and never leaves the worker running.

Not covered here: what the fields mean for the verdict (the judge's checks decide, `session/`).
"""

from __future__ import annotations

import builtins
import json
import re
from dataclasses import MISSING, dataclass, fields
from json import encoder as _json_encoder
from typing import Any

# The worker encodes with what existed when it imported this module, before any submission: a private
# copy of the builtins and json's C encoder built once (a replaced `json.dumps`, `JSONEncoder` method
# or `builtins.isinstance` cannot rewrite a report; the red team's rt_forged_report_json).
__builtins__ = dict(vars(builtins))


def _refuse(obj: Any) -> Any:
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


_C_ENCODER = _json_encoder.c_make_encoder
_ENCODE = (_C_ENCODER(None, _refuse, _json_encoder.c_encode_basestring_ascii, None, ": ", ", ", False, False, False)
           if _C_ENCODER is not None and _json_encoder.c_encode_basestring_ascii is not None else None)
_DUMPS = json.dumps
_JOIN = "".join

MAX_FRAME = 64 << 10  # a control message; output and input bytes travel as separate raw frames
MAX_DEPTH = 8
MAX_TEXT = 4000  # an error text or traceback
MAX_LIST = 20  # violations, tampered names
MAX_NAME = 200

# The fields of a CUDA storage exported with `UntypedStorage._share_cuda_()` (checked in session/buffers.py).
SHM_NAME = re.compile(r"^/torch_\d{1,10}_\d{1,12}_\d{1,6}$")


class ProtocolViolation(Exception):
    """A worker frame the judge cannot accept (says which rule it broke)."""


@dataclass(frozen=True)
class Warm:
    warmup_s: float
    warm_kernel_s: float
    pid: int
    threads: int  # Python threads before any submission: the baseline of the thread check
    tasks: int  # OS threads (/proc/self/task) before any submission


@dataclass(frozen=True)
class Ready:
    startup_s: float
    import_s: float


@dataclass(frozen=True)
class Confined:
    """The worker's OS confinement after its warm-up (sandbox/policy.py), before any submission exists."""

    applied: list[str]
    error: str | None


@dataclass(frozen=True)
class Probed:
    """An empty gated call done (clock calibration, before any submission exists)."""


@dataclass(frozen=True)
class ImportFailed:
    kind: str  # compile_error | runtime_error
    error: str


@dataclass(frozen=True)
class Mapped:
    pass


@dataclass(frozen=True)
class SharedOutput:
    """Where the worker's output lives on the GPU: an exported CUDA storage and the tensor's offset."""

    device: int
    handle: str  # hex of PyTorch's shareable handle (a kind byte + the 64-byte cudaIpcMemHandle)
    storage_bytes: int
    storage_offset_bytes: int  # of the allocation block inside the exported segment
    ref_counter: str  # the producer's shared-memory reference counter file (SHM_NAME)
    ref_counter_offset: int
    event_handle: str  # hex of the 64-byte cudaIpcEventHandle recorded when the storage was shared
    event_sync_required: bool
    element_offset: int  # the tensor's storage_offset()


@dataclass(frozen=True)
class Called:
    """What the worker saw during one forward: facts for the judge's checks, never a conclusion."""

    output_problem: str | None
    launches: int
    foreign_launches: int
    violations: list[str]
    threads: int  # Python threads alive after the call
    tasks: int  # OS threads of the process after the call (/proc/self/task)
    tampered: list[str]
    guard_seen_canary: bool
    host_ms: float
    output: SharedOutput | None = None  # CUDA; on the CPU the output follows as raw frames
    output_bytes: int | None = None  # CPU
    hooks: list[str] | None = None  # profile/trace hooks forward left installed (removed by the worker)


@dataclass(frozen=True)
class CallFailed:
    kind: str  # compile_error | runtime_error
    error: str
    violations: list[str]
    cuda_error: bool


@dataclass(frozen=True)
class GpuFault:
    """After a CUDA reply: the worker's stream failed (an illegal address, say); its flag will never come."""

    error: str


@dataclass(frozen=True)
class Bye:
    released: bool


EVENTS: dict[str, type] = {"warm": Warm, "confined": Confined, "probed": Probed,
                           "ready": Ready, "import_failed": ImportFailed, "mapped": Mapped,
                           "called": Called, "call_failed": CallFailed, "gpu_fault": GpuFault, "bye": Bye}
_KINDS = ("compile_error", "runtime_error")


def encode(msg: Any) -> bytes:
    """A worker message as the frame the worker sends."""
    name = next(k for k, v in EVENTS.items() if v is type(msg))
    payload = {"event": name}
    for f in fields(msg):
        value = getattr(msg, f.name)
        payload[f.name] = {g.name: getattr(value, g.name) for g in fields(value)} \
            if isinstance(value, SharedOutput) else value
    if _ENCODE is None:  # pragma: no cover - a Python without json's C accelerator
        return _DUMPS(payload).encode()
    return _JOIN(_ENCODE(payload, 0)).encode()


def _depth(obj: Any, limit: int) -> None:
    stack = [(obj, 1)]
    while stack:
        item, d = stack.pop()
        if d > limit:
            raise ProtocolViolation(f"message nested deeper than {limit}")
        if isinstance(item, dict):
            stack.extend((v, d + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, d + 1) for v in item)


def _check(name: str, value: Any, annotation: str) -> Any:
    """`value` if it fits the field's declared type and bounds, else ProtocolViolation."""
    optional = annotation.endswith(" | None")
    base = annotation.removesuffix(" | None")
    if value is None:
        if optional:
            return None
        raise ProtocolViolation(f"field {name!r} is null")
    if base == "float":
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value or abs(value) > 1e9:
            raise ProtocolViolation(f"field {name!r} must be a finite number, got {type(value).__name__}")
        return float(value)
    if base == "int":
        if isinstance(value, bool) or not isinstance(value, int) or not -(1 << 62) < value < (1 << 62):
            raise ProtocolViolation(f"field {name!r} must be an integer in range")
        return value
    if base == "bool":
        if not isinstance(value, bool):
            raise ProtocolViolation(f"field {name!r} must be a boolean")
        return value
    if base == "str":
        if not isinstance(value, str) or len(value) > MAX_TEXT:
            raise ProtocolViolation(f"field {name!r} must be a string of at most {MAX_TEXT} characters")
        return value
    if base == "list[str]":
        if not isinstance(value, list) or len(value) > MAX_LIST or \
                not all(isinstance(v, str) and len(v) <= MAX_NAME for v in value):
            raise ProtocolViolation(f"field {name!r} must be a list of at most {MAX_LIST} short strings")
        return list(value)
    if base == "SharedOutput":
        if not isinstance(value, dict):
            raise ProtocolViolation(f"field {name!r} must be an object")
        return _build(SharedOutput, value)
    raise AssertionError(f"unhandled annotation {annotation}")  # pragma: no cover - a bug in this module


def _build(cls: type, data: dict) -> Any:
    declared = {f.name: f for f in fields(cls)}
    extra = set(data) - set(declared)
    if extra:
        raise ProtocolViolation(f"{cls.__name__}: unexpected fields {sorted(extra)[:5]}")
    values = {}
    for name, f in declared.items():
        if name in data:
            values[name] = _check(name, data[name], str(f.type))
        elif f.default is MISSING:
            raise ProtocolViolation(f"{cls.__name__}: missing field {name!r}")
    msg = cls(**values)
    _validate(msg)
    return msg


def _validate(msg: Any) -> None:
    """Cross-field rules a well-typed message must still satisfy."""
    if isinstance(msg, ImportFailed | CallFailed) and msg.kind not in _KINDS:
        raise ProtocolViolation(f"kind must be one of {_KINDS}, got {msg.kind[:40]!r}")
    if isinstance(msg, Called):
        if min(msg.launches, msg.foreign_launches, msg.threads, msg.tasks) < 0:
            raise ProtocolViolation("negative counts in 'called'")
        if msg.output_bytes is not None and msg.output_bytes < 0:
            raise ProtocolViolation("negative output_bytes")
    if isinstance(msg, SharedOutput):
        # PyTorch's memory handle is a kind byte plus the 64-byte cudaIpcMemHandle (longer for expandable
        # segments); the event handle is a 64-byte cudaIpcEventHandle. Bounded here, parsed by PyTorch.
        if not re.fullmatch(r"(?:[0-9a-f]{2}){64,512}", msg.handle) or \
                not re.fullmatch(r"([0-9a-f]{128})?", msg.event_handle):
            raise ProtocolViolation("handles must be hex of 64-512 bytes (memory) and 64 bytes (event)")
        if not SHM_NAME.match(msg.ref_counter):
            raise ProtocolViolation("ref_counter is not a PyTorch shared-memory name")
        if min(msg.device, msg.storage_bytes, msg.storage_offset_bytes, msg.ref_counter_offset, msg.element_offset) < 0:
            raise ProtocolViolation("negative sizes or offsets in the shared output")


def decode(data: bytes) -> Any:
    """One worker frame as a message object (see the module docstring); ProtocolViolation otherwise."""
    if len(data) > MAX_FRAME:
        raise ProtocolViolation(f"a control message of {len(data)} bytes (limit {MAX_FRAME})")
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError, MemoryError) as exc:  # not JSON, nested beyond the parser, huge numbers
        raise ProtocolViolation(f"not a JSON message ({type(exc).__name__})") from None
    _depth(obj, MAX_DEPTH)
    if not isinstance(obj, dict):
        raise ProtocolViolation(f"a message must be a JSON object, got {type(obj).__name__}")
    event = obj.pop("event", None)
    if not isinstance(event, str) or event not in EVENTS:
        raise ProtocolViolation(f"unknown event {str(event)[:40]!r}")
    return _build(EVENTS[event], obj)


def expect(msg: Any, *wanted: type) -> Any:
    """`msg` if it is one of the message types the judge waits for here, else ProtocolViolation."""
    if not isinstance(msg, wanted):
        names = "/".join(t.__name__ for t in wanted)
        raise ProtocolViolation(f"expected {names} here, got {type(msg).__name__}")
    return msg
