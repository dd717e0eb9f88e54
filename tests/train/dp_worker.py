"""One rank of the data-parallel trainer test (test_distributed.py launches two with torchrun, gloo on CPU).

    python -m torch.distributed.run --standalone --nproc_per_node 2 -m tests.train.dp_worker SPEC.json

For each case in SPEC, every rank
1. computes the single-process reference in its own process: the same seeds each rank samples its
   share from (`sampling_seed(seed, 0, rank)`), both shares generated one after the other by one
   policy, the whole group's advantages, one `apply_update` over all G sequences;
2. runs the real data-parallel path on a second, identically initialised policy:
   `GRPOLoop(..., data_parallel=...).train_group`, then a full `train_epoch` and `save_checkpoint`;
3. reports the largest LoRA weight difference to the reference after the first update, both
   updates' loss, gradient norm and token count, the answers
   it submitted, its weight digest after the epoch and how often it called the checkpoint writer.
Rank 0 writes the gathered reports to SPEC["out"]; the test asserts on them. This is a test helper,
not a test module (pytest does not collect it).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch

import kernelflow.train.trainer as trainer_module
from kernelflow.config_dicts import config_from_dict
from kernelflow.train.advantages import estimate
from kernelflow.train.config import DataParallelSettings, LoraSettings, PolicyConfig, TrainerConfig
from kernelflow.train.distributed import DataParallel, end_rank, sampling_seed
from kernelflow.train.loss import training_sequences
from kernelflow.train.policy import load_policy
from kernelflow.train.rollout import collect_group
from kernelflow.train.trainer import GRPOLoop
from kernelflow.train.update import apply_update, build_optimizer, build_scheduler
from tests.train.conftest import FakeSession


def lora_weights(policy) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in policy.trainable_parameters()}


def digest(weights: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(weights):
        h.update(name.encode())
        h.update(weights[name].float().numpy().tobytes())
    return h.hexdigest()


def reference_update(config: TrainerConfig, world: int, task_id: str):
    """One process: the shares the N ranks would sample, generated in turn, then one update over all G."""
    policy = load_policy(config.policy, config.lora, seed=config.seed)
    loop = GRPOLoop(config, policy, session_factory=FakeSession)  # seeds like the DP loop; its optimiser unused
    per = config.group_size // world
    episodes = []
    for rank in range(world):
        torch.manual_seed(sampling_seed(config.seed, 0, rank))
        part = collect_group(policy, FakeSession, task_id, per, loop.sampling(), config.max_turns, config.env_seed)
        episodes.extend(part.episodes)
    adv = estimate(config.estimator, [e.episode_return for e in episodes], [e.returns for e in episodes], config.credit)
    optimizer = build_optimizer(policy, config)
    sequences = training_sequences(episodes, adv)
    result = apply_update(policy, optimizer, build_scheduler(optimizer, config, None), sequences, config)
    return lora_weights(policy), result


def run_case(case: dict, spec: dict, out_dir: Path, dp: DataParallel) -> dict:
    policy_config = config_from_dict(PolicyConfig, spec["policy"])
    config = TrainerConfig(
        policy=policy_config, lora=LoraSettings(r=4, alpha=8), group_size=4, max_new_tokens=8, max_turns=2,
        epochs=1, learning_rate=1e-2, seed=7, shuffle_tasks=False, data_parallel=DataParallelSettings(num_processes=2),
        **case["trainer"],
    )
    reference, ref_result = reference_update(config, dp.world_size, spec["tasks"][0])

    answers: list[str] = []

    class Recording(FakeSession):
        def step(self, code):
            answers.append(code)
            return super().step(code)

    policy = load_policy(dp.policy_config(config.policy), config.lora, seed=config.seed)
    loop = GRPOLoop(config, policy, session_factory=Recording, data_parallel=dp)
    first = loop.train_group(1, spec["tasks"][0])
    after_one = lora_weights(policy)
    max_diff = max(float((after_one[n] - reference[n]).abs().max()) for n in reference)
    changed = max(float((after_one[n] - reference_before(n, config)).abs().max()) for n in reference)
    loop.train_epoch(1, spec["tasks"])

    writes = []
    real_save = trainer_module.save_checkpoint

    def counting_save(*args, **kwargs):
        writes.append(str(args[0]))
        return real_save(*args, **kwargs)

    trainer_module.save_checkpoint = counting_save
    try:
        info = loop.save_checkpoint(out_dir / f"{case['name']}-checkpoint")
    finally:
        trainer_module.save_checkpoint = real_save
    return {
        "rank": dp.rank, "max_diff_vs_reference": max_diff, "max_change_by_update": changed,
        "first_update_group_size_per_turn": list(first.group_size_per_turn),
        # AdamW's first step hardly depends on the gradient's scale, so the loss, the gradient norm
        # (before clipping) and the token count are compared too: a wrong normaliser shows there.
        "first_update": [first.loss, first.grad_norm, first.trained_tokens, first.mean_logp],
        "reference_update": [ref_result.loss, ref_result.grad_norm, ref_result.tokens, ref_result.mean_logp],
        "answers": answers, "weights_after_epoch": digest(lora_weights(policy)), "updates": loop.updates,
        "reward_means": [m.reward_mean for m in loop.history], "losses": [m.loss for m in loop.history],
        "checkpoint_writes": writes, "checkpoint_path": str(info.path), "checkpoint_updates": info.updates,
    }


_INITIAL: dict[str, dict[str, torch.Tensor]] = {}


def reference_before(name: str, config: TrainerConfig) -> torch.Tensor:
    """The LoRA weights before any update (the adapter's seeded init), to show the update moved them."""
    key = json.dumps([config.seed, config.lora.r])
    if key not in _INITIAL:
        _INITIAL[key] = lora_weights(load_policy(config.policy, config.lora, seed=config.seed))
    return _INITIAL[key][name]


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out_dir = Path(spec["out"])
    dp = DataParallel.start(
        TrainerConfig(policy=config_from_dict(PolicyConfig, spec["policy"]), group_size=4,
                      data_parallel=DataParallelSettings(num_processes=2))
    )
    reports = {case["name"]: dp.gather(run_case(case, spec, out_dir, dp)) for case in spec["cases"]}
    if dp.is_main:
        (out_dir / "reports.json").write_text(json.dumps(reports, indent=1))
    dp.close()


if __name__ == "__main__":
    main()
    end_rank(0)
