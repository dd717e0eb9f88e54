"""EnvServerConfig: defaults, validation with clear messages, JSON round trip, the token's handling."""

import json

import pytest

from kernelflow.env.config import EnvServerConfig
from kernelflow.eval import EvalConfig

TOKEN = "t" * 32


def test_defaults_match_the_pilot():
    c = EnvServerConfig()
    assert (c.max_turns, c.gamma, c.stop_on_correct, c.max_sessions, c.max_code_chars) == (2, 0.4, False, 16, 100_000)
    assert c.token is None and c.session_timeout_s == 3600 and isinstance(c.eval, EvalConfig)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_turns": 0}, "max_turns=0"),
        ({"gamma": 1.5}, "gamma=1.5"),
        ({"max_sessions": 0}, "max_sessions=0"),
        ({"max_code_chars": -1}, "max_code_chars=-1"),
        ({"token": "short"}, "at least 16 characters"),
        ({"session_timeout_s": 0}, "session_timeout_s=0"),
        ({"stop_on_correct": "yes"}, "stop_on_correct='yes'"),
    ],
)
def test_invalid_values_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EnvServerConfig(**kwargs)


def test_json_round_trip_without_the_token(tmp_path):
    c = EnvServerConfig(eval=EvalConfig(backend="interpret", max_workers=3), max_turns=3, token=TOKEN)
    assert TOKEN not in repr(c)
    data = c.to_dict()
    assert "token" not in data and data["eval"]["backend"] == "interpret"
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    back = EnvServerConfig.from_json_file(path)
    assert back.eval == c.eval and back.max_turns == 3 and back.token is None
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['max_turn'\] for EnvServerConfig"):
        EnvServerConfig.from_dict({"max_turn": 3})
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        EnvServerConfig.from_json_file(path)


def test_token_from_the_environment(monkeypatch):
    monkeypatch.setenv("KERNELFLOW_ENV_TOKEN", TOKEN)
    assert EnvServerConfig().with_env_token().token == TOKEN
    own = "o" * 20
    assert EnvServerConfig(token=own).with_env_token().token == own


def test_worst_case_step_bound():
    c = EnvServerConfig(eval=EvalConfig(max_workers=4, timeout_s=100), max_sessions=16)
    assert c.worst_case_step_s() == 400
