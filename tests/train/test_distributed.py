"""Data-parallel training (kernelflow/train/distributed.py): two real processes on gloo, and bad configurations.

The slow test launches two ranks with torchrun (the launcher the flow uses) on the tiny model and a
fake environment (dp_worker.py) and checks: the LoRA weights after one data-parallel update equal a
single-process update over the same rollouts (same sampling seeds); the ranks' rollouts differ; both
ranks hold identical weights after an epoch; only rank 0 writes the checkpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from kernelflow.train.config import DataParallelSettings, TrainerConfig
from kernelflow.train.distributed import DataParallel, check_world, sampling_seed
from kernelflow.train.tiny import build_tiny_model
from tests.flows.conftest import compose_config

REPO = Path(__file__).resolve().parents[2]


def test_group_size_must_split_evenly_over_the_processes():
    with pytest.raises(ValueError, match=r"group_size=4 is not a multiple of data_parallel.num_processes=3"):
        TrainerConfig(group_size=4, data_parallel=DataParallelSettings(num_processes=3))
    with pytest.raises(ValueError, match=r"group_size=2 is not a multiple of data_parallel.num_processes=4.*use group_size 4"):
        TrainerConfig(group_size=2, data_parallel=DataParallelSettings(num_processes=4))  # more processes than rollouts per group
    assert TrainerConfig(group_size=4, data_parallel=DataParallelSettings(num_processes=2)).data_parallel.num_processes == 2


def test_bad_data_parallel_settings_name_the_field():
    with pytest.raises(ValueError, match=r"num_processes=0 \(must be >= 1"):
        DataParallelSettings(num_processes=0)
    with pytest.raises(ValueError, match=r"main_process_port=70000"):
        DataParallelSettings(num_processes=2, main_process_port=70000)


def test_launched_process_count_must_match_the_config():
    config = TrainerConfig(group_size=4, data_parallel=DataParallelSettings(num_processes=2))
    with pytest.raises(ValueError, match=r"num_processes=2 but 4 process\(es\) were launched"):
        check_world(config, 4)
    check_world(config, 2)


def test_data_parallel_outside_a_launcher_says_how_to_launch(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    config = TrainerConfig(group_size=4, data_parallel=DataParallelSettings(num_processes=2))
    with pytest.raises(RuntimeError, match=r"not started by a launcher.*torch.distributed.run --nproc_per_node 2"):
        DataParallel.start(config)


def test_sampling_seeds_differ_by_rank_and_update_and_repeat():
    seeds = {sampling_seed(42, u, r) for u in range(4) for r in range(4)}
    assert len(seeds) == 16
    assert sampling_seed(42, 3, 1) == sampling_seed(42, 3, 1)


def _experiment(*overrides: str):
    from flows.config import to_experiment_config

    return to_experiment_config(compose_config(*overrides))


def test_the_flow_refuses_a_placement_that_cannot_work():
    from flows.run_dir import config_hash
    from flows.train_job import check_placement

    pilot = ("experiment=pilot", "trainer.data_parallel.num_processes=2")
    with pytest.raises(ValueError, match=r"num_processes=2 but 1 GPU\(s\) are visible"):
        check_placement(_experiment(*pilot, "eval.device_index=2"), gpus=1, cuda=True)
    with pytest.raises(ValueError, match=r"embedded environment judges on GPU eval.device_index=1.*device_index=2"):
        check_placement(_experiment(*pilot), gpus=3, cuda=True)  # the pilot's evaluator GPU 1 is a training GPU
    with pytest.raises(ValueError, match=r"model.device=cuda:0 but no CUDA device is visible"):
        check_placement(_experiment(*pilot), gpus=0, cuda=False)
    check_placement(_experiment(*pilot, "eval.device_index=2"), gpus=3, cuda=True)
    check_placement(_experiment(*pilot, "env=remote", "env.url=http://h:8000"), gpus=2, cuda=True)
    check_placement(_experiment("trainer.data_parallel.num_processes=2", "model.device=cpu"), gpus=0, cuda=False)
    # where training runs is not part of the run's identity: the same run continues on more GPUs
    assert config_hash(_experiment(*pilot)) == config_hash(_experiment("experiment=pilot"))


def test_rank_episodes_are_numbered_group_by_group():
    from flows.epoch import merge_episodes

    # two ranks, 2 rollouts each per group, two groups: each rank numbered its own episodes 1..4
    per_rank = [[{"episode": i, "from": (0, i)} for i in (2, 1, 3, 4)], [{"episode": i, "from": (1, i)} for i in (1, 2, 3, 4)]]
    merged = merge_episodes(per_rank, per_group=2)
    assert [e["episode"] for e in merged] == list(range(1, 9))
    assert [e["from"] for e in merged] == [(0, 1), (0, 2), (1, 1), (1, 2), (0, 3), (0, 4), (1, 3), (1, 4)]


@pytest.mark.slow
def test_two_process_update_equals_single_process_update(tiny_policy_config, tmp_path):
    build_tiny_model(tiny_policy_config.tiny, tiny_policy_config.cache_dir)  # once, before two ranks race for it
    spec = {
        "out": str(tmp_path),
        "policy": asdict(tiny_policy_config),
        "tasks": ["19_ReLU", "20_LeakyReLU"],
        "cases": [
            {"name": "dr_grpo", "trainer": {"estimator": "dr_grpo", "micro_batch_size": 1}},
            {"name": "trloo_kl", "trainer": {"estimator": "trloo", "micro_batch_size": 2, "kl_weight": 0.1}},
        ],
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "tests.train.dp_worker", str(tmp_path / "spec.json")]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    reports = json.loads((tmp_path / "reports.json").read_text())
    for name, (r0, r1) in reports.items():
        assert (r0["rank"], r1["rank"]) == (0, 1)
        for r in (r0, r1):
            # the update moved the weights, and to where one process moves them on the same rollouts
            assert r["max_change_by_update"] > 1e-4, name
            assert r["max_diff_vs_reference"] < 1e-6, (name, r["max_diff_vs_reference"])
            assert r["first_update_group_size_per_turn"][0] == 4, name  # metrics cover the whole group
            assert r["first_update"] == pytest.approx(r["reference_update"], rel=1e-5, abs=1e-8), name
        assert r0["answers"] != r1["answers"], name  # each rank sampled its own rollouts
        assert r0["weights_after_epoch"] == r1["weights_after_epoch"], name  # one optimiser step, same on both
        assert r0["losses"] == r1["losses"] and r0["updates"] == r1["updates"] == 3, name
        assert len(r0["checkpoint_writes"]) == 1 and r1["checkpoint_writes"] == [], name
        assert r1["checkpoint_path"] == r0["checkpoint_path"] and r1["checkpoint_updates"] == 3, name
        written = [p.name for p in tmp_path.iterdir() if p.name.startswith((name, f".{name}"))]
        assert written == [f"{name}-checkpoint"], written
        assert (tmp_path / f"{name}-checkpoint" / "adapter" / "adapter_model.safetensors").is_file()


@pytest.mark.slow
def test_the_flow_runs_a_training_epoch_as_a_two_process_job(tmp_path, model_cache):
    """The smoke experiment with trainer.data_parallel.num_processes=2: the epoch stage launches
    flows.train_job on two gloo ranks, and rank 0's files are what the in-process path writes."""
    runs = tmp_path / "runs"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "HF_HUB_OFFLINE": "1"}
    env.pop("PREFECT_API_URL", None)
    cmd = [sys.executable, "-m", "flows.experiment", "trainer.data_parallel.num_processes=2", "validation=none",
           f"tracking.runs_root={runs}", f"model.cache_dir={model_cache}"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "data-parallel over 2 processes" in proc.stdout
    [run] = [p for p in runs.iterdir() if p.name.startswith("smoke-")]
    stage = run / "epoch-1"
    assert json.loads((stage / "dp_result.json").read_text())["num_processes"] == 2
    updates = json.loads((stage / "updates.json").read_text())
    assert [u["update"] for u in updates] == [1, 2, 3, 4]
    assert all(u["group_size_per_turn"][0] == 2 for u in updates)  # each group gathered from both ranks
    episodes = [json.loads(line) for line in (stage / "transcripts.jsonl").read_text().splitlines()]
    assert [e["episode"] for e in episodes] == list(range(1, 9))
    assert [e["task_id"] for e in episodes[::2]] == [e["task_id"] for e in episodes[1::2]]  # a group's pair
    state = json.loads((run / "state.json").read_text())["stages"]
    assert state["epoch-1"]["status"] == "completed" and state["epoch-1"]["summary"]["updates"] == 4
    meta = json.loads((run / "checkpoints" / "epoch-1" / "trainer_state.json").read_text())
    assert meta["updates"] == 4 and meta["epochs_completed"] == 1
    assert state["trained_eval"]["status"] == "completed"  # the flow's policy was rebuilt from that checkpoint


def test_close_waits_for_every_rank_then_leaves_the_process_group(monkeypatch):
    """A rank that exits with its gloo group alive can abort in interpreter teardown; close() prevents it."""
    import socket

    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    events = []

    class Accelerator:  # only what close() touches: the barrier and the release of prepared models
        def wait_for_everyone(self):
            events.append(("barrier", dist.is_initialized()))

        def free_memory(self):
            events.append(("free_memory", dist.is_initialized()))

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        DataParallel(Accelerator()).close()
        # the barrier, then the models' release, both while the group still existed; then the group is gone
        assert events == [("barrier", True), ("free_memory", True)]
        assert not dist.is_initialized()
        DataParallel(Accelerator()).close()  # a second close (or one outside a launcher) is a no-op
        assert events == [("barrier", True), ("free_memory", True)]
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_end_rank_flushes_what_the_rank_printed_and_logged_then_exits_with_the_code(tmp_path):
    """os._exit skips the flush of buffered output: end_rank must flush stdout and logging first."""
    log = tmp_path / "rank.log"
    script = (
        "import logging, sys\n"
        f"logging.basicConfig(filename={str(log)!r}, level=logging.INFO)\n"
        "logging.getLogger('rank').info('checkpoint written')\n"
        "sys.stdout.write('reports written')\n"  # no newline: still in the pipe's buffer
        "import atexit; atexit.register(lambda: print('atexit ran'))\n"
        "from kernelflow.train.distributed import end_rank\n"
        "end_rank(3)\n"
        "print('after end_rank')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"})
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "reports written"  # flushed; neither atexit handlers nor later code ran
    assert "checkpoint written" in log.read_text()
