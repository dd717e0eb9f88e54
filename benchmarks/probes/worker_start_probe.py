"""Start a bare worker at each isolation setting on this host and print its whole log (a diagnosis aid).

    python benchmarks/probes/worker_start_probe.py --backend cuda

For each variant of the backend's mechanisms (all of them, then each left out in turn) it spawns one
worker through the real spawn path (worker_handle.WorkerHandle), waits for it to warm up and confine itself,
and prints the outcome and the worker's own output, so a mechanism that breaks the worker's start on a
new host is named directly. Nothing is judged.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernelflow.eval import EvalConfig, isolation  # noqa: E402
from kernelflow.eval.session.worker_handle import SpawnSpec, WorkerHandle  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cuda")
    args = ap.parse_args()
    device = "cuda:0" if args.backend == "cuda" else "cpu"
    full = isolation.BACKEND_MECHANISMS[args.backend]
    variants = [("all", full)] + [(f"without {m}", full - {m}) for m in sorted(full)]
    for name, mechanisms in variants:
        isolation.BACKEND_MECHANISMS[args.backend] = frozenset(mechanisms)
        spec = replace(SpawnSpec.of(EvalConfig(backend=args.backend), args.backend, device), isolation="auto")
        t = time.monotonic()
        handle = WorkerHandle(spec)
        try:
            handle.ensure_warm(time.monotonic() + 120)
            outcome = f"warm in {time.monotonic() - t:.1f} s"
        except BaseException as exc:  # noqa: BLE001 - what we are here to see
            outcome = f"FAILED: {type(exc).__name__}: {str(exc)[:300]}"
        log = handle.log_path.read_bytes().decode(errors="replace") if handle.log_path.exists() else ""
        handle.close()
        print(f"== {name}: {sorted(mechanisms)}\n   {outcome}\n--- worker log ---\n{log[-3000:]}\n", flush=True)
    isolation.BACKEND_MECHANISMS[args.backend] = full
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
