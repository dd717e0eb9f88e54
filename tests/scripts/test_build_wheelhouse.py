"""scripts/build_wheelhouse.py: the host-freeze plan (pure, on synthetic hosts), the closure walk, the CLI's dry run.

No test downloads anything: the CLI tests replace the closure and forbid subprocess calls.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("kernelflow_build_wheelhouse", ROOT / "scripts" / "build_wheelhouse.py")
bw = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bw  # dataclasses look their module up by name
_spec.loader.exec_module(bw)


def make_closure(versions, needs, requirer_versions=None):
    return bw.Closure(
        versions=dict(versions),
        needs={n: tuple(v) for n, v in needs.items()},
        requirer_versions={"kernelflow": "0.1.0", **dict(versions), **(requirer_versions or {})},
    )


# kernelflow -> filelock>=4.3, openenv; openenv -> huggingface-hub>=1.29, pydantic; pydantic -> typing-extensions>=4.14
SMALL = make_closure(
    {"filelock": "4.3.1", "openenv": "0.10.0", "huggingface-hub": "2.4.0", "pydantic": "2.14.4", "typing-extensions": "4.16.0"},
    {
        "filelock": [("kernelflow", ">=4.3")],
        "openenv": [("kernelflow", ">=0.10,<0.11")],
        "huggingface-hub": [("openenv", ">=1.29")],
        "pydantic": [("openenv", "")],
        "typing-extensions": [("pydantic", ">=4.14")],
        "torch": [("kernelflow", ">=2.11")],
    },
)


def test_plan_leaves_acceptable_host_versions_bundles_missing_and_conflicting():
    host = {"filelock": "3.32.5", "huggingface-hub": "1.33.0", "typing-extensions": "4.16.0", "torch": "2.11.0"}
    plan = bw.plan_bundle(SMALL, host)
    assert plan.bundle == {"filelock": "4.3.1", "openenv": "0.10.0", "pydantic": "2.14.4"}
    assert plan.missing == ("openenv", "pydantic")
    assert plan.conflicts == (bw.Conflict("filelock", "3.32.5", (("kernelflow", ">=4.3"),), "4.3.1"),)
    assert plan.host_has == {"huggingface-hub": "1.33.0", "typing-extensions": "4.16.0"}
    assert plan.unchecked == () and plan.host_provided == ()


def test_specifier_of_a_bundled_requirer_counts_and_the_plan_reaches_a_fixed_point():
    # The host has openenv at a version kernelflow refuses: openenv gets bundled, so its own
    # huggingface-hub>=1.29 now counts and the host's 1.20 must be replaced too.
    host = {"openenv": "0.9.0", "huggingface-hub": "1.20.0", "filelock": "4.3.1", "pydantic": "2.14.4",
            "typing-extensions": "4.16.0"}
    plan = bw.plan_bundle(SMALL, host)
    assert [c.name for c in plan.conflicts] == ["huggingface-hub", "openenv"]
    hub = plan.conflicts[0]
    assert (hub.host_version, hub.required, hub.bundled_version) == ("1.20.0", (("openenv", ">=1.29"),), "2.4.0")
    assert plan.missing == ()
    assert set(plan.host_has) == {"filelock", "pydantic", "typing-extensions"}


def test_host_requirer_at_the_same_version_checks_its_dependencies():
    host = {"openenv": "0.10.0", "huggingface-hub": "1.20.0", "filelock": "4.3.1", "pydantic": "2.14.4",
            "typing-extensions": "4.13.0"}
    plan = bw.plan_bundle(SMALL, host)
    # openenv 0.10.0 on the host is the one installed here: its hub>=1.29 is read, not guessed
    assert {c.name: c.host_version for c in plan.conflicts} == {"huggingface-hub": "1.20.0", "typing-extensions": "4.13.0"}
    assert "openenv" in plan.host_has


def test_requirer_at_another_version_on_the_host_is_reported_not_checked():
    # transformers 5.24 here wants huggingface-hub>=2; the host's transformers 5.17 is what runs there,
    # and its requirements are unknown offline: the host's hub stays, and the plan says so.
    closure = make_closure(
        {"transformers": "5.24.0", "huggingface-hub": "2.4.0"},
        {"transformers": [("kernelflow", ">=5.2")], "huggingface-hub": [("transformers", ">=2,<3")]},
    )
    plan = bw.plan_bundle(closure, {"transformers": "5.17.0", "huggingface-hub": "1.33.0"})
    assert plan.bundle == {}
    assert plan.host_has == {"transformers": "5.17.0", "huggingface-hub": "1.33.0"}
    assert plan.unchecked == (("transformers", "huggingface-hub", ">=2,<3", "1.33.0"),)
    # the same transformers as here: its metadata applies and the hub is replaced
    plan = bw.plan_bundle(closure, {"transformers": "5.24.0", "huggingface-hub": "1.33.0"})
    assert plan.bundle == {"huggingface-hub": "2.4.0"} and plan.unchecked == ()


def test_unknown_host_version_passes_only_an_empty_specifier():
    closure = make_closure({"a": "1.0", "b": "2.0"}, {"a": [("kernelflow", ">=1")], "b": [("kernelflow", "")]})
    plan = bw.plan_bundle(closure, {"a": None, "b": None})
    assert plan.bundle == {"a": "1.0"}
    assert plan.conflicts[0].host_version is None
    assert plan.host_has == {"b": None}


def test_too_old_torch_on_the_host_is_a_warning_and_never_bundled():
    plan = bw.plan_bundle(SMALL, {"torch": "2.10.0"})
    assert "torch" not in plan.bundle
    assert plan.host_provided == (bw.Conflict("torch", "2.10.0", (("kernelflow", ">=2.11"),), None),)
    text = "\n".join(bw.format_plan(plan, SMALL.versions))
    assert "WARNING: host's torch 2.10.0 fails >=2.11 (kernelflow)" in text


def test_parse_freeze_keeps_pins_and_urls_and_sets_aside_other_lines():
    text = "\n".join([
        "# comment", "", "Jinja2==3.1.6", "typing_extensions==4.16.0", "mypkg @ file:///tmp/mypkg-1.0.whl",
        "-e git+https://example.invalid/x.git#egg=x", "Python 3.12.3", "NVIDIA H200, 580.159.04", "loose>=1",
    ])
    host, ignored = bw.parse_freeze(text)
    assert host == {"jinja2": "3.1.6", "typing-extensions": "4.16.0", "mypkg": None}
    assert ignored == ["-e git+https://example.invalid/x.git#egg=x", "Python 3.12.3", "NVIDIA H200, 580.159.04", "loose>=1"]


def test_h200_freeze_in_the_repo_is_a_clean_pip_freeze():
    host, ignored = bw.parse_freeze((ROOT / "scripts" / "hosts" / "h200_pip_freeze.txt").read_text())
    assert ignored == []
    assert len(host) == 196
    assert (host["filelock"], host["huggingface-hub"], host["torch"]) == ("3.32.5", "1.33.0", "2.11.0")


def test_project_requires_come_from_pyproject_with_extra_markers(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "kernelflow"\nversion = "9.9"\ndependencies = ["numpy>=1.26"]\n'
        '[project.optional-dependencies]\neval = ["pyseccomp>=0.1.2", "old; python_version < \'3.12\'"]\n'
    )
    version, reqs = bw.project_requires(tmp_path / "pyproject.toml")
    assert version == "9.9"
    from packaging.requirements import Requirement

    parsed = {Requirement(r).name: Requirement(r) for r in reqs}
    assert parsed["numpy"].marker is None
    assert parsed["pyseccomp"].marker.evaluate({"extra": "eval"})
    assert not parsed["pyseccomp"].marker.evaluate({"extra": "env"})
    assert parsed["old"].marker.evaluate({"extra": "eval", "python_version": "3.11"})
    assert not parsed["old"].marker.evaluate({"extra": "eval", "python_version": "3.12"})


def test_closure_follows_extras_named_later_and_markers_of_the_target_python(monkeypatch):
    dists = {
        "a": ("1.0", ["b"]),
        "b": ("2.0", ["c; extra == 'x'"]),
        "c": ("3.0", []),
        "old": ("0.1", []),
    }
    monkeypatch.setattr(bw, "project_requires", lambda: ("0.1.0", [
        # b[x] comes first, so it is popped after a has reached plain b: its extra must still be expanded
        "b[x]>=2; extra == 'env'", "a>=1", "torch>=2.11", "old; python_version < '3.12'", "gradio>=4; extra == 'env'",
    ]))
    monkeypatch.setattr(bw.metadata, "distribution", lambda name: SimpleNamespace(
        version=dists[name][0], requires=dists[name][1]))
    found = bw.closure("env", set(), "3.12")
    assert found.versions == {"a": "1.0", "b": "2.0", "c": "3.0"}  # c only through b[x]; torch, gradio, old left out
    assert found.needs["b"] == (("a", ""), ("kernelflow", ">=2"))
    assert found.needs["torch"] == (("kernelflow", ">=2.11"),)
    assert "old" in bw.closure("env", set(), "3.11").versions
    assert "a" not in bw.closure("env", {"a"}, "3.12").versions


def test_dry_run_with_host_freeze_prints_the_plan_and_runs_nothing(monkeypatch, tmp_path, capsys):
    freeze = tmp_path / "host.txt"
    freeze.write_text("filelock==3.32.5\nhuggingface_hub==1.33.0\ntyping_extensions==4.16.0\nPython 3.12.3\n")
    monkeypatch.setattr(bw, "closure", lambda extra, skip, python_version: SMALL)
    monkeypatch.setattr(bw.subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a}"))
    monkeypatch.setattr(sys, "argv", ["build_wheelhouse.py", "--host-freeze", str(freeze), "--dry-run"])
    assert bw.main() == 0
    out = capsys.readouterr().out
    assert "host " + str(freeze) + ": 3 packages (1 other lines ignored)" in out
    assert "left out, the host has them (2):\n  huggingface-hub==1.33.0\n  typing-extensions==4.16.0\n" in out
    assert "bundled, the host lacks them (2):\n  openenv==0.10.0\n  pydantic==2.14.4\n" in out
    assert "  filelock: host 3.32.5, required >=4.3 (kernelflow) -> bundling 4.3.1" in out
    assert "3 packages to bundle, 2 left to the host" in out


def test_dry_run_without_host_freeze_lists_the_whole_closure(monkeypatch, capsys):
    monkeypatch.setattr(bw, "closure", lambda extra, skip, python_version: SMALL)
    monkeypatch.setattr(bw.subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a}"))
    monkeypatch.setattr(sys, "argv", ["build_wheelhouse.py", "--dry-run"])
    assert bw.main() == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1:] == [f"  {n}=={v}" for n, v in sorted(SMALL.versions.items())]


def test_size_report_counts_only_this_plans_wheels(tmp_path):
    (tmp_path / "filelock-4.3.1-py3-none-any.whl").write_bytes(b"x" * 2**20)
    (tmp_path / "typing_extensions-4.16.0-py3-none-any.whl").write_bytes(b"x" * 3 * 2**20)
    (tmp_path / "stale-1.0-py3-none-any.whl").write_bytes(b"x" * 5 * 2**20)
    lines = bw.size_report(tmp_path, {"filelock", "typing-extensions"})
    assert lines[0] == f"wheelhouse {tmp_path}: 2 wheels, 4.0 MiB; largest:"
    assert lines[1].endswith("typing_extensions-4.16.0-py3-none-any.whl") and "3.0 MiB" in lines[1]
    assert lines[-1] == f"  (1 other wheels in {tmp_path} are not part of this plan)"


def _fake_build(monkeypatch, tmp_path, conflicts=()):
    """main() without the network: fetch writes one wheel per package, the kernelflow build one more."""
    def fetch(wanted, stage, python_version, platforms):
        for name, version in wanted.items():
            (stage / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"w" * 1000)
        return ["pydantic"]

    def run(cmd, check=False, **kw):
        if "-c" in cmd:  # --check-python's version
            return subprocess.CompletedProcess(cmd, 0, "3.11\n" if "py311" in cmd[0] else "3.12\n", "")
        Path(cmd[cmd.index("-w") + 1], "kernelflow-0.1.0-py3-none-any.whl").write_bytes(b"k")

    seen = {}

    def check(stage, host, requirement, python_version, platforms, planned, left_out, python):
        seen.update(requirement=requirement, planned=planned, left_out=left_out,
                    wheels=sorted(p.name for p in stage.glob("*.whl")))
        return bw.wheels.CheckResult({}, tuple(conflicts))

    monkeypatch.setattr(bw, "closure", lambda extra, skip, python_version: SMALL)
    monkeypatch.setattr(bw.wheels, "fetch", fetch)
    monkeypatch.setattr(bw.wheels, "resolver_check", check)
    monkeypatch.setattr(bw.subprocess, "run", run)
    freeze = tmp_path / "host.txt"
    freeze.write_text("filelock==3.32.5\nhuggingface_hub==1.33.0\ntyping_extensions==4.16.0\n")
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["build_wheelhouse.py", "--host-freeze", str(freeze), "--out", str(out),
                                      "--check-python", "py312"])
    return out, seen


def test_build_refuses_a_check_python_of_another_version_before_downloading(monkeypatch, tmp_path):
    out, seen = _fake_build(monkeypatch, tmp_path)
    monkeypatch.setattr(sys, "argv", [*sys.argv[:-1], "/usr/bin/py311"])
    monkeypatch.setattr(bw.wheels, "fetch", lambda *a: pytest.fail("downloaded"))
    with pytest.raises(bw.wheels.BundleError, match="Python 3.11 .* host's is 3.12: pass --check-python"):
        bw.main()


def test_build_checks_the_staged_bundle_then_writes_it(monkeypatch, tmp_path, capsys):
    out, seen = _fake_build(monkeypatch, tmp_path)
    assert bw.main() == 0
    assert seen["requirement"] == "kernelflow[env]" and seen["planned"] == {"filelock"}
    assert set(seen["left_out"]) <= bw.OPTIONAL_HEAVY

    assert "kernelflow-0.1.0-py3-none-any.whl" in seen["wheels"]  # the check sees the project's own wheel
    assert sorted(p.name for p in out.iterdir()) == seen["wheels"]
    assert "built from sdists (pure Python): pydantic" in capsys.readouterr().out


def test_build_writes_nothing_when_the_resolver_check_finds_a_conflict(monkeypatch, tmp_path):
    bad = bw.wheels.Replacement("typing-extensions", "4.16.0", "4.17.0", ("pydantic: typing-extensions>=4.14",), False)
    out, _ = _fake_build(monkeypatch, tmp_path, [bad])
    with pytest.raises(bw.wheels.BundleError, match="would replace host packages the plan did not mean to: typing-extensions"):
        bw.main()
    assert list(out.iterdir()) == []
    assert [p.name for p in tmp_path.iterdir()] != [] and not list(tmp_path.glob("wheelhouse-*"))  # stage removed


def test_build_with_strip_ui_reports_the_size_before_and_after(monkeypatch, tmp_path, capsys):
    out, _ = _fake_build(monkeypatch, tmp_path)
    monkeypatch.setattr(sys, "argv", [*sys.argv, "--strip-ui"])
    monkeypatch.setattr(bw.wheels, "strip_ui", lambda stage: ["  stripped 3 UI files from x.whl"])
    assert bw.main() == 0
    text = capsys.readouterr().out
    assert "  stripped 3 UI files from x.whl\n--strip-ui: bundle 0.0 -> 0.0 MiB" in text


def test_skipped_packages_get_resolver_standins_like_gradio(monkeypatch, tmp_path):
    out, seen = _fake_build(monkeypatch, tmp_path)
    monkeypatch.setattr(sys, "argv", [*sys.argv, "--skip", "Typing_Extensions"])
    monkeypatch.setattr(bw, "installed", lambda names: {n: "1.0" for n in sorted(names)})
    assert bw.main() == 0
    assert "typing-extensions" in seen["left_out"] and "gradio" in seen["left_out"]
