"""scripts/wheelhouse_check.py: sdist fallback (mocked pip), pip's resolver check (real pip, offline,
on tiny wheels built in tmp_path), UI stripping of a synthetic wheel.

Hermetic: the fetch tests replace pip with a fake runner; the resolver tests run the real pip with
--no-index over local folders only.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("wheelhouse_check", ROOT / "scripts" / "wheelhouse_check.py")
wc = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = wc
_spec.loader.exec_module(wc)


def make_wheel(folder: Path, name: str, version: str, requires=(), files=None, tag="py3-none-any") -> Path:
    """A tiny wheel with METADATA (and Requires-Dist), WHEEL, the given files and a full RECORD."""
    dist = f"{name.replace('-', '_')}-{version}"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    extras = sorted({r.split("extra == '")[1][:-1] for r in requires if "extra ==" in r})
    meta += "".join(f"Provides-Extra: {e}\n" for e in extras)
    entries = {**(files or {}), f"{dist}.dist-info/METADATA": meta,
               f"{dist}.dist-info/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tag}\n"}
    path = folder / f"{dist}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arc, text in entries.items():
            zf.writestr(arc, text)
        zf.writestr(f"{dist}.dist-info/RECORD", "".join(f"{a},sha256=x,1\n" for a in entries) + f"{dist}.dist-info/RECORD,,\n")
    return path


class FakePip:
    """Stands in for subprocess.run: `wheels` have a wheel on the index, `sdists` only an sdist whose
    build gives a wheel with the given tag."""

    def __init__(self, wheels, sdists):
        self.wheels, self.sdists, self.calls = set(wheels), dict(sdists), []

    def __call__(self, cmd, **kw):
        self.calls.append(cmd)
        args = cmd[3:]
        spec = args[-1]
        d = Path(args[args.index("-d") + 1]) if "-d" in args else Path(args[args.index("-w") + 1])
        name = Path(spec).name.rsplit("-1.0", 1)[0] if args[0] == "wheel" else spec.split("==")[0]
        d.mkdir(parents=True, exist_ok=True)
        if args[0] == "download" and "--only-binary=:all:" in args:
            names = [a.split("==")[0] for a in args if "==" in a]
            if len(names) > 1:  # the first, batch call: it fails if one package has no wheel
                if not set(names) <= self.wheels:
                    return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found")
                for n in names:
                    (d / f"{n}-1.0-py3-none-any.whl").write_bytes(b"w")
                return subprocess.CompletedProcess(cmd, 0, "", "")
            if name not in self.wheels:
                return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found")
            (d / f"{name.replace('-', '_')}-1.0-py3-none-any.whl").write_bytes(b"w")
        elif args[0] == "download":
            if name not in self.sdists:
                return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found")
            (d / f"{name}-1.0.tar.gz").write_bytes(b"s")
        else:
            (d / f"{name.replace('-', '_')}-1.0-{self.sdists[name]}.whl").write_bytes(b"b")
        return subprocess.CompletedProcess(cmd, 0, "", "")


def test_fetch_builds_a_pure_python_sdist_into_a_wheel(tmp_path):
    pip = FakePip(wheels={"pyyaml"}, sdists={"antlr4-python3-runtime": "py3-none-any"})
    built = wc.fetch({"pyyaml": "6.0", "antlr4-python3-runtime": "4.9.3"}, tmp_path, "3.12", ["manylinux2014_x86_64"], pip)
    assert built == ["antlr4-python3-runtime"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["antlr4_python3_runtime-1.0-py3-none-any.whl",
                                                          "pyyaml-1.0-py3-none-any.whl"]
    assert len(pip.calls) == 5  # the batch, then per package: pyyaml's wheel, antlr4's wheel, sdist, build
    wheel_cmd = [c for c in pip.calls if c[3] == "wheel"][0]
    assert "--no-deps" in wheel_cmd


def test_fetch_takes_one_pip_call_when_every_package_has_a_wheel(tmp_path):
    pip = FakePip(wheels={"pyyaml", "rich"}, sdists={})
    assert wc.fetch({"pyyaml": "6.0", "rich": "14"}, tmp_path, "3.12", ["manylinux2014_x86_64"], pip) == []
    assert len(pip.calls) == 1 and pip.calls[0][-2:] == ["pyyaml==6.0", "rich==14"]


def test_fetch_refuses_an_sdist_that_builds_a_platform_wheel(tmp_path):
    pip = FakePip(wheels=set(), sdists={"fastthing": "cp311-cp311-linux_x86_64"})
    with pytest.raises(wc.BundleError, match="fastthing==2.0: has no wheel for manylinux2014_x86_64.*needs a compiler"):
        wc.fetch({"fastthing": "2.0"}, tmp_path, "3.12", ["manylinux2014_x86_64"], pip)
    assert list(tmp_path.iterdir()) == []


def test_fetch_names_a_package_with_neither_wheel_nor_sdist(tmp_path):
    with pytest.raises(wc.BundleError, match="ghost==1.0: no wheel .* and no sdist"):
        wc.fetch({"ghost": "1.0"}, tmp_path, "3.12", ["manylinux2014_x86_64"], FakePip(set(), {}))


PLAT = ["manylinux2014_x86_64"]


def small_bundle(tmp_path, extra_wheels=()):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    # kernelflow[env] -> app>=1, base>=2; app -> base>=2, util; the host has base and util
    make_wheel(bundle, "kernelflow", "0.1.0", ["app>=1; extra == 'env'", "base>=2"])
    make_wheel(bundle, "app", "1.0", ["base>=2", "util"])
    for args in extra_wheels:
        make_wheel(bundle, *args)
    return bundle


def test_resolver_check_resolves_over_host_standins(tmp_path):
    result = wc.resolver_check(small_bundle(tmp_path), {"base": "2.1", "util": "0.3", "other": "9"},
                               "kernelflow[env]", "3.12", PLAT, planned=set())
    assert result.picks == {"kernelflow": ("0.1.0", "bundle"), "app": ("1.0", "bundle"),
                            "base": ("2.1", "host"), "util": ("0.3", "host")}
    assert result.replacements == ()


def test_resolver_check_reports_a_host_package_it_would_replace(tmp_path):
    # the bundle carries base 3.0 although the plan left base to the host: pip picks it over 2.1
    bundle = small_bundle(tmp_path, [("base", "3.0")])
    result = wc.resolver_check(bundle, {"base": "2.1", "util": "0.3"}, "kernelflow[env]", "3.12", PLAT, planned=set())
    (conflict,) = result.conflicts
    assert (conflict.name, conflict.host_version, conflict.bundled_version) == ("base", "2.1", "3.0")
    assert set(conflict.required_by) == {"kernelflow: base>=2", "app: base>=2"}
    assert "CONFLICT: would replace host base 2.1 with 3.0" in "\n".join(wc.format_check(result))
    # the same pick, meant by the plan, is a replacement and no conflict
    planned = wc.resolver_check(bundle, {"base": "2.1", "util": "0.3"}, "kernelflow[env]", "3.12", PLAT, planned={"base"})
    assert planned.conflicts == () and planned.replacements[0].planned


def test_resolver_check_counts_packages_left_out_on_purpose_and_says_to_use_no_deps(tmp_path):
    bundle = small_bundle(tmp_path)
    (bundle / "app-1.0-py3-none-any.whl").unlink()  # else pip backtracks to app 1.0, which needs no gradio
    make_wheel(bundle, "app", "2.0", ["base>=2", "util", "gradio>=4"])
    host = {"base": "2.1", "util": "0.3"}
    with pytest.raises(wc.BundleError, match="gradio"):
        wc.resolver_check(bundle, host, "kernelflow[env]", "3.12", PLAT, set())
    result = wc.resolver_check(bundle, host, "kernelflow[env]", "3.12", PLAT, set(), left_out={"gradio": "6.31.0"})
    assert result.picks["gradio"] == ("6.31.0", "left-out") and result.conflicts == ()
    assert "required but left out on purpose: gradio; install the bundle on the host with `pip install --no-index --no-deps" \
        in "\n".join(wc.format_check(result))


def test_resolver_check_fails_with_the_package_when_the_host_version_is_unusable(tmp_path):
    with pytest.raises(wc.BundleError, match=r"(?s)pip cannot install kernelflow\[env\].*base"):
        wc.resolver_check(small_bundle(tmp_path), {"base": "1.5", "util": "0.3"}, "kernelflow[env]", "3.12", PLAT, set())


def test_strip_wheel_drops_ui_files_and_their_record_lines(tmp_path):
    ui = {f"prefect/server/ui/assets/{i}.js": "x" * 5000 for i in range(3)}
    wheel = make_wheel(tmp_path, "prefect", "3.4.0", files={"prefect/__init__.py": "", "prefect/server/api.py": "", **ui})
    lines = wc.strip_ui(tmp_path)
    assert len(lines) == 1 and "stripped 3 UI files from prefect-3.4.0-py3-none-any.whl" in lines[0]
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        record = zf.read("prefect-3.4.0.dist-info/RECORD").decode()
    assert not any(n.startswith("prefect/server/ui/") for n in names)
    assert {"prefect/__init__.py", "prefect/server/api.py"} <= names
    assert {ln.split(",")[0] for ln in record.splitlines()} == names  # every file kept, none dropped, RECORD itself


def test_strip_ui_leaves_other_wheels_alone(tmp_path):
    wheel = make_wheel(tmp_path, "other", "1.0", files={"other/server/ui/x.js": "x"})
    before = wheel.read_bytes()
    assert wc.strip_ui(tmp_path) == []
    assert wheel.read_bytes() == before
