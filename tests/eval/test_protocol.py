"""The judge-worker protocol (kernelflow/eval/protocol.py): what the judge accepts from a worker.

Every worker frame is hostile input (the worker runs the submission). These check that each rule of
`decode` holds: a round trip of every message type, and a clean `ProtocolViolation` (never another
exception, never a hang) for frames that are too large, too deep, not JSON, of an unknown event, with
missing, extra or ill-typed fields, or naming files outside PyTorch's shared-memory names.
"""

from __future__ import annotations

import json

import pytest

from kernelflow.eval import protocol
from kernelflow.eval.protocol import ProtocolViolation, decode, encode

SHARED = protocol.SharedOutput(0, "63" + "ab" * 64, 4096, 0, "/torch_123_456_0", 0, "cd" * 64, True, 0)
MESSAGES = [
    protocol.Warm(1.0, 0.1, 42, 3, 7),
    protocol.Probed(),
    protocol.Ready(1.0, 0.2),
    protocol.ImportFailed("compile_error", "SyntaxError: ..."),
    protocol.Mapped(),
    protocol.Called(None, 1, 0, [], 3, 7, [], True, 0.5, SHARED, None),
    protocol.Called("output shape (2,), expected (3,)", 1, 0, ["add"], 3, 7, [], True, 0.5, None, None),
    protocol.Called(None, 1, 0, [], 3, 7, [], True, 0.5, None, 64),
    protocol.Called(None, 1, 0, [], 3, 7, [], True, 0.5, None, 64, ["sys.setprofile"]),
    protocol.CallFailed("runtime_error", "boom", [], False),
    protocol.GpuFault("AcceleratorError: CUDA error: an illegal memory access was encountered"),
    protocol.Bye(True),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(msg):
    assert decode(encode(msg)) == msg


def _frame(**fields) -> bytes:
    return json.dumps(fields).encode()


BAD = {
    "too large": b'{"event": "mapped", "pad": "' + b"x" * (protocol.MAX_FRAME + 10) + b'"}',
    "nested past the parser": b"[" * 50_000 + b"]" * 50_000,
    "nested past the limit": _frame(event="bye", released={"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": 1}}}}}}}}),
    "not json": b"\xff\xfe not json",
    "not an object": b"[1, 2, 3]",
    "unknown event": _frame(event="verdict", status="ok"),
    "no event": _frame(released=True),
    "missing field": _frame(event="ready", startup_s=1.0),
    "extra field": _frame(event="ready", startup_s=1.0, import_s=1.0, reward=3.0),
    "a string for a number": _frame(event="ready", startup_s="1.0", import_s=1.0),
    "a bool for an int": _frame(event="warm", warmup_s=1.0, warm_kernel_s=0.1, pid=True, threads=1, tasks=1),
    "an infinite number": b'{"event": "ready", "startup_s": 1e999, "import_s": 1}',
    "a number with 5000 digits": ('{"event": "ready", "startup_s": ' + "9" * 5000 + ', "import_s": 1}').encode(),
    "an unknown failure kind": _frame(event="call_failed", kind="ok", error="", violations=[], cuda_error=False),
    "too many violations": _frame(event="call_failed", kind="runtime_error", error="",
                                  violations=["x"] * 1000, cuda_error=False),
    "negative launches": json.dumps({**json.loads(encode(MESSAGES[5])), "launches": -1}).encode(),
    "a path as the ref counter": json.dumps({**json.loads(encode(MESSAGES[5])),
                                             "output": {**json.loads(encode(MESSAGES[5]))["output"],
                                                        "ref_counter": "/../../etc/passwd"}}).encode(),
    "a huge handle": json.dumps({**json.loads(encode(MESSAGES[5])),
                                 "output": {**json.loads(encode(MESSAGES[5]))["output"], "handle": "00" * 600}}).encode(),
    "a short handle": json.dumps({**json.loads(encode(MESSAGES[5])),
                                  "output": {**json.loads(encode(MESSAGES[5]))["output"], "handle": "00"}}).encode(),
}


@pytest.mark.parametrize("frame", list(BAD.values()), ids=list(BAD))
def test_a_frame_that_breaks_a_rule_is_a_protocol_violation(frame):
    with pytest.raises(ProtocolViolation):
        decode(frame)


def test_expect_refuses_a_message_out_of_sequence():
    assert protocol.expect(protocol.Mapped(), protocol.Mapped) == protocol.Mapped()
    with pytest.raises(ProtocolViolation, match="expected Ready/ImportFailed"):
        protocol.expect(protocol.Mapped(), protocol.Ready, protocol.ImportFailed)
