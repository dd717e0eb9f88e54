"""examples/client_smoke.py without a server: its main() with the client calls replaced by fakes.

Covers where the prompt is written (the --out directory, else a fresh temporary one, never the current
directory) and that the path is printed. The example against a live server is in test_server.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

SMOKE = Path(__file__).resolve().parents[2] / "examples" / "client_smoke.py"


@pytest.fixture
def smoke(monkeypatch):
    spec = importlib.util.spec_from_file_location("client_smoke_example", SMOKE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class FakeSession:
        def __init__(self, url, **kw):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def reset(self, task_id, **kw):
            return SimpleNamespace(prompt=f"[user]\nclass Model for {task_id}")

        def step(self, answer):
            return SimpleNamespace(verdict={"status": "ok"}, correct=True, status="ok", reward=0.3, feedback="")

    monkeypatch.setattr(module, "fetch_server_info", lambda url, token=None: {"backend": "interpret"})
    monkeypatch.setattr(module, "KernelEnvSession", FakeSession)
    return module


def test_prompt_goes_to_the_out_directory_and_its_path_is_printed(smoke, tmp_path, monkeypatch, capsys):
    cwd, out = tmp_path / "cwd", tmp_path / "new" / "out"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert smoke.main(["--out", str(out)]) == 0
    assert (out / "task_prompt.txt").read_text() == "[user]\nclass Model for 19_ReLU"
    assert f"written to {out / 'task_prompt.txt'}" in capsys.readouterr().out
    assert list(cwd.iterdir()) == []


def test_without_out_the_prompt_goes_to_a_fresh_temporary_directory(smoke, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    assert smoke.main([]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("prompt:"))
    written = Path(line.rsplit(" written to ", 1)[1])
    assert written.name == "task_prompt.txt" and written.read_text().startswith("[user]")
    assert written.parent.parent == tmp_path / "tmp" and written.parent.name.startswith("kernelflow_client_smoke_")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]  # nothing in the current directory
