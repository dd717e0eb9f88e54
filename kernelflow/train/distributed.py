"""Data-parallel GRPO: every group's rollouts split over N processes (one per GPU), gradients averaged by DDP.

How an update runs on N ranks (`GRPOLoop(..., data_parallel=DataParallel.start(config))`):

1. every rank generates and submits `group_size / N` of the group's rollouts (its `share`), with its
   own sampling seed derived from (seed, update, rank), so the ranks' rollouts differ and a resumed
   run draws the same ones without per-rank RNG state in the checkpoint;
2. the ranks all-gather their episodes (`gather_group`), so every rank holds the whole group and
   computes the same group-relative advantages (Dr. GRPO's group mean, TRLOO's leave-one-out means
   need every rollout's return) and the same metrics;
3. each rank trains on its own share's sequences through the policy's DistributedDataParallel
   wrapper (accelerate's `Accelerator.prepare`): its loss is divided by (G / N) * normaliser and DDP
   averages the N gradients, which gives exactly the single-process gradient of the whole group
   (update.py); the gradient norm, clipping and AdamW step are then identical on every rank;
4. only rank 0 writes (checkpoints here; the launching job writes metrics and transcripts).

Why split each group rather than hand whole groups to ranks: the loop makes one on-policy update per
task group (the pilot's protocol). Whole groups per rank would put N groups into one optimiser step,
i.e. a different algorithm with N times fewer updates. Splitting keeps the protocol and the update
exact; the cost is smaller generation batches per GPU (decoding is memory-bound, so generation speeds
up less than N-fold for small groups: docs/scale_out.md, "Training across GPUs").

The processes are started by torchrun (`python -m torch.distributed.run`) or `accelerate launch`;
`flows/train_job.py` is the job the flow launches. This module does not launch processes, choose
tasks or write anything but checkpoints (through GRPOLoop on rank 0).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import torch

from kernelflow.train.config import PolicyConfig, TrainerConfig
from kernelflow.train.rollout import GroupRollout
from kernelflow.train.update import UpdateResult


def check_world(config: TrainerConfig, world_size: int) -> None:
    """The launched process count must be the configured one (a mismatch would change every share)."""
    n = config.data_parallel.num_processes
    if world_size != n:
        raise ValueError(
            f"trainer.data_parallel.num_processes={n} but {world_size} process(es) were launched; launch "
            f"exactly {n} (torchrun --nproc_per_node {n}) or set num_processes={world_size}"
        )
    if config.group_size % world_size:
        raise ValueError(
            f"group_size={config.group_size} cannot be split evenly over {world_size} processes; "
            "use a group_size that is a multiple of the process count"
        )


def end_rank(code: int = 0) -> NoReturn:
    """End a launched rank now, without interpreter finalisation: flush its output, then `os._exit`.

    What still references the gloo group at exit (a DDP wrapper in a reference cycle, the caller's
    locals) would otherwise be destroyed during finalisation, when gloo's threads can abort the process
    (see `DataParallel.close`). Everything a rank writes is written and closed before this is called;
    atexit handlers do not run (the rank registers none that matter).
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing left to save
            pass
    os._exit(code)


