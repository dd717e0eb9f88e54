"""The Ray evaluation backend on a local Ray cluster (this machine, 2 logical CPUs, interpreter, small shapes).

One cluster per module (`ray.init` takes ~5-10 s here) and one `RayEvaluator` with two CPU actors
shared by the tests, which run in file order: affinity first (it reads which actor holds which task),
then an actor killed mid-batch, then a submission that kills every actor it reaches, then a live
environment server that joins the same cluster. The config and layer checks at the end need no cluster.

Killing actors. The evaluator already runs each submission in a worker subprocess, so nothing a
submission does under `static_checks` kills the *actor* (a segfault or `os._exit` in the kernel ends
the worker and is judged `crashed` by the actor's own Evaluator). Actor deaths come from outside the
submission (a node lost, an OOM kill, an operator), so the tests cause them from outside:
`ray.kill(ev.actor(i))` mid-batch, and `FaultyActor`, a test-only actor class whose `evaluate`
calls `os._exit` when the answer holds `KILL_THE_ACTOR`, standing in for a submission that
reliably brings down whatever process judges it.
"""

from __future__ import annotations

import ast
import os
import threading
import time
from pathlib import Path

import pytest

from kernelflow.env.config import EnvServerConfig
from kernelflow.eval import EvalConfig, Status, code_sha256
from kernelflow.eval.cluster.ray_backend import EvalActor, RayConfig
from kernelflow.tasks import extract_code
from tests.env.kernels import HONEST_RELU, WRONG_RELU
from tests.helpers.solutions import solution_source

CONFIG = EvalConfig(backend="interpret", shape="small", seeds=1, timed_runs=1, timeout_s=120, max_workers=1)
SIGMOID = solution_source("21_Sigmoid")
LEAKY = solution_source("20_LeakyReLU")
TANH = solution_source("22_Tanh")
KILL_MARKER = "KILL_THE_ACTOR"
REPO = Path(__file__).resolve().parents[2]


class FaultyActor(EvalActor):
    """An evaluation actor that dies (the whole actor process) on an answer holding KILL_MARKER."""

    def evaluate(self, task_id, answer, seed, shape):
        if answer and KILL_MARKER in answer:
            os._exit(13)
        return super().evaluate(task_id, answer, seed, shape)


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    # The actors' worker processes import this module (FaultyActor) by name, so the repo must be on their path.
    context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="kernelflow-test",
                       runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                                                             os.environ.get("PYTHONPATH")]))}})
    yield context
    ray.shutdown()


@pytest.fixture(scope="module")
def ev(cluster):
    from kernelflow.eval.cluster.ray_backend import RayEvaluator

    # 0.5 CPU each: the env-server test's own actor fits beside these two on the 2-CPU cluster.
    evaluator = RayEvaluator(CONFIG, RayConfig(num_actors=2, cpus_per_actor=0.5, max_actor_deaths_per_submission=2,
                                               actor_start_timeout_s=120), actor_class=FaultyActor)
    yield evaluator
    evaluator.close()


def _served(ev) -> list[int]:
    return [s["served"] for s in ev.stats()["slots"]]


