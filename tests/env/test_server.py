"""The environment server as a server: a subprocess on 127.0.0.1 at a free port, driven over its
WebSocket protocol (by the typed client and by raw openenv-core 0.3.0 frames), stopped by its PID.

Interpreter backend, small shapes, one seed and one timed run per evaluation (a correct kernel earns
0.3 there). Every loop is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from kernelflow.env.client import (
    AsyncKernelEnvSession,
    EnvAuthError,
    EnvCapacityError,
    EnvServerError,
    EnvTimeoutError,
    EnvUnavailableError,
    KernelEnvSession,
    fetch_server_info,
)
from kernelflow.env.config import EnvServerConfig
from kernelflow.env.models import KernelObservation, KernelState
from kernelflow.env.server.launch import start_local_server
from kernelflow.eval import EvalConfig, Verdict
from tests.env.kernels import HONEST_RELU, WRONG_RELU, no_code
from tests.env.procs import alive, descendants

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TOKEN = "test-token-0123456789abcdef"
EVAL = EvalConfig(backend="interpret", shape="small", seeds=1, timed_runs=1, max_workers=2, timeout_s=120)


def _start(tmp_path_factory, name: str, **kw):
    log = tmp_path_factory.mktemp(name) / "server.log"
    server = start_local_server(EnvServerConfig(eval=EVAL, **kw), log_path=log, startup_timeout_s=120)
    yield server
    pid = server.pid
    code = server.stop()
    assert code is not None and not server.alive(), f"server {pid} did not stop"
    assert descendants(pid) == [], "the server left processes behind"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from _start(tmp_path_factory, "open", max_sessions=10)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A server with a token and room for two sessions."""
    yield from _start(tmp_path_factory, "guarded", max_sessions=2, token=TOKEN)


def ws_url(server) -> str:
    return server.url.replace("http://", "ws://") + "/ws"


def ask(ws, frame, timeout: float = 120) -> dict:
    ws.send(frame if isinstance(frame, (str, bytes)) else json.dumps(frame))
    return json.loads(ws.recv(timeout=timeout))


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.25):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


# ---- episodes -------------------------------------------------------------------------------------


def test_two_turn_episode_wrong_then_right(server):
    info = fetch_server_info(server.url)
    assert (info["backend"], info["max_turns"], info["gamma"], info["stop_on_correct"]) == ("interpret", 2, 0.4, False)
    assert len(info["config_hash"]) == 64 and info["evaluator_version"] and info["device"]

    with KernelEnvSession(server.url) as session:
        first = session.reset("19_ReLU", seed=3)
        assert first.prompt and "ModelNew" in first.prompt and [m["role"] for m in first.messages] == ["system", "user"]
        assert (first.turn, first.max_turns, first.done, first.reward) == (0, 2, False, None)

        wrong = session.step(WRONG_RELU)
        assert (wrong.status, wrong.compiled, wrong.correct, wrong.reward, wrong.done) == (
            "incorrect", True, False, 0.0, False)
        assert wrong.feedback and wrong.returns is None and wrong.episode_return is None

        right = session.step(HONEST_RELU)
        assert right.status == "ok" and right.correct, right.feedback
        assert right.reward == pytest.approx(0.3) and right.done and right.turn == 2
        assert right.rewards == [0.0, pytest.approx(0.3)]
        assert right.returns == [pytest.approx(0.3 * 0.4), pytest.approx(0.3)]
        assert right.episode_return == pytest.approx(0.0 + 0.4 * 0.3)
        assert right.verdict["seeds"] == [3] and right.verdict["shape"] == "small"

        state = session.state()
        assert isinstance(state, KernelState)
        assert (state.task_id, state.seed, state.shape, state.turn, state.done) == ("19_ReLU", 3, "small", 2, True)
        assert [v["status"] for v in state.verdicts] == ["incorrect", "ok"]
        assert state.returns == right.returns and state.episode_return == right.episode_return


