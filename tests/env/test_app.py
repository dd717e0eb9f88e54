"""The ASGI app in process (stand-in evaluator): routes, the info endpoint, access control, `serve` checks.

Driven with Starlette's TestClient, whose `client` address decides loopback or not.
"""

import argparse
import json
import logging
import re
import time

import pytest
from fastapi.testclient import TestClient

from kernelflow.env.config import EnvServerConfig
from kernelflow.env.server.app import create_kernel_app, serve
from tests.env.fakes import FakeEvaluator

TOKEN = "s3cret-token-0123456789"
LOOPBACK = ("127.0.0.1", 50000)
REMOTE = ("10.1.2.3", 50000)


def client_for(config: EnvServerConfig, address=LOOPBACK, evaluator=None) -> TestClient:
    return TestClient(create_kernel_app(config, evaluator=evaluator or FakeEvaluator()), client=address)


def test_routes_info_and_schema():
    evaluator = FakeEvaluator()
    with client_for(EnvServerConfig(max_sessions=3), evaluator=evaluator) as client:
        assert client.get("/health").json()["status"] == "healthy"
        schema = client.get("/schema").json()
        assert "code" in schema["action"]["properties"] and "verdict" in schema["observation"]["properties"]
        assert "returns" in schema["state"]["properties"]
        info = client.get("/kernelflow/info").json()
        for key in ("evaluator_version", "backend", "device", "config_hash", "max_turns", "gamma", "stop_on_correct"):
            assert key in info
        assert (info["max_sessions"], info["active_sessions"], info["auth_required"]) == (3, 0, False)
        # an episode lives in a WebSocket session; the stateless HTTP step is not offered
        assert client.post("/step", json={"action": {"code": "x"}}).status_code in (404, 405)
    assert evaluator.closed  # closed on shutdown


def test_websocket_episode_in_process():
    with client_for(EnvServerConfig()) as client, client.websocket_connect("/ws") as ws:
        ws.send_text(json.dumps({"type": "reset", "data": {"task_id": "19_ReLU", "seed": 2}}))
        reply = json.loads(ws.receive_text())
        assert reply["type"] == "observation" and reply["data"]["observation"]["prompt"]
        ws.send_text(json.dumps({"type": "step", "data": {"code": "HALF"}}))
        ws.send_text(json.dumps({"type": "step", "data": {"code": "FAST"}}))
        first, second = json.loads(ws.receive_text()), json.loads(ws.receive_text())
        assert first["data"]["reward"] == pytest.approx(1.65) and not first["data"]["done"]
        assert second["data"]["done"] and second["data"]["observation"]["episode_return"] == pytest.approx(2.85)


def test_without_token_only_loopback_clients_are_served():
    with client_for(EnvServerConfig(), address=REMOTE) as client:
        assert client.get("/health").status_code == 200  # open for health checks
        r = client.get("/kernelflow/info")
        assert r.status_code == 401 and "serves loopback clients only" in r.json()["detail"]
        with client.websocket_connect("/ws") as ws:
            frame = json.loads(ws.receive_text())
        assert frame["type"] == "error" and frame["data"]["code"] == "UNAUTHORIZED"
        assert "10.1.2.3" in frame["data"]["message"]


@pytest.mark.parametrize("address", [LOOPBACK, REMOTE])
def test_token_is_required_and_checked(address):
    with client_for(EnvServerConfig(token=TOKEN), address=address) as client:
        r = client.get("/kernelflow/info")
        assert r.status_code == 401 and "requires an access token" in r.json()["detail"]
        r = client.get("/kernelflow/info", headers={"Authorization": "Bearer wrong-token-000000000"})
        assert r.status_code == 401 and "wrong" in r.json()["detail"]
        assert client.get("/kernelflow/info", headers={"Authorization": f"Bearer {TOKEN}"}).json()["auth_required"]
        assert client.get("/kernelflow/info", headers={"X-Kernelflow-Token": TOKEN}).status_code == 200
        assert client.get(f"/kernelflow/info?token={TOKEN}").status_code == 200
        assert client.get(f"/token/{TOKEN}/kernelflow/info").status_code == 200

        with client.websocket_connect("/ws", headers={"Authorization": "Bearer nope-nope-nope-nope"}) as ws:
            frame = json.loads(ws.receive_text())
        assert frame == {"type": "error", "data": {"message": frame["data"]["message"], "code": "UNAUTHORIZED"}}
        # the path form is for clients that can only set a base URL (openenv-core 0.3.0's EnvClient)
        for url, headers in [("/ws", {"Authorization": f"Bearer {TOKEN}"}), (f"/token/{TOKEN}/ws", {})]:
            with client.websocket_connect(url, headers=headers) as ws:
                ws.send_text(json.dumps({"type": "reset", "data": {"task_id": "19_ReLU"}}))
                assert json.loads(ws.receive_text())["type"] == "observation"


def test_serve_refuses_a_public_address_without_token(monkeypatch, capsys):
    monkeypatch.delenv("KERNELFLOW_ENV_TOKEN", raising=False)
    args = argparse.Namespace(host="0.0.0.0", port=0, config=None)
    assert serve(args) == 2
    err = capsys.readouterr().err
    assert "refusing to listen on '0.0.0.0' without an access token" in err and "KERNELFLOW_ENV_TOKEN" in err


def test_serve_reports_a_bad_config_file(tmp_path, capsys):
    path = tmp_path / "server.json"
    path.write_text(json.dumps({"max_turns": 0}))
    assert serve(argparse.Namespace(host="127.0.0.1", port=0, config=str(path))) == 2
    assert "max_turns=0" in capsys.readouterr().err