def _wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def _all_ready(ev) -> bool:
    return all(s["state"] == "ready" for s in ev.stats()["slots"])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tasks_keep_to_their_actor_and_spread_over_both(ev):
    info = ev.info()
    assert info["eval_backend"] == "ray" and info["num_actors"] == 2 and info["backend"] == "interpret"
    assert len({a["pid"] for a in info["actors"]}) == 2

    # One at a time: a new task goes to the actor holding the fewest tasks, a repeat to the one that served it.
    placed = {}
    for task_id, code, seed in [("20_LeakyReLU", LEAKY, 0), ("22_Tanh", TANH, 0), ("20_LeakyReLU", LEAKY, 1),
                                ("22_Tanh", TANH, 1)]:
        before = _served(ev)
        v = ev.evaluate(task_id, code, seed=seed)
        assert v.status == Status.OK, v.feedback
        slot = [a - b for a, b in zip(_served(ev), before, strict=True)].index(1)
        placed.setdefault(task_id, set()).add(slot)
    assert placed["20_LeakyReLU"] != placed["22_Tanh"], placed
    assert all(len(slots) == 1 for slots in placed.values()), placed

    # A batch of one task spreads once its actor is busy (one pool slot per actor here).
    before = _served(ev)
    verdicts = ev.evaluate_batch([("19_ReLU", HONEST_RELU, seed) for seed in range(4)])
    assert [v.status for v in verdicts] == [Status.OK] * 4
    delta = [a - b for a, b in zip(_served(ev), before, strict=True)]
    assert sum(delta) == 4 and min(delta) >= 1, delta


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_actor_killed_mid_batch_loses_nothing_and_duplicates_nothing(ev):
    import ray

    items = [("19_ReLU", HONEST_RELU, 10), ("19_ReLU", WRONG_RELU, 10), ("21_Sigmoid", SIGMOID, 10),
             ("19_ReLU", HONEST_RELU, 11), ("21_Sigmoid", SIGMOID, 11), ("19_ReLU", WRONG_RELU, 11)]
    expected = [Status.OK, Status.INCORRECT, Status.OK, Status.OK, Status.OK, Status.INCORRECT]
    before = ev.stats()
    victim_pid = before["slots"][0]["pid"]
    out: dict = {}
    runner = threading.Thread(target=lambda: out.update(verdicts=ev.evaluate_batch(items)))
    runner.start()
    _wait(lambda: all(s["in_flight"] == 1 for s in ev.stats()["slots"]), 60, "both actors to hold a submission")
    time.sleep(1.0)  # let the victim's worker get going: the submission dies mid-evaluation
    ray.kill(ev.actor(0))
    runner.join(timeout=240)
    assert not runner.is_alive(), "the batch did not finish"

    verdicts = out["verdicts"]
    assert len(verdicts) == len(items)
    for (task_id, code, _seed), want, v in zip(items, expected, verdicts, strict=True):
        assert v.task_id == task_id and v.status == want, (task_id, v.status, v.feedback)
        assert v.code_sha256 == code_sha256(extract_code(code))
    after = ev.stats()
    assert after["submitted"] - before["submitted"] == len(items)
    assert after["verdicts"] - before["verdicts"] == len(items)
    assert after["retries"] - before["retries"] >= 1  # the killed actor's submission ran again elsewhere
    assert sum(s["served"] for s in after["slots"]) - sum(s["served"] for s in before["slots"]) == len(items)
    assert after["slots"][0]["deaths"] == before["slots"][0]["deaths"] + 1
    _wait(lambda: _all_ready(ev), 120, "the replacement actor")
    assert ev.stats()["slots"][0]["pid"] != victim_pid


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_submission_that_kills_every_actor_ends_crashed(ev):
    _wait(lambda: _all_ready(ev), 120, "both actors ready")
    before = ev.stats()
    answer = HONEST_RELU.replace("import torch\n", f"import torch  # {KILL_MARKER}\n", 1)
    v = ev.evaluate("19_ReLU", answer, seed=3)
    assert v.status == Status.CRASHED and v.reward == 0 and not v.correct
    assert "died 2 times" in v.checks["ray_actor"].why and "max_actor_deaths_per_submission=2" in v.feedback
    assert v.code_sha256 == code_sha256(extract_code(answer)) and v.seeds == [3] and v.task_id == "19_ReLU"
    after = ev.stats()
    deaths = sum(s["deaths"] for s in after["slots"]) - sum(s["deaths"] for s in before["slots"])
    assert deaths == 2 and after["retries"] - before["retries"] == 1 and after["crashed"] - before["crashed"] == 1
    # The replacements come up and judge the next honest submission.
    v = ev.evaluate("19_ReLU", HONEST_RELU, seed=4)
    assert v.status == Status.OK, v.feedback


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_env_server_with_the_ray_backend_runs_an_episode(cluster, tmp_path):
    from kernelflow.env.client import KernelEnvSession, fetch_server_info
    from kernelflow.env.server.launch import start_local_server

    address = cluster.address_info["gcs_address"]
    config = EnvServerConfig(eval=CONFIG, max_turns=2, eval_backend="ray",
                             ray=RayConfig(address=address, num_actors=1, cpus_per_actor=0.5, actor_start_timeout_s=120))
    with start_local_server(config, log_path=tmp_path / "server.log", startup_timeout_s=180) as server:
        info = fetch_server_info(server.url)
        assert info["eval_backend"] == "ray" and info["num_actors"] == 1 and info["backend"] == "interpret"
        with KernelEnvSession(server.url) as env:
            env.reset("19_ReLU", seed=0, shape="small")
            first = env.step(WRONG_RELU)
            assert first.status == "incorrect" and not first.done
            second = env.step(HONEST_RELU)
            assert second.status == "ok" and second.done and second.reward == pytest.approx(0.3)
            assert second.episode_return == pytest.approx(0.4 * 0.3)


# ---- no cluster needed ---------------------------------------------------------------------------

def test_ray_config_checks_its_values():
    RayConfig()
    with pytest.raises(ValueError, match="num_actors=0"):
        RayConfig(num_actors=0)
    with pytest.raises(ValueError, match="max_actor_deaths_per_submission=0"):
        RayConfig(max_actor_deaths_per_submission=0)
    with pytest.raises(ValueError, match="num_cpus=2 applies to a local instance only"):
        RayConfig(address="auto", num_cpus=2)
    with pytest.raises(ValueError, match="gpus_per_actor=-1"):
        RayConfig(gpus_per_actor=-1)
    assert RayConfig(call_timeout_s=None).call_timeout(CONFIG) == 2 * CONFIG.timeout_s + 120


def test_server_config_selects_the_backend_from_json(tmp_path):
    assert EnvServerConfig().eval_backend == "local"
    data = {"eval": {"backend": "interpret"}, "eval_backend": "ray", "ray": {"address": "auto", "num_actors": 4}}
    config = EnvServerConfig.from_dict(data)
    assert config.eval_backend == "ray" and config.ray == RayConfig(address="auto", num_actors=4)
    assert EnvServerConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="eval_backend='dask'"):
        EnvServerConfig(eval_backend="dask")
    with pytest.raises(ValueError, match=r"ray: unknown key\(s\) \['adress'\] for RayConfig"):
        EnvServerConfig.from_dict({"ray": {"adress": "auto"}})
    local = EnvServerConfig(eval=CONFIG, max_sessions=16)
    ray_cfg = EnvServerConfig(eval=CONFIG, max_sessions=16, eval_backend="ray", ray=RayConfig(num_actors=4))
    assert ray_cfg.worst_case_step_s() < local.worst_case_step_s()  # four pools instead of one


RAY_MODULES = {"kernelflow/eval/cluster/ray_backend.py", "kernelflow/eval/cluster/actor_pool.py"}  # the optional Ray backend


def test_only_the_ray_backend_imports_ray_and_only_lazily():
    offenders = []
    for path in sorted((REPO / "kernelflow").rglob("*.py")) + sorted((REPO / "flows").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        top_level = set(map(id, tree.body))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if not any(n == "ray" or n.startswith("ray.") for n in names):
                continue
            rel = path.relative_to(REPO).as_posix()
            if rel not in RAY_MODULES or id(node) in top_level:
                offenders.append(f"{rel}:{node.lineno}")
    assert offenders == [], f"ray imported outside eval's Ray backend, or at module level: {offenders}"