def sampling_seed(seed: int, update: int, rank: int) -> int:
    """The torch seed rank `rank` samples update `update`'s rollouts from (a hash, so ranks never collide)."""
    digest = hashlib.sha256(f"kernelflow-dp:{seed}:{update}:{rank}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % 2**63


class DataParallel:
    """This process's place in the group of N training processes (an accelerate `Accelerator` inside)."""

    def __init__(self, accelerator: Any) -> None:
        self.accelerator = accelerator

    @classmethod
    def start(cls, config: TrainerConfig) -> DataParallel:
        """Join the process group torchrun / accelerate launch set up (gloo on CPU, NCCL on GPUs)."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        n = config.data_parallel.num_processes
        if "WORLD_SIZE" not in os.environ and n > 1:
            raise RuntimeError(
                f"trainer.data_parallel.num_processes={n} but this process was not started by a launcher "
                f"(no WORLD_SIZE); run it under `python -m torch.distributed.run --nproc_per_node {n}` or "
                f"`accelerate launch --num_processes {n}`"
            )
        check_world(config, world)
        from accelerate import Accelerator

        return cls(Accelerator(cpu=config.policy.device == "cpu"))

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    @property
    def world_size(self) -> int:
        return self.accelerator.num_processes

    @property
    def is_main(self) -> bool:
        return self.accelerator.is_main_process

    @property
    def device(self) -> str:
        """This rank's device as `PolicyConfig.device` spells it (cpu, or cuda:<local rank>)."""
        dev = self.accelerator.device
        return "cpu" if dev.type == "cpu" else f"{dev.type}:{dev.index or 0}"

    def policy_config(self, config: PolicyConfig) -> PolicyConfig:
        """`config` placed on this rank's device (a cuda:N or auto setting would put every rank on one GPU)."""
        return dataclasses.replace(config, device=self.device)

    def wrap(self, model: Any) -> Any:
        """The model's DistributedDataParallel wrapper (parameters shared with `model`, not copied)."""
        return self.accelerator.prepare_model(model, device_placement=False)

    def share(self, group_size: int) -> range:
        """Which of a group's rollouts this rank generates: a contiguous, equal slice."""
        per = group_size // self.world_size
        return range(self.rank * per, (self.rank + 1) * per)

    def gather(self, obj: Any) -> list[Any]:
        """`obj` from every rank, in rank order (pickled through the process group)."""
        from accelerate.utils import gather_object

        return list(gather_object([obj]))

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        from accelerate.utils import broadcast_object_list

        return broadcast_object_list([obj], from_process=0)[0]

    def barrier(self) -> None:
        self.accelerator.wait_for_everyone()

    def close(self) -> None:
        """Wait for every rank, drop the models accelerate holds, then leave the process group.

        Call it last, on every rank, then end the process with `end_rank`. A rank whose gloo group is
        still alive when the interpreter finalises can die with SIGABRT ("terminate called without an
        active exception": gloo's threads outlive the interpreter; pytorch/pytorch#190489), failing the
        launch after the work succeeded. `destroy_process_group` alone did not prevent it (CI saw the
        abort again): it only drops the registry's reference, while the DistributedDataParallel wrapper's
        reducer and accelerate (which keeps every prepared model) may still hold the group, and any C++
        thread that takes the GIL during finalisation aborts. Hence `end_rank`, which skips finalisation.
        """
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            self.barrier()
            self.accelerator.free_memory()  # its prepared models (and their reducers' group) go now
            dist.destroy_process_group()

    def gather_group(self, local: GroupRollout) -> GroupRollout:
        """The whole group from every rank's share: episodes in rank order, renumbered 0..G-1.

        Times are wall times of ranks working side by side (the slowest rank's); token counts and
        decode steps (each rank's own batches' forward passes) are sums.
        """
        parts: list[GroupRollout] = self.gather(local)
        episodes = []
        for part in parts:
            for ep in part.episodes:
                episodes.append(dataclasses.replace(ep, rollout=len(episodes)))
        turns: dict[int, dict] = {}
        for part in parts:
            for t in part.turn_timings:
                cur = turns.setdefault(t["turn"], {"turn": t["turn"], "episodes": 0, "generation_s": 0.0,
                                                   "tokens": 0, "decode_steps": 0, "evaluation_s": 0.0})
                cur["episodes"] += t["episodes"]
                cur["tokens"] += t["tokens"]
                cur["decode_steps"] += t.get("decode_steps", 0)
                cur["generation_s"] = max(cur["generation_s"], t["generation_s"])
                cur["evaluation_s"] = max(cur["evaluation_s"], t["evaluation_s"])
        return GroupRollout(
            task_id=local.task_id,
            episodes=tuple(episodes),
            generation_seconds=max(p.generation_seconds for p in parts),
            generation_tokens=sum(p.generation_tokens for p in parts),
            evaluation_seconds=max(p.evaluation_seconds for p in parts),
            turn_timings=tuple(turns[k] for k in sorted(turns)),
            generation_decode_steps=sum(p.generation_decode_steps for p in parts),
        )

    def combine(self, local: UpdateResult) -> UpdateResult:
        """The group's update statistics from every rank's share.

        Each rank's loss is its share's token sum over (G / N) * normaliser, so the group's loss is
        their mean; token, log-probability and KL sums add up. The gradient norm and learning rate
        are the same on every rank (taken after DDP's average).
        """
        parts: Sequence[UpdateResult] = self.gather(local)
        tokens = sum(p.tokens for p in parts)
        return UpdateResult(
            loss=sum(p.loss for p in parts) / len(parts),
            grad_norm=local.grad_norm,
            lr=local.lr,
            tokens=tokens,
            mean_logp=sum(p.mean_logp * p.tokens for p in parts) / tokens if tokens else 0.0,
            kl=sum(p.kl * p.tokens for p in parts) / tokens if tokens else 0.0,
            seconds=max(p.seconds for p in parts),
            skipped=local.skipped,  # decided from the whole group, the same on every rank
            is_ratio_mean=sum(p.is_ratio_mean * p.tokens for p in parts) / tokens if tokens else 1.0,
            is_ratio_max=max(p.is_ratio_max for p in parts),
            is_truncated_fraction=sum(p.is_truncated_fraction * p.tokens for p in parts) / tokens if tokens else 0.0,
            logp_diff_max=max(p.logp_diff_max for p in parts),
        )

    def seed_rollouts(self, seed: int, update: int) -> None:
        torch.manual_seed(sampling_seed(seed, update, self.rank))