def test_eight_concurrent_sessions_keep_their_own_state(server):
    tasks = ["19_ReLU", "20_LeakyReLU", "21_Sigmoid", "22_Tanh"]

    async def episode(i: int):
        task, seed = tasks[i % 4], 100 + i
        async with AsyncKernelEnvSession(server.url) as session:
            await session.reset(task, seed=seed)
            await session.step(no_code(f"session {i}"))
            # every session makes the pool work; only the ReLU ones are right
            last = await session.step(HONEST_RELU if task == "19_ReLU" else WRONG_RELU)
            return i, task, seed, last, await session.state()

    async def main():
        return await asyncio.wait_for(asyncio.gather(*(episode(i) for i in range(8))), timeout=240)

    results = asyncio.run(main())
    assert len(results) == 8
    for _i, task, seed, last, state in results:
        expected = 0.3 if task == "19_ReLU" else 0.0
        assert (state.task_id, state.seed, state.turn, state.done) == (task, seed, 2, True)
        assert [v["task_id"] for v in state.verdicts] == [task, task]
        assert [v["seeds"] for v in state.verdicts] == [[seed], [seed]]
        assert state.verdicts[0]["status"] == "no_code"
        assert state.rewards == [0.0, pytest.approx(expected)] == last.rewards
        assert last.episode_return == pytest.approx(0.4 * expected) == state.episode_return
    assert len({s.episode_id for *_, s in results}) == 8
    wait_until(lambda: fetch_server_info(server.url)["active_sessions"] == 0, 20, "all sessions to close")


# ---- bad input ------------------------------------------------------------------------------------


def test_bad_input_gets_clear_errors_and_the_session_stays_usable(server):
    def error(reply, code, text):
        assert reply["type"] == "error", reply
        assert reply["data"]["code"] == code, reply
        assert text in json.dumps(reply["data"]), reply

    with connect(ws_url(server), open_timeout=10) as ws:
        error(ask(ws, {"type": "step", "data": {"code": "x"}}), "VALIDATION_ERROR", "step before reset")
        error(ask(ws, {"type": "reset", "data": {"task_id": "99_Nope"}}), "VALIDATION_ERROR", "unknown task '99_Nope'")
        # a near miss is answered with the closest ids, as the CLI does, not with the whole list of ids
        typo = ask(ws, {"type": "reset", "data": {"task_id": "23_Softmx"}})
        error(typo, "VALIDATION_ERROR", "unknown task '23_Softmx'; did you mean '23_Softmax'")
        assert "32_HardTanh" not in json.dumps(typo) and "kernelflow tasks" in json.dumps(typo)
        error(ask(ws, {"type": "reset", "data": {"task_id": "19_ReLU", "temp": 1}}), "VALIDATION_ERROR", "temp")
        error(ask(ws, {"type": "reset", "data": {"task_id": "19_ReLU", "seed": "x"}}), "VALIDATION_ERROR", "seed")
        error(ask(ws, "{this is not json"), "INVALID_JSON", "Invalid JSON")
        error(ask(ws, {"type": "launch_missiles"}), "UNKNOWN_TYPE", "launch_missiles")
        error(ask(ws, {"data": {"task_id": "19_ReLU"}}), "VALIDATION_ERROR", "no 'type' field")
        error(ask(ws, {"type": "reset", "data": "19_ReLU"}), "VALIDATION_ERROR", "data")
        error(ask(ws, ["reset"]), "INVALID_JSON", "must be a JSON object")  # valid JSON, not an object
        error(ask(ws, b'{"type": "state"}'), "INVALID_JSON", "binary frames are not accepted")

        assert ask(ws, {"type": "reset", "data": {"task_id": "19_ReLU", "seed": 9}})["type"] == "observation"
        error(ask(ws, {"type": "step", "data": {"code": 123}}), "VALIDATION_ERROR", "valid string")
        error(ask(ws, {"type": "step", "data": {"code": ["x"]}}), "VALIDATION_ERROR", "code")
        error(ask(ws, {"type": "step", "data": {}}), "VALIDATION_ERROR", "code")
        error(ask(ws, {"type": "step", "data": {"code": "x", "language": "cuda"}}), "VALIDATION_ERROR", "language")
        error(ask(ws, {"type": "step", "data": {"code": "#" * 100_001}}), "VALIDATION_ERROR", "max_code_chars")

        # none of that touched the episode
        assert ask(ws, {"type": "state"})["data"]["turn"] == 0
        first = ask(ws, {"type": "step", "data": {"code": no_code("a")}})["data"]
        second = ask(ws, {"type": "step", "data": {"code": no_code("b")}})["data"]
        assert (first["done"], second["done"], second["observation"]["returns"]) == (False, True, [0.0, 0.0])
        error(ask(ws, {"type": "step", "data": {"code": "x"}}), "VALIDATION_ERROR", "episode is done")
        assert ask(ws, {"type": "reset", "data": {"task_id": "20_LeakyReLU"}})["type"] == "observation"
        assert ask(ws, {"type": "state"})["data"]["task_id"] == "20_LeakyReLU"

    with KernelEnvSession(server.url) as session:
        with pytest.raises(EnvServerError, match=r"unknown task '19_relu'; did you mean '19_ReLU'\?"):
            session.reset("19_relu")
        with pytest.raises(TypeError, match="code must be a string"):
            session.step(b"bytes")  # type: ignore[arg-type]
        with pytest.raises(EnvServerError, match="step before reset"):
            session.step("x")
        assert session.reset("19_ReLU").task_id == "19_ReLU"


