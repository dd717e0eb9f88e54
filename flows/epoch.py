"""One training epoch as the flow runs it, written once for both paths: in the flow's process
(`stages.epoch_stage`) and in each rank of a data-parallel job (`flows/train_job.py`).

`run_epoch(loop, ...)` trains the epoch (one update per training task), saves the checkpoint, and
writes the stage's files: `updates.json` (`UpdateMetrics.to_dict()` per update) and the recorded
episodes' submissions, transcripts and kernels (`Recorder.write`). With a `DataParallel` every rank
calls it: all ranks train and reach the checkpoint together (rank 0 writes it), the ranks' episodes
are gathered and numbered group by group (`merge_episodes`), and only rank 0 writes files and gets
an `EpochResult` (the others get None).

`EpochResult` is what the stage logs: the updates, the checkpoint (`CheckpointInfo`), the recorded
counts and the total number of updates. `summary()` is its JSON record (the torchrun job's
`dp_result.json`, the stage's summary in state.json) and `EpochResult.read(stage_dir, summary)` builds
it back with the types' own readers (`UpdateMetrics.from_dict`, `CheckpointInfo.read`).

This module does not log to MLflow, mark stages complete or launch processes (stages.py and
train_job.py do).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flows.run_dir import read_json, write_json
from flows.transcripts import Recorder

if TYPE_CHECKING:
    from kernelflow.train.checkpoint import CheckpointInfo
    from kernelflow.train.metrics import UpdateMetrics

UPDATES_FILE = "updates.json"


@dataclass(frozen=True)
class EpochResult:
    """One epoch's outcome, as the main process wrote it (see the module docstring)."""

    updates: tuple[UpdateMetrics, ...]
    checkpoint: CheckpointInfo
    counts: dict[str, int]  # recorded episodes and submissions (Recorder.write)
    total_updates: int  # updates made so far, across epochs

    def summary(self) -> dict[str, Any]:
        return {"checkpoint": str(self.checkpoint.path), "counts": dict(self.counts), "updates": self.total_updates}

    @classmethod
    def read(cls, stage_dir: Path, summary: dict[str, Any]) -> EpochResult:
        """The result `run_epoch` wrote into `stage_dir`, from its `summary()`."""
        from kernelflow.train.checkpoint import CheckpointInfo

        return cls(tuple(read_updates(stage_dir / UPDATES_FILE)), CheckpointInfo.read(summary["checkpoint"]),
                   dict(summary["counts"]), int(summary["updates"]))


def read_updates(path: Path) -> list[UpdateMetrics]:
    """`updates.json` back as `UpdateMetrics` records (what the stage logs and the report plots)."""
    from kernelflow.train.metrics import UpdateMetrics

    return [UpdateMetrics.from_dict(d) for d in read_json(path)]


def merge_episodes(per_rank: list[list[dict[str, Any]]], per_group: int) -> list[dict[str, Any]]:
    """Every rank's recorded episodes numbered 1.. group by group (rank 0's share of a group first).

    A rank records `per_group` episodes per group, numbered 1.. in the order it made them.
    """
    keyed = []
    for rank, episodes in enumerate(per_rank):
        for ep in episodes:
            keyed.append(((ep["episode"] - 1) // per_group, rank, ep["episode"], ep))
    keyed.sort(key=lambda k: k[:3])
    return [{**ep, "episode": i} for i, (*_, ep) in enumerate(keyed, 1)]


def run_epoch(loop: Any, epoch: int, task_ids: Sequence[str], checkpoint_dir: str | Path, stage_dir: Path,
              recorder: Recorder, data_parallel: Any = None) -> EpochResult | None:
    """Train epoch `epoch` of `loop` (a `GRPOLoop` whose sessions record into `recorder`), checkpoint it
    into `checkpoint_dir` and write the stage's files into `stage_dir`; None on a rank other than 0."""
    updates = loop.train_epoch(epoch, list(task_ids))
    info = loop.save_checkpoint(checkpoint_dir)
    dp = data_parallel
    if dp is not None:
        per_rank = dp.gather(recorder.episodes)
        if not dp.is_main:
            return None
        merged = Recorder(recorder.stage)
        for ep in merge_episodes(per_rank, loop.config.group_size // dp.world_size):
            merged.add(ep)
        recorder = merged
    write_json(stage_dir / UPDATES_FILE, [m.to_dict() for m in updates])
    counts = recorder.write(stage_dir)
    return EpochResult(tuple(updates), info, counts, loop.updates)