def test_module_level_app_is_built_lazily_from_the_environment(tmp_path, monkeypatch):
    import kernelflow.env.server.app as app_module

    path = tmp_path / "server.json"
    # prewarm 0: a partial eval would take the served defaults (a warm pool), which this test does not need
    path.write_text(json.dumps({"max_turns": 3, "eval": {"backend": "interpret", "prewarm_workers": 0}}))
    monkeypatch.setenv("KERNELFLOW_ENV_CONFIG", str(path))
    app_module._module_app.cache_clear()
    try:
        with TestClient(app_module.app, client=LOOPBACK) as client:
            info = client.get("/kernelflow/info").json()
        assert info["max_turns"] == 3 and info["backend"] == "interpret"
    finally:
        app_module._module_app.cache_clear()


# ---- what the server says: log lines per episode and verdict, error codes (issue 22) ---------------


def _errors(ws, frames):
    replies = []
    for frame in frames:
        ws.send_text(frame if isinstance(frame, str) else json.dumps(frame))
        replies.append(json.loads(ws.receive_text()))
    assert all(r["type"] == "error" for r in replies), replies
    return [r["data"] for r in replies]


def test_one_info_line_per_episode_start_verdict_and_episode_end(caplog):
    caplog.set_level(logging.INFO, logger="kernelflow.env.server.environment")
    with client_for(EnvServerConfig()) as client, client.websocket_connect("/ws") as ws:
        ws.send_text(json.dumps({"type": "reset", "data": {"task_id": "19_ReLU", "seed": 2}}))
        ws.receive_text()
        for code in ("wrong", "HALF"):
            ws.send_text(json.dumps({"type": "step", "data": {"code": code}}))
            ws.receive_text()
    lines = [r for r in caplog.records if r.name == "kernelflow.env.server.environment"]
    assert all(r.levelno == logging.INFO for r in lines)
    text = [r.getMessage() for r in lines]
    assert len(text) == 4, text
    assert text[0].startswith("episode start: task 19_ReLU, seed 2, shape small, episode ")
    assert re.fullmatch(r"verdict: task 19_ReLU, turn 1/2, status incorrect, reward 0\.000, \d+\.\d\d s, episode \w+", text[1])
    assert re.fullmatch(r"verdict: task 19_ReLU, turn 2/2, status ok, reward 1\.650, \d+\.\d\d s, episode \w+", text[2])
    assert text[3].startswith("episode end: task 19_ReLU after 2 turns, rewards [0.0, 1.65], return 0.660, episode ")


def test_a_frame_without_type_names_the_missing_field_and_the_session_goes_on():
    with client_for(EnvServerConfig()) as client, client.websocket_connect("/ws") as ws:
        (missing, empty) = _errors(ws, [{"data": {"task_id": "19_ReLU"}}, {}])
        for data in (missing, empty):
            assert data["code"] == "VALIDATION_ERROR"
            assert "no 'type' field" in data["message"] and "reset, step, state, close" in data["message"]
        assert "'data'" in missing["message"]
        ws.send_text(json.dumps({"type": "reset", "data": {"task_id": "19_ReLU"}}))
        assert json.loads(ws.receive_text())["type"] == "observation"


def test_input_the_environment_refuses_is_a_validation_error_naming_the_field():
    with client_for(EnvServerConfig(max_code_chars=100)) as client, client.websocket_connect("/ws") as ws:
        before_reset, = _errors(ws, [{"type": "step", "data": {"code": "FAST"}}])
        replies = _errors(ws, [
            {"type": "reset", "data": {"task_id": "99_Nope"}},
            {"type": "reset", "data": {"task_id": "19_ReLU", "seed": -1}},
            {"type": "reset", "data": {"task_id": "19_ReLU", "shape": "huge"}},
        ])
        ws.send_text(json.dumps({"type": "reset", "data": {"task_id": "19_ReLU"}}))
        ws.receive_text()
        too_long, = _errors(ws, [{"type": "step", "data": {"code": "x" * 101}}])
    expected = [(before_reset, "type", "step before reset"), (replies[0], "task_id", "unknown task '99_Nope'"),
                (replies[1], "seed", "seed -1 must be an integer"), (replies[2], "shape", "unknown shape 'huge'"),
                (too_long, "code", "over this server's limit of 100 (max_code_chars)")]
    for data, field, text in expected:
        assert data["code"] == "VALIDATION_ERROR", data
        (error,) = data["errors"]
        assert error["type"] == "env_input" and error["loc"] == [field] and text in error["msg"], error
        assert error["input"] is None  # the offending value (maybe a long submission) is not echoed back


def test_an_unfinished_episode_is_logged_as_abandoned(caplog):
    caplog.set_level(logging.INFO, logger="kernelflow.env.server.environment")
    def ends() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("episode end")]

    with client_for(EnvServerConfig()) as client:
        with client.websocket_connect("/ws") as ws:
            for frame in ({"type": "reset", "data": {"task_id": "19_ReLU"}}, {"type": "step", "data": {"code": "wrong"}},
                          {"type": "reset", "data": {"task_id": "22_Tanh"}}):
                ws.send_text(json.dumps(frame))
                ws.receive_text()
        # the server handles the close after the client has left: wait for it while the app still runs
        deadline = time.monotonic() + 30
        while len(ends()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    ends = ends()
    assert [e.split(", episode ")[0] for e in ends] == [
        "episode end: task 19_ReLU abandoned after 1 of 2 turns by a new reset",
        "episode end: task 22_Tanh abandoned after 0 of 2 turns by the session's end",
    ]