def test_reply_timeout_drops_the_session_and_the_client_recovers(server):
    session = KernelEnvSession(server.url, message_timeout_s=0.5)
    try:
        session.reset("19_ReLU")
        with pytest.raises(EnvTimeoutError, match="no reply .* within 0 s .*message_timeout_s"):
            session.step(HONEST_RELU)  # takes seconds on the interpreter
        # the next call opens a new connection: a fresh session, with no episode
        with pytest.raises(EnvServerError, match="step before reset"):
            session.step(no_code("after timeout"))
        assert session.reset("19_ReLU").turn == 0
    finally:
        session.close()
    wait_until(lambda: fetch_server_info(server.url)["active_sessions"] == 0, 60, "the dropped session to close")


def test_unreachable_server_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once it is closed
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(EnvUnavailableError, match=f"{url}.*kernelflow serve"):
        KernelEnvSession(url, connect_timeout_s=5).reset("19_ReLU")
    with pytest.raises(EnvUnavailableError, match=f"{url}/kernelflow/info.*kernelflow serve"):
        fetch_server_info(url, timeout_s=5)


# ---- wire compatibility with openenv-core 0.3.0 clients -------------------------------------------


def test_openenv_030_frames_carry_every_field(server):
    """Replays the frames an openenv-core 0.3.0 EnvClient sends and reads (it drops `metadata`)."""
    obs_fields = set(KernelObservation.model_fields) - {"reward", "done"}
    verdict_fields = {f.name for f in dataclasses.fields(Verdict)}
    state_fields = set(KernelState.model_fields)

    with connect(ws_url(server), open_timeout=10) as ws:
        reset = ask(ws, {"type": "reset", "data": {"task_id": "19_ReLU", "seed": 4, "shape": "small"}})
        assert reset["type"] == "observation" and set(reset["data"]) >= {"observation", "reward", "done"}
        obs = reset["data"]["observation"]
        assert obs_fields <= set(obs), obs_fields - set(obs)
        assert obs["prompt"] and obs["messages"][1]["role"] == "user" and obs["task_id"] == "19_ReLU"

        replies = [ask(ws, {"type": "step", "data": {"code": code}}) for code in (no_code("wire"), HONEST_RELU)]
        for reply in replies:
            assert reply["type"] == "observation"
            obs = reply["data"]["observation"]
            assert obs_fields <= set(obs), obs_fields - set(obs)
            assert set(obs["verdict"]) == verdict_fields
            for key in ("status", "compiled", "correct", "feedback", "turn", "max_turns", "rewards"):
                assert obs[key] is not None, key
            assert reply["data"]["reward"] == obs["verdict"]["reward"]
        last = replies[-1]["data"]
        assert last["done"] is True and last["reward"] == pytest.approx(0.3)
        assert last["observation"]["returns"] == [pytest.approx(0.12), pytest.approx(0.3)]
        assert last["observation"]["episode_return"] == pytest.approx(0.12)

        state = ask(ws, {"type": "state"})
        assert state["type"] == "state" and state_fields <= set(state["data"])
        assert state["data"]["rewards"] == last["observation"]["rewards"]

        err = ask(ws, {"type": "step", "data": {"code": "x"}})
        assert err["type"] == "error" and set(err["data"]) >= {"message", "code"}

        ws.send(json.dumps({"type": "close"}))
        with pytest.raises(ConnectionClosed):  # the server ends the connection
            ws.recv(timeout=10)


