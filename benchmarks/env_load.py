"""Bounded load test of the environment server: many concurrent sessions, every verdict accounted for.

    python benchmarks/env_load.py                       # embedded server: interpreter backend, small shapes
    python benchmarks/env_load.py --sessions 32 --steps 2 --concurrency 16 --json out.json
    python benchmarks/env_load.py --url http://gpu-host:8000 --token ...   # an existing server

Each session is one episode of 19_ReLU (its own seed) with `--steps` submissions drawn from a fixed
mix: an honest Triton ReLU (ok), a ReLU that copies its input (incorrect), an answer without code
(no_code) and a module calling torch.relu (static_rejected). The benchmark reports verdict latency
(p50/p95, per kind of submission), throughput, the server's peak memory (RSS of the server and all
its descendants, sampled every 0.2 s; embedded server only) and the submissions without exactly one
verdict: a step that raised or came back without a verdict, or a session whose final state does not
hold exactly one verdict per step, each matching the verdict its step returned. That count must be
0; the exit code is 1 otherwise. Everything is bounded: `--time-limit` for the whole run, the
client's message timeout for each step.

Interpreter timings measure the server and the pool, not kernels.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/helpers holds the honest controls

from kernelflow.env.client import AsyncKernelEnvSession, fetch_server_info  # noqa: E402
from tests.helpers.solutions import solution_source  # noqa: E402

HONEST = "```python\n" + solution_source("19_ReLU") + "```"  # the suite's honest control, fenced like a reply
WRONG = HONEST.replace("tl.maximum(x.to(tl.float32), 0.0)", "x")
NO_CODE = "I could not write this kernel."
TORCH_OP = HONEST.replace("out = torch.empty_like(x)", "out = torch.relu(x)")

SUBMISSIONS = {"honest": (HONEST, "ok"), "wrong": (WRONG, "incorrect"), "no_code": (NO_CODE, "no_code"),
               "torch_op": (TORCH_OP, "static_rejected")}
# Per session i, the kinds of its turns cycle through these plans (honest and failing kernels mixed).
PLANS = [("wrong", "honest"), ("no_code", "honest"), ("honest", "wrong"), ("torch_op", "no_code")]


@dataclass
class StepRecord:
    session: int
    turn: int
    kind: str
    latency_s: float | None = None
    status: str | None = None
    expected: str | None = None
    sha: str | None = None
    error: str | None = None


@dataclass
class SessionRecord:
    session: int
    steps: list[StepRecord] = field(default_factory=list)
    state_shas: list[str] | None = None
    error: str | None = None


# ---- memory of the server's process tree, from /proc -------------------------------------------------


def _tree_rss_bytes(pid: int) -> int:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        stack.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


class MemorySampler(threading.Thread):
    def __init__(self, pid: int, interval_s: float = 0.2):
        super().__init__(daemon=True)
        self.pid, self.interval_s, self.peak, self.samples = pid, interval_s, 0, 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.peak = max(self.peak, _tree_rss_bytes(self.pid))
            self.samples += 1
            self._stop_event.wait(self.interval_s)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)


# ---- the load -------------------------------------------------------------------------------------------


async def run_session(i: int, args, gate: asyncio.Semaphore, progress: dict) -> SessionRecord:
    record = SessionRecord(session=i)
    plan = PLANS[i % len(PLANS)]
    async with gate:
        try:
            async with AsyncKernelEnvSession(args.url, token=args.token, message_timeout_s=args.step_timeout) as s:
                await s.reset("19_ReLU", seed=1000 + i, shape=args.shape)
                for turn in range(args.steps):
                    kind = plan[turn % len(plan)]
                    answer, expected = SUBMISSIONS[kind]
                    step = StepRecord(session=i, turn=turn + 1, kind=kind, expected=expected)
                    record.steps.append(step)
                    started = time.monotonic()
                    try:
                        obs = await s.step(answer)
                    except Exception as exc:  # counted below as a submission without a verdict
                        step.error = f"{type(exc).__name__}: {exc}"
                        break
                    step.latency_s = time.monotonic() - started
                    if obs.verdict:
                        step.status, step.sha = obs.verdict.get("status"), obs.verdict.get("code_sha256")
                    progress["steps"] += 1
                    if obs.done:
                        break
                state = await s.state()
                record.state_shas = [v.get("code_sha256") for v in state.verdicts]
        except Exception as exc:
            record.error = f"{type(exc).__name__}: {exc}"
    return record


async def run_load(args) -> tuple[list[SessionRecord], float]:
    gate = asyncio.Semaphore(args.concurrency)
    progress = {"steps": 0}
    started = time.monotonic()

    async def report():
        total = args.sessions * args.steps
        while True:
            await asyncio.sleep(10)
            done = progress["steps"]
            elapsed = time.monotonic() - started
            print(f"  {done}/{total} verdicts after {elapsed:.0f} s ({done / elapsed:.2f}/s)", flush=True)

    reporter = asyncio.create_task(report())
    try:
        records = await asyncio.wait_for(
            asyncio.gather(*(run_session(i, args, gate, progress) for i in range(args.sessions))),
            timeout=args.time_limit,
        )
    finally:
        reporter.cancel()
    return list(records), time.monotonic() - started


def account(records: list[SessionRecord]) -> dict:
    """Submissions without exactly one verdict, and verdicts whose status was not the expected one."""
    without, unexpected, problems = 0, 0, []
    for rec in records:
        acknowledged = [s for s in rec.steps if s.error is None and s.sha is not None]
        without += sum(1 for s in rec.steps if s.error is not None or s.sha is None)
        if rec.error and not rec.steps:
            problems.append(f"session {rec.session}: {rec.error}")
        if rec.state_shas is None:
            without += len(acknowledged)  # the state could not confirm them
            problems.append(f"session {rec.session}: no final state ({rec.error})")
        elif rec.state_shas != [s.sha for s in acknowledged]:
            extra = abs(len(rec.state_shas) - len(acknowledged))
            without += max(extra, 1)
            problems.append(f"session {rec.session}: state holds {len(rec.state_shas)} verdicts for "
                            f"{len(acknowledged)} acknowledged steps, or they differ")
        for s in rec.steps:
            if s.error:
                problems.append(f"session {rec.session} turn {s.turn}: {s.error}")
            elif s.status != s.expected:
                unexpected += 1
                problems.append(f"session {rec.session} turn {s.turn}: {s.kind} judged {s.status}, "
                                f"expected {s.expected}")
    return {"without_exactly_one_verdict": without, "unexpected_status": unexpected, "problems": problems[:20]}


def _pct(values: list[float], q: float) -> float | None:
    """The q-quantile with linear interpolation (numpy's default), None for no values."""
    return float(np.percentile(values, 100 * q)) if values else None


def environment_facts() -> dict:
    from importlib.metadata import version

    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    versions = {}
    for dist in ("kernelflow", "openenv", "torch", "triton", "fastapi", "uvicorn", "websockets", "pydantic"):
        try:
            versions[dist] = version(dist)
        except Exception:
            versions[dist] = "not installed"
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "python": platform.python_version(),
            "platform": platform.platform(), "versions": versions}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=None, help="an existing server (default: start an embedded one)")
    parser.add_argument("--token", default=None)
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--steps", type=int, default=2, help="submissions per session (the server's max_turns)")
    parser.add_argument("--concurrency", type=int, default=16, help="sessions open at once (<= max_sessions)")
    parser.add_argument("--shape", choices=["small", "full"], default="small")
    parser.add_argument("--backend", default="interpret", help="embedded server's backend")
    parser.add_argument("--max-workers", type=int, default=2, help="embedded server's evaluator pool")
    parser.add_argument("--time-limit", type=float, default=1200.0, help="seconds for the whole load")
    parser.add_argument("--step-timeout", type=float, default=900.0, help="seconds to wait for one verdict")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)

    server = None
    sampler = None
    if args.url is None:
        from kernelflow.env.config import EnvServerConfig
        from kernelflow.env.server.launch import start_local_server
        from kernelflow.eval import EvalConfig

        config = EnvServerConfig(
            eval=EvalConfig(backend=args.backend, shape=args.shape, max_workers=args.max_workers),
            max_turns=args.steps, max_sessions=max(args.concurrency, 1),
        )
        print(f"starting an embedded server ({args.backend}, {args.shape}, {args.max_workers} workers)", flush=True)
        server = start_local_server(config)
        args.url = server.url
        sampler = MemorySampler(server.pid)
        sampler.start()
    try:
        info = fetch_server_info(args.url, token=args.token)
        if info["max_turns"] < args.steps:
            print(f"the server allows {info['max_turns']} turns; use --steps <= that", file=sys.stderr)
            return 2
        print(f"load: {args.sessions} sessions x {args.steps} steps, {args.concurrency} at once, on {args.url} "
              f"({info['backend']}, {info['device']}, {info['max_workers']} workers)", flush=True)
        records, wall_s = asyncio.run(run_load(args))
    finally:
        if sampler is not None:
            sampler.stop()
        if server is not None:
            server.stop()

    steps = [s for r in records for s in r.steps]
    latencies = [s.latency_s for s in steps if s.latency_s is not None]
    by_kind = {}
    for kind in SUBMISSIONS:
        lat = [s.latency_s for s in steps if s.kind == kind and s.latency_s is not None]
        by_kind[kind] = {"count": len(lat), "p50_s": _pct(lat, 0.5), "p95_s": _pct(lat, 0.95)}
    acct = account(records)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "sessions": args.sessions, "steps_per_session": args.steps, "concurrency": args.concurrency,
        "submissions": len(steps), "verdicts": len(latencies),
        "wall_s": wall_s, "throughput_verdicts_per_s": len(latencies) / wall_s if wall_s else None,
        "latency_p50_s": _pct(latencies, 0.5), "latency_p95_s": _pct(latencies, 0.95),
        "latency_mean_s": statistics.fmean(latencies) if latencies else None,
        "latency_max_s": max(latencies) if latencies else None,
        "by_kind": by_kind,
        "peak_server_rss_mib": sampler.peak / 2**20 if sampler else None,
        "memory_samples": sampler.samples if sampler else 0,
        "server": {k: info.get(k) for k in ("evaluator_version", "backend", "device", "max_workers", "max_sessions",
                                            "config_hash")},
        "environment": environment_facts(),
        **acct,
    }
    print(json.dumps({k: v for k, v in result.items() if k not in ("environment", "problems")}, indent=2))
    for problem in acct["problems"]:
        print(f"  problem: {problem}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0 if acct["without_exactly_one_verdict"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
