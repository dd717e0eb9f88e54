"""Run one experiment for several seeds at once, all judged by ONE shared environment server.

    python benchmarks/seeds_parallel.py OUT --seeds 1,2,3 [--limit-s S] -- experiment=learnability eval=gpu ...

Why: `python -m flows.experiment -m seed=1,2,3` runs the seeds one after another, each with its own
embedded environment server. On one GPU the seeds can instead run side by side: the evaluator's pool
and its device-memory budget (kernelflow/eval/session/device_memory.py) are sized once, for the whole GPU, so
one server must judge for all of them. Several embedded servers would each size their budget from the
same free memory and together over-commit the card, and each would pre-warm its own workers.

What it does, in order:
1. composes the experiment exactly as `python -m flows.experiment` would (Hydra, conf/, the overrides
   after `--`), for the first seed, and writes the environment server's settings to OUT/env_server.json,
   with `max_sessions` multiplied by the number of seeds (each flow opens up to its own limit);
2. starts that server (`kernelflow.env.server`, the embedded launcher: loopback, free port, its log in
   OUT/env_server.log) and waits for its health check;
3. creates the MLflow experiment once in the shared store (`<runs_root>/mlflow.db`), so the flows do
   not race on SQLite's schema creation;
4. starts one `python -m flows.experiment <overrides> seed=N env=remote env.url=<server>` per seed,
   a few seconds apart, each with its own PREFECT_HOME (its own temporary Prefect server and
   database) and its log in OUT/seed-N.log; each flow checks the server's configuration hash against
   its own before it judges anything (flows/endpoint.py);
5. waits for all of them (at most `--limit-s`; then they are stopped with SIGTERM and can be resumed
   by running the same command again: completed stages and epochs are skipped), stops the server,
   and writes OUT/seeds_parallel.json (per seed: exit code, wall time, log).

Not covered: the seeds' policies share the machine's CPUs (give the policy `model.device=cpu` and a
thread count with OMP_NUM_THREADS, or the GPU, in the overrides); with the policy on the GPU its
generation overlaps other seeds' timed kernel runs, which the evaluator's device lock does not cover.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def compose(overrides: list[str]):
    """The ExperimentConfig `python -m flows.experiment <overrides>` would run."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from flows.config import register, to_experiment_config

    register()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf"), job_name="seeds_parallel"):
        return to_experiment_config(hydra_compose(config_name="config", overrides=overrides))


def ensure_experiment(config) -> str:
    """Create the MLflow experiment in the run's store once, before the flows start side by side."""
    from mlflow.tracking import MlflowClient

    from flows.run_dir import runs_root
    from flows.tracking import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, tracking_uri

    client = MlflowClient(tracking_uri=tracking_uri(config))
    exp = client.get_experiment_by_name(config.tracking.experiment)
    if exp is not None:
        return exp.experiment_id
    location = None if config.tracking.uri else (runs_root(config) / "mlartifacts").as_uri()
    return client.create_experiment(config.tracking.experiment, artifact_location=location,
                                    tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})


def stop_all(processes: list[subprocess.Popen], grace_s: float = 20.0) -> None:
    """SIGTERM every flow's process group (its Prefect server too) at once, SIGKILL what is left after `grace_s`."""
    live = [p for p in processes if p.poll() is None]
    for p in live:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    for p in live:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="directory for the server's settings and log, and one log per seed")
    ap.add_argument("--seeds", default="1,2,3", help="comma-separated seeds, e.g. 1,2,3")
    ap.add_argument("--limit-s", type=float, default=0.0, help="stop the flows after this many seconds (0: none)")
    ap.add_argument("--stagger-s", type=float, default=5.0, help="seconds between the flows' starts")
    args = ap.parse_args(own)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if not seeds:
        ap.error("--seeds names no seed")
    for o in overrides:
        if o.lstrip("+~").split("=", 1)[0] in ("seed", "env", "env.url"):
            ap.error(f"override {o!r} is set per seed by this script; leave it out")
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()

    config = compose([*overrides, f"seed={seeds[0]}"])
    server_cfg = replace(config.env.server, max_sessions=config.env.server.max_sessions * len(seeds))
    (args.out / "env_server.json").write_text(json.dumps(server_cfg.to_dict(include_token=False), indent=2) + "\n")
    experiment_id = ensure_experiment(config)

    from kernelflow.env.server.launch import start_local_server

    server = start_local_server(server_cfg, log_path=args.out / "env_server.log",
                                startup_timeout_s=config.env.startup_timeout_s)
    print(f"environment server pid {server.pid} at {server.url} ({server_cfg.max_sessions} sessions); "
          f"MLflow experiment {config.tracking.experiment!r} ({experiment_id})", flush=True)
    procs: dict[int, tuple[subprocess.Popen, float]] = {}
    results: dict[int, dict] = {}
    stopped: set[int] = set()  # seeds stopped at --limit-s (resumable), as opposed to ones that exited
    try:
        for i, seed in enumerate(seeds):
            if i:
                time.sleep(args.stagger_s)
            home = args.out / f"prefect-home-{seed}"
            home.mkdir(exist_ok=True)
            env = {**os.environ, "PREFECT_HOME": str(home), "PYTHONUNBUFFERED": "1"}
            cmd = [sys.executable, "-m", "flows.experiment", *overrides, f"seed={seed}", "env=remote",
                   f"env.url={server.url}"]
            log = open(args.out / f"seed-{seed}.log", "ab")  # noqa: SIM115 - closed with the process below
            procs[seed] = (subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True), time.monotonic())
            log.close()
            print(f"seed {seed}: pid {procs[seed][0].pid}, log {args.out / f'seed-{seed}.log'}", flush=True)

        def collect() -> None:
            for seed, (p, start) in procs.items():
                if p.poll() is not None and seed not in results:
                    results[seed] = {"rc": p.returncode, "wall_s": round(time.monotonic() - start, 1)}
                    print(f"seed {seed}: exit {p.returncode} after {results[seed]['wall_s']} s", flush=True)

        while any(p.poll() is None for p, _ in procs.values()):
            if args.limit_s and time.monotonic() - t0 > args.limit_s:
                print(f"limit of {args.limit_s:.0f} s reached: stopping the flows still running "
                      "(run the same command again to resume them)", flush=True)
                stopped.update(seed for seed, (p, _) in procs.items() if p.poll() is None)
                stop_all([p for p, _ in procs.values()])
                break
            time.sleep(2.0)
            collect()
        else:
            collect()
    finally:
        stop_all([p for p, _ in procs.values()])
        server.stop()
    for seed, (p, _start) in procs.items():
        results.setdefault(seed, {"rc": p.returncode, "wall_s": None, "stopped_at_limit": seed in stopped})
        results[seed]["log"] = str(args.out / f"seed-{seed}.log")
    summary = {"seeds": results, "overrides": overrides, "server": server_cfg.to_dict(include_token=False),
               "wall_s": round(time.monotonic() - t0, 1)}
    (args.out / "seeds_parallel.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    print(f"{len(seeds)} seed(s) in {summary['wall_s']} s: " +
          ", ".join(f"seed {s} rc={r['rc']}" for s, r in sorted(results.items())), flush=True)
    return 0 if all(r["rc"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