# ---- access, capacity, disconnects ----------------------------------------------------------------


def test_missing_or_wrong_token_is_rejected(guarded, monkeypatch):
    monkeypatch.delenv("KERNELFLOW_ENV_TOKEN", raising=False)
    with pytest.raises(EnvAuthError, match="requires an access token"):
        KernelEnvSession(guarded.url).reset("19_ReLU")
    with pytest.raises(EnvAuthError, match="token presented to this kernelflow environment server is wrong"):
        KernelEnvSession(guarded.url, token="not-the-token-000000").reset("19_ReLU")
    with pytest.raises(EnvAuthError):
        fetch_server_info(guarded.url, token="not-the-token-000000")
    assert fetch_server_info(guarded.url, token=TOKEN)["auth_required"] is True

    monkeypatch.setenv("KERNELFLOW_ENV_TOKEN", TOKEN)  # the client's fallback
    with KernelEnvSession(guarded.url) as session:
        assert session.reset("19_ReLU").task_id == "19_ReLU"
    # a client that can only set a base URL presents the token in the path
    with connect(f"{ws_url(guarded)[:-3]}/token/{TOKEN}/ws", open_timeout=10) as ws:
        assert ask(ws, {"type": "reset", "data": {"task_id": "19_ReLU"}})["type"] == "observation"


def test_capacity_reached_is_a_clear_error(guarded):
    wait_until(lambda: fetch_server_info(guarded.url, token=TOKEN)["active_sessions"] == 0, 30, "an idle server")
    first = KernelEnvSession(guarded.url, token=TOKEN)
    second = KernelEnvSession(guarded.url, token=TOKEN)
    try:
        first.reset("19_ReLU")
        second.reset("20_LeakyReLU")
        with pytest.raises(EnvCapacityError, match=r"at capacity: 2/2 .*max_sessions"):
            KernelEnvSession(guarded.url, token=TOKEN).reset("21_Sigmoid")
        assert second.state().task_id == "20_LeakyReLU"  # the others are unaffected
    finally:
        first.close()
    second_state = second.state()

    def third_fits():
        try:
            with KernelEnvSession(guarded.url, token=TOKEN) as third:
                return third.reset("21_Sigmoid").task_id == "21_Sigmoid"
        except EnvCapacityError:
            return False

    assert wait_until(third_fits, 20, "a freed slot", interval_s=0.5)
    assert second_state.task_id == "20_LeakyReLU"
    second.close()


