"""The ASGI app in process (stand-in evaluator): routes, the info endpoint, access control, `serve` checks.

Driven with Starlette's TestClient, whose `client` address decides loopback or not.
"""

import argparse
import json

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
