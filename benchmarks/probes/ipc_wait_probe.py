"""Probe (CUDA only): can the judge's stream wait on a worker's completion and get it back if the worker dies?

Issue #17, session 9: the CUDA corpus stalled after a kernel with an illegal address. The judge's
stream waits on the worker's inter-process DONE event; a worker context that faults may never complete
that record. This probe answers, on the machine it runs on, the questions the fix depends on. Each
scenario runs in its own consumer process (a stuck stream there cannot touch the next one):

- event_kill:      DONE recorded behind a long GPU sleep; is the judge's wait released when the worker is killed?
- event_fault:     DONE recorded behind an illegal-address kernel; released while the worker lives, or after the kill?
- event_rerecord:  DONE behind a long sleep; released when the judge records the same event itself?
- value_kill:      the judge waits on a value in its own memory (cuStreamWaitValue32); the worker, killed,
                   never writes it: does the judge's own write on another stream release the wait?
- value_fault:     the same behind an illegal-address kernel, then a device-wide synchronize to show the
                   judge's context is healthy afterwards.
- timing:          empty gated calls and calls with ~1 ms of worker work, timed START->END with the event
                   wait and with the value wait, to show the two clocks read the same.

Prints one JSON line per scenario and writes them all to --out. Not a test: the findings go to
docs/evaluator.md.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import subprocess
import sys
import time

SLEEP_60S = 60 * 1_980_000_000 // 1000 * 1000  # ~60 s of torch.cuda._sleep at H200 clocks


def _driver_fn(name: str, argtypes):
    lib = ctypes.CDLL("libcuda.so.1")
    fn = getattr(lib, name + "_v2", None) or getattr(lib, name)
    fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return fn


def wait_value(torch, flag, value: int) -> None:
    fn = _driver_fn("cuStreamWaitValue32", [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint])
    rc = fn(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), flag.data_ptr(), value, 0)  # 0: GEQ
    if rc != 0:
        raise RuntimeError(f"cuStreamWaitValue32 returned CUresult {rc}")


try:
    import triton
    import triton.language as tl

    @triton.jit
    def wild_store(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs + (1 << 40), tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)  # far outside any allocation
except ImportError:  # the CPU host: --help only
    wild_store = None


def producer(kind: str, gate_handle, done_handle, flag, inbox, outbox) -> None:
    import torch

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    gate = torch.cuda.Event.from_ipc_handle(dev, gate_handle)
    done = torch.cuda.Event.from_ipc_handle(dev, done_handle)
    x = torch.ones(1 << 20, device=dev)
    if kind == "fault":
        wild_store[(1024,)](x, 0, BLOCK=1024)  # compiled now, stores nothing: the real launch only queues
    torch.cuda.synchronize()
    outbox.put("warm")
    for work, seq in iter(inbox.get, None) if kind == "timing" else [inbox.get()]:
        torch.cuda.current_stream().wait_event(gate)
        if kind == "sleep" or work:
            torch.cuda._sleep(SLEEP_60S if kind == "sleep" else 1_980_000)  # ~1 ms for timing
        elif kind == "fault":
            wild_store[(1024,)](x, x.numel(), BLOCK=1024)
        if flag is not None:
            flag.fill_(seq)
        else:
            done.record()
        outbox.put("queued")
        if kind != "timing":
            time.sleep(120)


def _poll(event, seconds: float) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if event.query():
            return round(time.monotonic() - t0, 3)
        time.sleep(0.01)
    return None


def consumer(scenario: str) -> dict:
    import torch
    import torch.multiprocessing as mp

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    ctx = mp.get_context("spawn")
    gate, done = torch.cuda.Event(interprocess=True), torch.cuda.Event(interprocess=True)
    use_value = scenario.startswith("value") or scenario == "timing"
    flag = torch.zeros(1, dtype=torch.int32, device=dev) if use_value else None
    kind = {"event_kill": "sleep", "event_rerecord": "sleep", "value_kill": "sleep",
            "event_fault": "fault", "value_fault": "fault", "timing": "timing"}[scenario]
    result: dict = {"scenario": scenario, "device": torch.cuda.get_device_name(dev), "torch": torch.__version__}
    if scenario == "timing":
        return result | timing(torch, ctx, gate, done, flag, dev)
    inbox, outbox = ctx.Queue(), ctx.Queue()
    with torch.cuda.device(dev):
        gh, dh = gate.ipc_handle(), done.ipc_handle()
    p = ctx.Process(target=producer, args=(kind, gh, dh, flag, inbox, outbox), daemon=True)
    p.start()
    assert outbox.get(timeout=60) == "warm"
    torch.cuda._sleep(1_000_000_000)  # ~0.5 s: the producer's work queues behind the gate
    gate.record()
    inbox.put((False, 1))
    assert outbox.get(timeout=30) == "queued"
    if use_value:
        wait_value(torch, flag, 1)
    else:
        torch.cuda.current_stream().wait_event(done)
    end = torch.cuda.Event()
    end.record()
    result["released_while_worker_lives_s"] = _poll(end, 3.0)
    if result["released_while_worker_lives_s"] is None:
        if scenario == "event_rerecord":
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                done.record()
            result["released_by_judge_record_s"] = _poll(end, 5.0)
        p.kill()
        p.join(10)
        result["released_after_kill_s"] = _poll(end, 10.0)
        if result["released_after_kill_s"] is None and use_value:
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                flag.fill_(1)
            result["released_by_judge_write_s"] = _poll(end, 5.0)
    if p.is_alive():
        p.kill()
        p.join(10)
    if end.query():
        x = torch.randn(1 << 20, device=dev)
        torch.cuda.synchronize()  # the whole context is healthy again
        result["healthy_after"] = bool(torch.isfinite(x.sum()).item())
    return result


def timing(torch, ctx, gate, done, flag, dev) -> dict:
    """Empty and ~1 ms worker calls, the window read with the event wait and with the value wait."""
    out = {}
    for mode in ("event", "value"):
        inbox, outbox = ctx.Queue(), ctx.Queue()
        with torch.cuda.device(dev):
            gh, dh = gate.ipc_handle(), done.ipc_handle()
        p = ctx.Process(target=producer, args=("timing", gh, dh, flag if mode == "value" else None, inbox, outbox),
                        daemon=True)
        p.start()
        assert outbox.get(timeout=60) == "warm"
        for work in ("empty", "work"):
            windows = []
            for i in range(24):
                seq = 1000 * (work == "work") + i + 2  # increasing: the value wait is `>=`
                torch.cuda._sleep(4_000_000)  # ~2 ms: the host path happens while the GPU spins
                start = torch.cuda.Event(enable_timing=True)
                start.record()
                gate.record()
                inbox.put((work == "work", seq))
                assert outbox.get(timeout=30) == "queued"
                if mode == "value":
                    wait_value(torch, flag, seq)
                else:
                    torch.cuda.current_stream().wait_event(done)
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                end.synchronize()
                windows.append(start.elapsed_time(end))
            out[f"{mode}_{work}_ms"] = {"median": round(statistics.median(windows[4:]), 4),
                                        "min": round(min(windows[4:]), 4), "max": round(max(windows[4:]), 4)}
        inbox.put(None)
        p.join(20)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", nargs="*", default=["event_kill", "event_fault", "event_rerecord", "value_kill",
                                                        "value_fault", "timing"])
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--out")
    ap.add_argument("--limit-s", type=float, default=60)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(consumer(args.one)), flush=True)
        return
    rows = []
    for s in args.scenarios:
        try:
            proc = subprocess.run([sys.executable, __file__, "--one", s], capture_output=True, text=True,
                                  timeout=args.limit_s)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            row = json.loads(lines[-1]) if lines else {"scenario": s, "rc": proc.returncode,
                                                       "stderr": proc.stderr[-1500:]}
        except subprocess.TimeoutExpired as exc:
            row = {"scenario": s, "timed_out_s": args.limit_s, "stderr": (exc.stderr or b"")[-800:].decode(errors="replace")
                   if isinstance(exc.stderr, bytes) else str(exc.stderr)[-800:]}
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
