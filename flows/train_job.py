"""A training epoch as a data-parallel job of N processes: what `epoch_stage` runs when
`trainer.data_parallel.num_processes` > 1.

    python -m torch.distributed.run --standalone --nproc_per_node N -m flows.train_job <run>/epoch-K/dp_job.json

`launch(ctx, epoch)` (in the flow's process) checks the placement, writes the job file, starts the
command above (stdout and stderr go to the flow's), waits, and reads back what rank 0 wrote. Each rank
(`main`) loads the policy on its own device (cuda:<local rank>, or the CPU with gloo), restores the
previous epoch's checkpoint, and runs the same epoch function as the in-process path
(`flows/epoch.py`'s `run_epoch`) with `DataParallel` (kernelflow/train/distributed.py): it generates
and submits its share of every group through its own recording sessions to the experiment's
environment server. Rank 0 therefore writes exactly what the in-process path writes: the checkpoint,
`updates.json`, and the submissions and transcripts of every rank's episodes (gathered, numbered
group by group), plus `dp_result.json` (`EpochResult.summary()`), which `launch` reads back. The
environment token travels in $KERNELFLOW_ENV_TOKEN, never in the job file.

This module does not log to MLflow or mark stages complete (`stages.py` does, from what it reads
back); greedy evaluation stays in the flow's process.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from flows.config import ExperimentConfig, from_parameters, to_container
from flows.epoch import EpochResult, run_epoch
from flows.run_dir import read_json, write_json
from flows.stage_names import epoch_stage
from flows.transcripts import Recorder
from kernelflow.env.models import TOKEN_ENV_VAR

JOB_FILE = "dp_job.json"
RESULT_FILE = "dp_result.json"


def check_placement(config: ExperimentConfig, gpus: int | None = None, cuda: bool | None = None) -> None:
    """Fail before launching when the ranks cannot each get a GPU, or would share one with the evaluator.

    `gpus` / `cuda` default to what torch sees (tests pass them).
    """
    n = config.trainer.data_parallel.num_processes
    if config.trainer.policy.device == "cpu":
        return  # gloo on the CPU: nothing to share
    if cuda is None or gpus is None:
        import torch

        cuda = torch.cuda.is_available() if cuda is None else cuda
        gpus = torch.cuda.device_count() if gpus is None else gpus
    if not cuda:
        if config.trainer.policy.device != "auto":
            raise ValueError(
                f"model.device={config.trainer.policy.device} but no CUDA device is visible; set model.device=cpu "
                "to train the data-parallel ranks on the CPU"
            )
        return
    if n > gpus:
        raise ValueError(
            f"trainer.data_parallel.num_processes={n} but {gpus} GPU(s) are visible; each rank needs its own GPU "
            "(lower num_processes or expose more GPUs with CUDA_VISIBLE_DEVICES)"
        )
    ev = config.eval
    judged_on_gpu = ev.backend == "cuda" or ev.backend == "auto"
    if config.env.url is None and judged_on_gpu and ev.device_index < n:
        raise ValueError(
            f"training ranks use GPUs 0..{n - 1} but the embedded environment judges on GPU eval.device_index="
            f"{ev.device_index}: timing would share a GPU with training; set eval.device_index={n} (or higher), "
            "or run the environment elsewhere (env=remote env.url=...)"
        )


def job_command(job_path: Path, num_processes: int, port: int | None) -> list[str]:
    rendezvous = ["--standalone"] if port is None else ["--nnodes", "1", "--master_addr", "127.0.0.1",
                                                        "--master_port", str(port)]
    return [sys.executable, "-m", "torch.distributed.run", *rendezvous, "--nproc_per_node", str(num_processes),
            "-m", "flows.train_job", str(job_path)]


def launch(ctx: Any, epoch: int) -> EpochResult:
    """Run epoch `epoch` as an N-process job; returns what rank 0 wrote (flows/epoch.py's `EpochResult`)."""
    cfg, run, endpoint = ctx.config, ctx.run, ctx.endpoint
    dp = cfg.trainer.data_parallel
    check_placement(cfg)
    import gc

    import torch

    gc.collect()  # the flow's own policy was let go: hand its cached GPU memory back before the ranks start
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    stage = epoch_stage(epoch)
    stage_dir = run.stage_dir(stage)
    done = run.last_completed_epoch(cfg.trainer.epochs)
    if done != epoch - 1:
        raise RuntimeError(f"{stage} needs the checkpoint of epoch {epoch - 1}, but {done} epoch(s) are complete")
    job = {
        "config": to_container(cfg),  # token redacted; the ranks read it from the environment
        "epoch": epoch,
        "stage": stage,
        "resume": str(run.checkpoint_dir(done)) if done else None,
        "checkpoint": str(run.checkpoint_dir(epoch)),
        "stage_dir": str(stage_dir),
        "env_url": endpoint.url,
    }
    job_path = stage_dir / JOB_FILE
    write_json(job_path, job)
    (stage_dir / RESULT_FILE).unlink(missing_ok=True)
    env = dict(os.environ)
    if endpoint.token:
        env[TOKEN_ENV_VAR] = endpoint.token
    cmd = job_command(job_path, dp.num_processes, dp.main_process_port)
    print(f"{stage}: data-parallel over {dp.num_processes} processes: {' '.join(cmd)}", flush=True)
    rc = subprocess.run(cmd, env=env).returncode
    if rc != 0 or not (stage_dir / RESULT_FILE).is_file():
        raise RuntimeError(
            f"the data-parallel job of {stage} failed (exit status {rc}); its ranks' output is above. "
            f"Rerun it alone with: {' '.join(cmd)}"
        )
    return EpochResult.read(stage_dir, read_json(stage_dir / RESULT_FILE))


def main(job_path: str) -> None:
    from kernelflow.train import load_policy, plan
    from kernelflow.train.distributed import DataParallel
    from kernelflow.train.trainer import GRPOLoop

    job = json.loads(Path(job_path).read_text())
    cfg = from_parameters(job["config"])
    t = cfg.trainer
    dp = DataParallel.start(t)
    logging.basicConfig(level=logging.INFO if dp.is_main else logging.WARNING,
                        format=f"%(asctime)s [rank {dp.rank}] %(message)s", datefmt="%H:%M:%S")
    policy = load_policy(dp.policy_config(t.policy), t.lora, seed=t.seed)
    recorder = Recorder(job["stage"])
    loop = GRPOLoop(
        t, policy, session_factory=recorder.factory(job["env_url"], os.environ.get(TOKEN_ENV_VAR), t.message_timeout_s),
        total_updates=plan(t, len(cfg.tasks.train))["updates"], data_parallel=dp,
    )
    if job["resume"]:
        loop.load_checkpoint(job["resume"])
    stage_dir = Path(job["stage_dir"])
    result = run_epoch(loop, job["epoch"], cfg.tasks.train, job["checkpoint"], stage_dir, recorder, dp)
    if result is not None:  # rank 0
        write_json(stage_dir / RESULT_FILE, {**result.summary(), "num_processes": dp.world_size})
    dp.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m torch.distributed.run --nproc_per_node N -m flows.train_job JOB.json")
    main(sys.argv[1])
    from kernelflow.train.distributed import end_rank

    end_rank(0)  # no interpreter finalisation with gloo threads alive (DataParallel.close says why)