def test_client_leaving_mid_evaluation_leaks_no_worker(guarded):
    wait_until(lambda: fetch_server_info(guarded.url, token=TOKEN)["active_sessions"] == 0, 30, "an idle server")
    baseline = set(descendants(guarded.pid))
    ws = connect(ws_url(guarded), additional_headers={"Authorization": f"Bearer {TOKEN}"}, open_timeout=10)
    assert ask(ws, {"type": "reset", "data": {"task_id": "19_ReLU"}})["type"] == "observation"
    ws.send(json.dumps({"type": "step", "data": {"code": HONEST_RELU}}))
    workers = wait_until(lambda: set(descendants(guarded.pid)) - baseline, 30, "an evaluation worker")
    # drop the connection without a close handshake, as a crashed trainer would
    ws.socket.shutdown(socket.SHUT_RDWR)
    ws.socket.close()

    def released():
        info = fetch_server_info(guarded.url, token=TOKEN)
        running = [p for p in workers if os.path.exists(f"/proc/{p}")] if info["active_sessions"] == 0 else True
        return info["active_sessions"] == 0 and not running and set(descendants(guarded.pid)) <= baseline

    wait_until(released, EVAL.timeout_s + 30, "the session and its worker to be released", interval_s=0.5)
    assert guarded.alive()
    with KernelEnvSession(guarded.url, token=TOKEN) as session:  # the slot came back
        session.reset("19_ReLU")
        assert session.step(no_code("after disconnect")).status == "no_code"
    assert "Traceback" not in guarded.log_tail(400)


# ---- the example client ---------------------------------------------------------------------------

SMOKE = Path(__file__).resolve().parents[2] / "examples" / "client_smoke.py"


def test_client_smoke_example_passes_against_a_live_server(server, tmp_path):
    result = subprocess.run(
        [sys.executable, str(SMOKE), "--url", server.url, "--shape", "small", "--min-reward", "0.3",
         "--out", str(tmp_path / "out")],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "client_smoke: PASS" in result.stdout
    assert "class Model" in (tmp_path / "out" / "task_prompt.txt").read_text()
    assert not (tmp_path / "task_prompt.txt").exists()  # never the current directory


def test_client_smoke_example_reports_an_unreachable_server(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SMOKE), "--url", "http://127.0.0.1:9"], cwd=tmp_path, capture_output=True, text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "cannot reach" in result.stderr


# ---- the served defaults (issue #19) ----------------------------------------------------------------


def test_a_served_verdict_takes_a_prewarmed_worker_and_stop_leaves_no_worker(tmp_path):
    """With the served defaults (prewarm_workers "auto"), the server sizes a warm pool at start, a verdict
    takes a worker from it (Evaluator.stats through /kernelflow/info), and stopping the server leaves no
    worker behind. Only the judging settings are cut down (one seed, one timed run); the speed ones are
    the defaults."""
    config = EnvServerConfig(eval=EvalConfig.served(backend="interpret", shape="small", seeds=1, timed_runs=1,
                                                    timeout_s=120))
    assert config.eval.prewarm_workers == "auto"
    server = start_local_server(config, log_path=tmp_path / "server.log", startup_timeout_s=120)
    pid = server.pid
    try:
        info = fetch_server_info(server.url)
        assert info["prewarm_workers_setting"] == "auto"
        assert info["prewarm_workers"] >= 1, f"auto sized no pool on this host: {info}"
        pool = wait_until(lambda: (p := fetch_server_info(server.url)["evaluator_stats"]["pool"])["warm"] >= p["size"]
                          and p, 120, "a warm pool")
        assert pool["size"] == info["prewarm_workers"]
        with KernelEnvSession(server.url) as session:
            session.reset("19_ReLU", seed=5)
            obs = session.step(HONEST_RELU)
        assert obs.status == "ok", obs.feedback
        stats = fetch_server_info(server.url)["evaluator_stats"]
        assert (stats["sessions"], stats["prewarmed_sessions"]) == (1, 1) and stats["judge_warm"]
        assert stats["pool"]["handed_out"] == 1
        workers = descendants(pid)
        assert workers, "the pool's workers run under the server"
    finally:
        code = server.stop()
    assert code is not None and not server.alive()
    # The workers have their own sessions (outside the server's process group), so check them by PID:
    # closing the evaluator on shutdown must have killed every one.
    deadline = time.monotonic() + 10
    while (still := [p for p in workers if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert still == [], f"workers {still} outlived the server"

