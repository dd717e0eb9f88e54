"""The pilot's topology: the environment on one GPU, the trainer on another, and whether timing holds.

    python benchmarks/two_gpu.py --env-gpu 1 --trainer-gpu 0 --out results/two_gpu      # two-GPU host
    python benchmarks/two_gpu.py --env-gpu 0 --trainer-gpu 0 --out results/one_gpu      # both on one GPU
    python benchmarks/two_gpu.py --backend interpret --trainer-device cpu --tiny --out /tmp/two  # CPU dry run

1. Starts an environment server with CUDA_VISIBLE_DEVICES=<env-gpu> (its evaluator, timing lock and
   calibration live on that GPU only).
2. Judges the ten honest controls through the server `--repeats` times while the trainer GPU idles.
3. Starts `benchmarks/train_step.py --env-url <server>` with CUDA_VISIBLE_DEVICES=<trainer-gpu> (a
   randomly initialised 0.5B-shaped Qwen2 + LoRA; its rollouts are judged by the same server), waits
   until it has produced its first update, and judges the controls again while it trains.
4. Writes `two_gpu.json` and `two_gpu.md`: per task, the median and spread (max - min) / min of the
   runtime medians while idle and while training, side by side.

Each control is submitted with a new episode seed per repeat, so the verdict cache never answers it.
With both indices equal the script still runs (the topology degenerates to one GPU): that is the
one-GPU check of the script itself, not the measurement the pilot's topology needs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/helpers holds the honest controls

from kernelflow.env.client import KernelEnvSession  # noqa: E402
from kernelflow.env.config import EnvServerConfig  # noqa: E402
from kernelflow.env.server.launch import start_local_server  # noqa: E402
from kernelflow.eval import EvalConfig  # noqa: E402
from kernelflow.tasks import TASKS  # noqa: E402
from tests.helpers.solutions import solution_source  # noqa: E402


def judge_controls(url: str, token: str | None, repeats: int, seed_base: int) -> dict[str, list]:
    """task -> one verdict summary per repeat (each repeat a fresh episode with its own seed)."""
    results: dict[str, list] = {t: [] for t in TASKS}
    for r in range(repeats):
        for i, task_id in enumerate(TASKS):
            with KernelEnvSession(url, token=token) as session:
                session.reset(task_id=task_id, seed=seed_base + 100 * r + i)
                obs = session.step(solution_source(task_id))
            results[task_id].append({"status": obs.status, "runtime_ms": obs.runtime_ms, "reward": obs.reward})
            print(f"  {task_id:<18} {obs.status:<8} runtime {obs.runtime_ms} ms", flush=True)
    return results


def summarise(rows: list[dict]) -> dict:
    times = [r["runtime_ms"] for r in rows if r["runtime_ms"] is not None]
    if not times:
        return {"median_ms": None, "spread": None, "statuses": [r["status"] for r in rows]}
    return {"median_ms": statistics.median(times), "spread": (max(times) - min(times)) / min(times),
            "statuses": [r["status"] for r in rows]}


def wait_for_first_update(proc: subprocess.Popen, out_file: Path, limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if out_file.exists() and json.loads(out_file.read_text() or "{}").get("updates"):
            return True
        time.sleep(2)
    return False


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env-gpu", type=int, default=1)
    p.add_argument("--trainer-gpu", type=int, default=0)
    p.add_argument("--backend", choices=["cuda", "interpret"], default="cuda")
    p.add_argument("--shape", choices=["small", "full"], default=None, help="default: full on cuda, small otherwise")
    p.add_argument("--trainer-device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--tiny", action="store_true", help="train the tiny model (dry runs)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--wait-s", type=float, default=900, help="how long to wait for the trainer's first update")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shape = args.shape or ("full" if args.backend == "cuda" else "small")
    config = EnvServerConfig(eval=EvalConfig(backend=args.backend, shape=shape, max_workers=2), max_sessions=32)
    report: dict = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "env_gpu": args.env_gpu,
                    "trainer_gpu": args.trainer_gpu, "backend": args.backend, "shape": shape}
    env_vars = {"CUDA_VISIBLE_DEVICES": str(args.env_gpu)} if args.backend == "cuda" else {}
    with start_local_server(config, log_path=out / "env_server.log", startup_timeout_s=300, extra_env=env_vars) as srv:
        report["server"] = srv.info()
        print(f"environment server {srv.url} on GPU {args.env_gpu}: {report['server'].get('device')}", flush=True)
        print("controls while the trainer GPU idles:", flush=True)
        idle = judge_controls(srv.url, srv.token, args.repeats, seed_base=1)
        cmd = [sys.executable, str(ROOT / "benchmarks" / "train_step.py"), "--out", str(out / "train"),
               "--env-url", srv.url, "--device", args.trainer_device]
        if srv.token:
            cmd += ["--env-token", srv.token]
        if args.tiny:
            cmd.append("--tiny")
        trainer_env = dict(os.environ)
        if args.trainer_device == "cuda":
            trainer_env["CUDA_VISIBLE_DEVICES"] = str(args.trainer_gpu)
        with open(out / "trainer.log", "wb") as log:
            trainer = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=trainer_env)
        try:
            training_started = wait_for_first_update(trainer, out / "train" / "train_step.json", args.wait_s)
            report["trainer_running_during_measurement"] = training_started and trainer.poll() is None
            print(f"controls while the trainer trains (trainer running: {report['trainer_running_during_measurement']}):",
                  flush=True)
            busy = judge_controls(srv.url, srv.token, args.repeats, seed_base=50_000)
            report["trainer_still_running_after"] = trainer.poll() is None
        finally:
            trainer.terminate()
            trainer.wait(timeout=60)
    report["tasks"] = {t: {"idle": summarise(idle[t]), "training": summarise(busy[t])} for t in TASKS}
    (out / "two_gpu.json").write_text(json.dumps(report, indent=2, default=str))
    lines = [f"Date {report['date']}; environment on GPU {args.env_gpu}, trainer on GPU {args.trainer_gpu}; "
             f"backend {args.backend}, shape {shape}; {args.repeats} repeats per task; trainer running during the "
             f"second measurement: {report['trainer_running_during_measurement']}.", "",
             "| task | idle median ms | idle spread | training median ms | training spread |", "|---|---|---|---|---|"]
    for t, row in report["tasks"].items():
        i, b = row["idle"], row["training"]

        def fmt(v, spec):
            return "-" if v is None else format(v, spec)

        lines.append(f"| {t} | {fmt(i['median_ms'], '.3f')} | {fmt(i['spread'], '.2%')} | "
                     f"{fmt(b['median_ms'], '.3f')} | {fmt(b['spread'], '.2%')} |")
    (out / "two_gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
