"""The steps of scripts/build_wheelhouse.py that touch wheels: fetch (wheels, or sdists built into
pure-Python wheels), pip's resolver check of a staged bundle against a host's set, UI stripping.

- `fetch` downloads each package with `pip download --no-deps --only-binary=:all:` for the target
  Python and platform. A package with no such wheel (e.g. antlr4-python3-runtime 4.9.3, Hydra's) is
  downloaded as an sdist and built here with `pip wheel --no-deps` (build isolation on: the build
  happens here, online, and only the finished wheel travels, so the host never builds anything). The
  built wheel must be `none-any` (pure Python); anything else would need a compiler for the target
  platform, and fetch refuses it with the package's name (a wheel built here is for this machine's
  Python and platform, not the host's).
- `resolver_check` proves that `pip install --no-index` of `kernelflow[extra]` resolves from the
  bundle on top of the host's set: each host package becomes an empty stand-in wheel (name and
  version only; the host's own dependencies are already satisfied there), then pip's resolver runs
  offline with `--dry-run --report`. Every pick must be a stand-in or a bundled wheel; a bundled wheel
  that replaces a host package is a conflict unless the plan meant it (its `Plan.conflicts`), and it
  is reported with both versions and its requirers. Not covered: the stand-ins carry no requirements,
  so a replacement is not checked against what the host's own packages (e.g. its torch) need of it;
  pip evaluates environment markers for the Python it runs in, not for `--python-version`, so the check
  runs under a Python of the host's version (build_wheelhouse's `--check-python`).
- `strip_wheel` rewrites a wheel without files under given prefixes (Prefect's and MLflow's UI
  builds) and drops their lines from RECORD; the wheel keeps its name, so pip installs it as usual.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

Runner = Callable[..., subprocess.CompletedProcess]
# UI static files that nothing in kernelflow serves (the flows use the APIs, not the web UIs).
UI_PREFIXES = {
    # ui/ and ui-v2/ are the two UIs in the prefect 3.x wheel; *_build/ are copies made at server start
    "prefect": ("prefect/server/ui/", "prefect/server/ui-v2/", "prefect/server/ui_build/", "prefect/server/ui_v2_build/"),
    "mlflow": ("mlflow/server/js/build/",),
}


class BundleError(SystemExit):
    """A bundle that cannot be made as asked; the message says which package and what to do."""


def _pip(*args: str, python: str = sys.executable) -> list[str]:
    return [python, "-m", "pip", *args]


def wheel_name(path: Path) -> str:
    return canonicalize_name(parse_wheel_filename(path.name)[0])


def fetch(wanted: dict[str, str], out: Path, python_version: str, platforms: list[str],
          run: Runner = subprocess.run) -> list[str]:
    """Download `wanted` (name -> version) into `out`; build sdist-only pure-Python packages into
    wheels. Returns the names that were built from sdists. Raises BundleError for a package that
    has neither a wheel nor a pure-Python sdist."""
    target = ["--python-version", python_version, "--implementation", "cp"]
    for p in platforms:
        target += ["--platform", p]
    built: list[str] = []
    specs = [f"{n}=={v}" for n, v in sorted(wanted.items())]
    # One pip call for the common case; only when it fails, one call per package to find the sdist-only
    # ones (pip keeps files already in `out`, so the wheels of the first call are not fetched twice).
    if not specs or run(_pip("download", "--no-deps", "--only-binary=:all:", "-d", str(out), *target, *specs),
                        capture_output=True, text=True).returncode == 0:
        return built
    for name, version in sorted(wanted.items()):
        spec = f"{name}=={version}"
        got = run(_pip("download", "--no-deps", "--only-binary=:all:", "-d", str(out), *target, spec),
                  capture_output=True, text=True)
        if got.returncode == 0:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            sdist_dir, wheel_dir = Path(tmp, "sdist"), Path(tmp, "wheel")
            got = run(_pip("download", "--no-deps", "--no-binary=:all:", "-d", str(sdist_dir), spec),
                      capture_output=True, text=True)
            sdists = sorted(sdist_dir.glob("*")) if got.returncode == 0 else []
            if not sdists:
                raise BundleError(f"{spec}: no wheel for Python {python_version} on {platforms[0]} and no sdist "
                                  f"on the index:\n{got.stderr[-2000:]}\nPick another version or --skip {name}.")
            got = run(_pip("wheel", "--no-deps", "-w", str(wheel_dir), str(sdists[0])), capture_output=True, text=True)
            wheels = sorted(wheel_dir.glob("*.whl")) if got.returncode == 0 else []
            if not wheels:
                raise BundleError(f"{spec}: has no wheel, and building its sdist failed:\n{got.stderr[-2000:]}")
            tags = parse_wheel_filename(wheels[0].name)[3]
            if any(t.abi != "none" or t.platform != "any" for t in tags):
                raise BundleError(f"{spec}: has no wheel for {platforms[0]}, and its sdist builds a platform wheel "
                                  f"({wheels[0].name}): it needs a compiler for the host's platform. Build it on a "
                                  f"machine like the host (same Python and glibc) and add it to the bundle, or --skip {name}.")
            wheels[0].replace(out / wheels[0].name)
            built.append(name)
    return built


def make_standin(name: str, version: str, folder: Path) -> Path:
    """An empty py3-none-any wheel that only declares name and version (a host package for the resolver)."""
    dist = f"{canonicalize_name(name).replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    files = {
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": ("Wheel-Version: 1.0\nGenerator: kernelflow-standin\nRoot-Is-Purelib: true\n"
                                     "Tag: py3-none-any\n"),
    }
    with zipfile.ZipFile(path, "w") as zf:
        for arc, text in files.items():
            zf.writestr(arc, text)
        zf.writestr(f"{dist}.dist-info/RECORD", "".join(f"{a},,\n" for a in files) + f"{dist}.dist-info/RECORD,,\n")
    return path


@dataclass(frozen=True)
class Replacement:
    name: str
    host_version: str | None
    bundled_version: str
    required_by: tuple[str, ...]  # "requirer: requirement" of every pick that names this package
    planned: bool  # the plan bundled it on purpose (the host's version fails a specifier)


@dataclass(frozen=True)
class CheckResult:
    picks: dict[str, tuple[str, str]]  # name -> (version, "bundle" | "host")
    replacements: tuple[Replacement, ...]

    @property
    def conflicts(self) -> tuple[Replacement, ...]:
        return tuple(r for r in self.replacements if not r.planned)


def resolver_check(bundle: Path, host: dict[str, str | None], requirement: str, python_version: str,
                   platforms: list[str], planned: set[str], run: Runner = subprocess.run,
                   left_out: dict[str, str] | None = None, python: str = sys.executable) -> CheckResult:
    """Run pip's resolver offline over the bundle and stand-ins of the host's set (see the docstring).
    Host packages without a known version (`name @ url`) get no stand-in. `left_out` (name -> version)
    are packages left out of the bundle on purpose although a requirement names them (gradio, which
    openenv requires but imports only for its web UI): they get stand-ins too, their picks are counted
    as "left-out", and the host must then install the bundle with --no-deps. `python` runs pip: pip
    evaluates markers for the interpreter it runs in, so it should be the host's Python version. Raises BundleError when
    pip cannot resolve."""
    with tempfile.TemporaryDirectory() as tmp:
        standins = Path(tmp, "host")
        standins.mkdir()
        for name, version in {**(left_out or {}), **host}.items():
            if version is not None:
                make_standin(name, version, standins)
        report = Path(tmp, "report.json")
        # pip (23.2) takes --platform only with --target, even for a dry run; nothing is written there.
        cmd = _pip("install", "--dry-run", "--ignore-installed", "--no-index", "--quiet", "--target", str(Path(tmp, "t")),
                   "--find-links", str(bundle), "--find-links", str(standins),
                   "--python-version", python_version, "--implementation", "cp", "--only-binary=:all:",
                   "--report", str(report), python=python)
        for p in platforms:
            cmd += ["--platform", p]
        got = run([*cmd, requirement], capture_output=True, text=True)
        if got.returncode != 0:
            raise BundleError(f"pip cannot install {requirement} from the bundle over the host's packages "
                              f"(--no-index):\n{got.stderr.strip()[-3000:]}\nThe package pip names is missing from "
                              f"the bundle or held at an unusable version by the host: add it, or --skip the requirer.")
        items = json.loads(report.read_text())["install"]
    picks: dict[str, tuple[str, str]] = {}
    requires: dict[str, list[str]] = {}
    for item in items:
        meta = item["metadata"]
        name = canonicalize_name(meta["name"])
        source = "host" if Path(tmp, "host").as_uri() in item["download_info"]["url"] else "bundle"
        if source == "host" and name not in host:
            source = "left-out"
        picks[name] = (meta["version"], source)
        for raw in meta.get("requires_dist", []) or []:
            requires.setdefault(canonicalize_name(Requirement(raw).name), []).append(f"{name}: {raw}")
    replacements = tuple(
        Replacement(n, host[n], v, tuple(requires.get(n, ())), n in planned)
        for n, (v, src) in sorted(picks.items()) if src == "bundle" and n in host
    )
    return CheckResult(picks, replacements)


def format_check(result: CheckResult) -> list[str]:
    count = {k: sum(1 for _, s in result.picks.values() if s == k) for k in ("bundle", "host", "left-out")}
    lines = [f"pip's resolver (--no-index): {len(result.picks)} packages, {count['bundle']} from the bundle, "
             f"{count['host']} from the host"]
    gone = sorted(n for n, (_, s) in result.picks.items() if s == "left-out")
    if gone:
        lines.append(f"  required but left out on purpose: {', '.join(gone)}; install the bundle on the host with "
                     "`pip install --no-index --no-deps wheelhouse/*.whl` (a plain `pip install --no-index` fails on them)")
    for r in result.replacements:
        kind = "replaces (planned)" if r.planned else "CONFLICT: would replace"
        lines.append(f"  {kind} host {r.name} {r.host_version} with {r.bundled_version}; required by "
                     + ("; ".join(r.required_by) or "nothing in the resolve"))
    return lines


def strip_wheel(path: Path, prefixes: tuple[str, ...]) -> int:
    """Rewrite `path` without the files under `prefixes`; return how many files were dropped."""
    tmp = path.with_suffix(".tmp")
    dropped = 0
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        gone = {i.filename for i in src.infolist() if i.filename.startswith(prefixes)}
        for info in src.infolist():
            if info.filename in gone:
                dropped += not info.is_dir()
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                kept = [ln for ln in data.decode().splitlines(keepends=True) if ln.split(",")[0] not in gone]
                data = "".join(kept).encode()
            dst.writestr(info, data)
    tmp.replace(path)
    return dropped


def strip_ui(folder: Path) -> list[str]:
    """Strip the UI files of the Prefect and MLflow wheels in `folder`; one line per wheel touched."""
    lines = []
    for wheel in sorted(folder.glob("*.whl")):
        prefixes = UI_PREFIXES.get(wheel_name(wheel))
        if prefixes:
            before = wheel.stat().st_size
            n = strip_wheel(wheel, prefixes)
            lines.append(f"  stripped {n} UI files from {wheel.name}: {before / 2**20:.1f} -> "
                         f"{wheel.stat().st_size / 2**20:.1f} MiB")
    return lines
