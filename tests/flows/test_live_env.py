"""The flow's stages against a real embedded environment server (Triton interpreter, small shapes).

The server is started the way the flow starts it (`open_endpoint` without a url) and driven over its
WebSocket protocol. An honest ReLU kernel (a test fixture) stands in for a trained policy's answer,
so extra-seed validation and rejudging see a correct kernel, which a tiny random model never writes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from flows.config import EnvAccess, to_experiment_config
from flows.endpoint import EnvMismatchError, open_endpoint
from flows.rejudge import rejudge_all
from flows.stages import validate
from flows.transcripts import Recorder
from tests.flows.conftest import compose_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SOLUTION = (Path(__file__).parents[1] / "fixtures" / "solutions" / "19_ReLU.py").read_text()
ANSWER = f"Here is my kernel.\n```python\n{SOLUTION}```\n"


@pytest.fixture(scope="module")
def env_access() -> EnvAccess:
    return to_experiment_config(compose_config()).env  # the smoke experiment's: interpret, small, 1 seed


@pytest.fixture(scope="module")
def endpoint(env_access, tmp_path_factory):
    with open_endpoint(env_access, tmp_path_factory.mktemp("env") / "server.log") as ep:
        yield ep


def test_the_embedded_server_judges_as_configured(endpoint, env_access):
    assert endpoint.embedded and endpoint.info["backend"] == "interpret"
    assert endpoint.info["max_turns"] == env_access.server.max_turns


def test_a_remote_server_with_other_settings_is_refused(endpoint, env_access):
    other = dataclasses.replace(env_access.server, eval=dataclasses.replace(env_access.server.eval, seeds=2))
    with pytest.raises(EnvMismatchError, match=r"config_hash: server '[0-9a-f]+', experiment '[0-9a-f]+'"):
        with open_endpoint(EnvAccess(server=other, url=endpoint.url)):
            pass
    gamma = dataclasses.replace(env_access.server, gamma=0.5)
    with pytest.raises(EnvMismatchError, match=r"gamma: server 0.4, experiment 0.5"):
        with open_endpoint(EnvAccess(server=gamma, url=endpoint.url)):
            pass
    with open_endpoint(EnvAccess(server=env_access.server, url=endpoint.url)) as ep:  # the same settings pass
        assert not ep.embedded and ep.info["config_hash"] == endpoint.info["config_hash"]


def test_extra_seed_validation_rejudges_each_solved_task(endpoint):
    from kernelflow.train.evaluation import TaskEvalResult, TurnVerdict

    def turn(n, correct, answer):
        return TurnVerdict(turn=n, status="ok" if correct else "incorrect", correct=correct, reward=0.3 * correct,
                           runtime_ms=None, roofline_fraction=None, completion_tokens=1, truncated=False,
                           answer=answer, feedback="", verdict={})

    records = [
        TaskEvalResult("19_ReLU", 0, (turn(1, False, "no"), turn(2, True, ANSWER))),
        TaskEvalResult("23_Softmax", 0, (turn(1, False, "no"),)),
    ]
    recorder = Recorder("seed_validation")
    out = validate(recorder, endpoint, records, seeds=[1000, 1001], shape="small", max_sessions=4, timeout_s=300)
    assert out["solved"] == 1 and out["validated"] == 1 and set(out["tasks"]) == {"19_ReLU"}
    assert out["tasks"]["19_ReLU"]["correct"] == 2
    assert sorted(e["seed"] for e in recorder.episodes) == [1000, 1001]
    assert all(e["turns"][0]["verdict"]["status"] == "ok" for e in recorder.episodes)


def test_rejudging_resubmits_stored_answers_and_compares_verdicts(endpoint, tmp_path):
    subs = [
        {"stage": "trained_eval", "episode": 1, "task_id": "19_ReLU", "seed": 0, "turn": 1, "answer": ANSWER,
         "status": "ok", "correct": True, "reward": 0.3},
        {"stage": "trained_eval", "episode": 2, "task_id": "23_Softmax", "seed": 0, "turn": 1, "answer": "no code",
         "status": "no_code", "correct": False, "reward": 0.0},
        {"stage": "epoch-1", "episode": 3, "task_id": "19_ReLU", "seed": 0, "turn": 2, "answer": ANSWER,
         "status": "incorrect", "correct": False, "reward": 0.0},  # stored as wrong: the re-judging disagrees
    ]
    recorder = Recorder("rejudge-1")
    rows = rejudge_all(recorder, endpoint.url, endpoint.token, subs, "small", workers=3, timeout_s=300)
    assert [r["new"]["status"] for r in rows] == ["ok", "no_code", "ok"]
    assert [r["agree"] for r in rows] == [True, True, False]
    assert rows[0]["new"]["verdict"]["code_sha256"]
    counts = recorder.write(tmp_path)
    assert counts == {"episodes": 3, "submissions": 3}
    kernel = (tmp_path / "kernels" / "19_ReLU").glob("*.py")
    assert any("relu_kernel" in p.read_text() for p in kernel)
