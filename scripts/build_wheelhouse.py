"""Build an offline wheelhouse of what a GPU host needs beyond its own torch and triton.

    python scripts/build_wheelhouse.py --extra env --python-version 3.12 --platform manylinux2014_x86_64 --out wheelhouse
    python scripts/build_wheelhouse.py --extra env --host-freeze scripts/hosts/h200_pip_freeze.txt --dry-run
    # on the air-gapped host:
    pip install --no-index --no-deps wheelhouse/*.whl   # --no-deps: openenv requires gradio, which is left out

The dependency closure of `kernelflow[<extra>]` is read from the packages installed in the current
environment (so the versions are exactly the ones in constraints.txt that were checked together),
following the extras each requirement names and evaluating markers for the target Python (so
`tomli; python_version < "3.11"` is not bundled for 3.12), minus torch, triton and the CUDA libraries
(the host has its own) and minus optional heavy extras (gradio: OpenEnv imports it only for its
optional web UI; openai must stay, since openenv.core.rubrics imports it at import time). Each
package is then downloaded with `pip download --no-deps --only-binary=:all:` for the target Python
version and platform, and the kernelflow wheel itself is built into the same folder. `--skip` drops
packages by name.

`--host-freeze FILE` (a `pip freeze` of the GPU host) bundles only what the host lacks, or has at a
version that fails a specifier of the closure (`plan_bundle`, a pure function). A specifier counts
when its requirer is kernelflow, is bundled, or is on the host at the version installed here (so its
metadata is the host's); a requirer the host has at another version brings requirements we cannot
read offline, and those are reported as not checked.

The wheels are staged in a temp folder next to `--out` (scripts/wheelhouse_check.py): a package with
no wheel for the target is built here from its sdist when that gives a pure-Python wheel, and refused
by name otherwise. With `--host-freeze`, pip's resolver then installs `kernelflow[extra]` offline
(`--dry-run --no-index`) from the stage over stand-ins of the host's packages; a host package it would
replace that the plan did not mean to is an error, and nothing reaches `--out`. Packages left out on
purpose (gradio, `--skip`) get stand-ins at the version installed here; the host then installs with
--no-deps. `--strip-ui` leaves the Prefect and MLflow web UI files out of their wheels and prints the
bundle's size before and after.
Not covered: the stand-ins carry no requirements, so a bundled replacement (e.g. filelock 4.3) is not
checked against what the host's other packages (e.g. its torch) require of it; pip evaluates markers
for the Python it runs in, so `--check-python` names one of the host's version (checked before downloading).

Run it from an environment where `scripts/install.sh` installed kernelflow with all extras.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its sibling module
import wheelhouse_check as wheels  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "kernelflow"
# Never bundled: the host brings its own CUDA build of these.
HOST_PROVIDED = {"torch", "triton", "setuptools", "pip", "wheel"}
HOST_PROVIDED_PREFIXES = ("nvidia-", "cuda-")
# Optional heavy extras that nothing in kernelflow needs at run time.
OPTIONAL_HEAVY = {"gradio", "gradio-client"}  # openai stays: openenv.core.rubrics imports it


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Closure:
    """versions: name -> version installed here (what would be bundled); needs: name -> (requirer, specifier)."""

    versions: dict[str, str]
    needs: dict[str, tuple[tuple[str, str], ...]]
    requirer_versions: dict[str, str]  # every requirer's installed version, kernelflow included


@dataclass(frozen=True)
class Conflict:
    name: str
    host_version: str | None  # None: the freeze names the package without a version (e.g. `name @ url`)
    required: tuple[tuple[str, str], ...]  # (requirer, specifier) pairs the host's version fails
    bundled_version: str | None  # None for packages that are never bundled (torch, triton, CUDA)


@dataclass(frozen=True)
class Plan:
    bundle: dict[str, str]  # name -> version to download
    missing: tuple[str, ...]  # bundled because the host lacks them
    conflicts: tuple[Conflict, ...]  # bundled because the host's version fails a specifier
    host_has: dict[str, str | None]  # left out: the host's version is acceptable
    unchecked: tuple[tuple[str, str, str, str | None], ...]  # (requirer, name, specifier, host version of name)
    host_provided: tuple[Conflict, ...]  # torch & co. fail a specifier on the host: cannot be fixed by bundling


def _excluded(name: str) -> bool:
    return name in HOST_PROVIDED or name in OPTIONAL_HEAVY or name.startswith(HOST_PROVIDED_PREFIXES)


def installed(names: set[str]) -> dict[str, str]:
    """The versions installed here of those names that are installed."""
    found = {}
    for name in sorted(names):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def project_requires(pyproject: Path = ROOT / "pyproject.toml") -> tuple[str, list[str]]:
    """kernelflow's version and requirements from pyproject.toml (what the built wheel will declare),
    not from the installed metadata, which is as old as the last `pip install -e`."""
    project = tomllib.loads(pyproject.read_text())["project"]
    reqs = list(project.get("dependencies", []))
    for extra, deps in project.get("optional-dependencies", {}).items():
        for dep in deps:
            base, _, marker = dep.partition(";")
            reqs.append(f"{base.strip()}; ({marker.strip()}) and extra == '{extra}'" if marker else f"{base}; extra == '{extra}'")
    return project["version"], reqs


def closure(extra: str, skip: set[str], python_version: str = "3.12") -> Closure:
    """kernelflow[extra] and everything it needs (each (name, extra) expanded once), minus exclusions."""
    env = {"python_version": python_version, "python_full_version": f"{python_version}.0"}
    versions: dict[str, str] = {}
    requirers: dict[str, str] = {}
    needs: dict[str, list[tuple[str, str]]] = {}
    seen: set[tuple[str, str]] = set()
    stack: list[Requirement] = [Requirement(f"{PROJECT}[{extra}]")]
    while stack:
        req = stack.pop()
        name = canonical(req.name)
        todo = [e for e in sorted(set(req.extras) | {""}) if (name, e) not in seen]
        if not todo or name in skip or (_excluded(name) and name != PROJECT):
            continue
        seen.update((name, e) for e in todo)
        if name == PROJECT:
            version, requires = project_requires()
        else:
            try:
                dist = metadata.distribution(req.name)
            except metadata.PackageNotFoundError:
                raise SystemExit(f"{req.name} is not installed here; run scripts/install.sh first") from None
            version, requires = dist.version, dist.requires or []
            versions[name] = version
        requirers[name] = version
        for raw in requires:
            sub = Requirement(raw)
            if sub.marker is not None and not any(sub.marker.evaluate({**env, "extra": e}) for e in todo):
                continue
            if canonical(sub.name) != name:
                needs.setdefault(canonical(sub.name), []).append((name, str(sub.specifier)))
            stack.append(sub)
    return Closure(versions, {n: tuple(sorted(set(v))) for n, v in needs.items()}, requirers)


def parse_freeze(text: str) -> tuple[dict[str, str | None], list[str]]:
    """`pip freeze` text -> (name -> version, or None for `name @ url`; the lines that are not requirements)."""
    host: dict[str, str | None] = {}
    ignored: list[str] = []
    for line in (raw.strip() for raw in text.splitlines()):
        if not line or line.startswith("#"):
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            ignored.append(line)
            continue
        pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
        if req.url or pins:
            host[canonical(req.name)] = pins[0] if pins else None
        else:
            ignored.append(line)
    return host, ignored


def satisfies(version: str | None, specifier: str) -> bool:
    """An empty specifier accepts anything, an unknown or non-PEP 440 version nothing else."""
    try:
        return not specifier or (version is not None and SpecifierSet(specifier).contains(Version(version), prereleases=True))
    except InvalidVersion:
        return False


def _same_version(a: str | None, b: str | None) -> bool:
    try:
        return a is not None and b is not None and Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def plan_bundle(closure: Closure, host: dict[str, str | None]) -> Plan:
    """What to bundle for a host with these packages (pure: no metadata, no network)."""
    bundled = {n for n in closure.versions if n not in host}
    failed: dict[str, tuple[tuple[str, str], ...]] = {}

    def counts(requirer: str) -> bool:  # is this requirer's installed metadata the one that will run?
        if requirer == PROJECT or requirer in bundled:
            return True
        return _same_version(host.get(requirer), closure.requirer_versions.get(requirer))

    changed = True
    while changed:  # bundling a package makes its own specifiers count: iterate to the fixed point
        changed = False
        for name in sorted(set(closure.versions) - bundled):
            bad = tuple(n for n in closure.needs.get(name, ()) if counts(n[0]) and not satisfies(host[name], n[1]))
            if bad:
                bundled.add(name)
                failed[name] = bad
                changed = True
    conflicts = tuple(Conflict(n, host[n], failed[n], closure.versions[n]) for n in sorted(failed))
    unchecked = tuple(
        (r, n, s, host[n]) for n in sorted(set(closure.versions) - bundled)
        for r, s in closure.needs.get(n, ()) if not counts(r) and not satisfies(host[n], s)
    )
    host_provided = []
    for name in sorted(n for n in closure.needs if _excluded(n) and n in host):
        bad = tuple(x for x in closure.needs[name] if counts(x[0]) and not satisfies(host[name], x[1]))
        if bad:
            host_provided.append(Conflict(name, host[name], bad, None))
    return Plan(
        bundle={n: v for n, v in sorted(closure.versions.items()) if n in bundled},
        missing=tuple(sorted(n for n in bundled if n not in host)),
        conflicts=conflicts,
        host_has={n: host[n] for n in sorted(set(closure.versions) - bundled)},
        unchecked=unchecked,
        host_provided=tuple(host_provided),
    )


def format_plan(plan: Plan, versions: dict[str, str]) -> list[str]:
    def req(c: Conflict) -> str:
        return ", ".join(f"{s or 'any'} ({r})" for r, s in c.required)

    lines = [f"left out, the host has them ({len(plan.host_has)}):"]
    lines += [f"  {n}=={v}" if v else f"  {n} (version unknown)" for n, v in plan.host_has.items()]
    lines.append(f"bundled, the host lacks them ({len(plan.missing)}):")
    lines += [f"  {n}=={versions[n]}" for n in plan.missing]
    lines.append(f"bundled, the host's version conflicts ({len(plan.conflicts)}):")
    lines += [f"  {c.name}: host {c.host_version or 'unknown'}, required {req(c)} -> bundling {c.bundled_version}"
              for c in plan.conflicts]
    if plan.unchecked:
        lines.append("not checked (the host has the requirer at another version than here, its metadata is unknown):")
        lines += [f"  {r} (here) wants {n}{s}, host has {n} {hv}" for r, n, s, hv in plan.unchecked]
    for c in plan.host_provided:
        lines.append(f"WARNING: host's {c.name} {c.host_version} fails {req(c)}; it is never bundled, upgrade the host")
    return lines


def size_report(out: Path, names: set[str]) -> list[str]:
    """Size of this plan's wheels in `out` (other wheels already there are counted apart)."""
    wheels = sorted(out.glob("*.whl"), key=lambda f: -f.stat().st_size)
    ours = [f for f in wheels if canonical(f.name.split("-")[0]) in names]
    total = sum(f.stat().st_size for f in ours)
    lines = [f"wheelhouse {out}: {len(ours)} wheels, {total / 2**20:.1f} MiB; largest:"]
    lines += [f"  {f.stat().st_size / 2**20:6.1f} MiB  {f.name}" for f in ours[:5]]
    if len(ours) < len(wheels):
        lines.append(f"  ({len(wheels) - len(ours)} other wheels in {out} are not part of this plan)")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--extra", default="env", help="kernelflow extra to bundle (eval, env, train, flows, all)")
    parser.add_argument("--python-version", default="3.12", help="target Python, e.g. 3.12")
    parser.add_argument("--platform", action="append", default=None,
                        help="target platform tag(s); default: manylinux 2014/2_17/2_28 x86_64")
    parser.add_argument("--skip", nargs="*", default=[], help="packages to leave out by name")
    parser.add_argument("--host-freeze", type=Path, help="`pip freeze` of the host: bundle only what it lacks or conflicts")
    parser.add_argument("--out", default="wheelhouse")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit without downloading")
    parser.add_argument("--check-python", default=sys.executable,
                        help="a Python of the host's version with pip, for the resolver check (pip evaluates markers for it)")
    parser.add_argument("--strip-ui", action="store_true", help="leave the Prefect and MLflow web UI files out of their wheels")
    args = parser.parse_args()

    platforms = args.platform or ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64",
                                  "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux1_x86_64"]
    skip = {canonical(s) for s in args.skip}  # left out on purpose: the resolver check gets stand-ins for them
    found = closure(args.extra, skip, args.python_version)
    wanted = found.versions
    print(f"{len(wanted)} packages for kernelflow[{args.extra}] (torch, triton, CUDA libraries and gradio excluded)")
    if args.host_freeze:
        host, ignored = parse_freeze(args.host_freeze.read_text())
        print(f"host {args.host_freeze}: {len(host)} packages" + (f" ({len(ignored)} other lines ignored)" if ignored else ""))
        plan = plan_bundle(found, host)
        print("\n".join(format_plan(plan, wanted)))
        wanted = plan.bundle
        print(f"{len(wanted)} packages to bundle, {len(plan.host_has)} left to the host")
    else:
        for name, version in sorted(wanted.items()):
            print(f"  {name}=={version}")
    if args.dry_run:
        return 0
    if args.host_freeze:  # fail before downloading: a check under another Python reads other markers
        got = subprocess.run([args.check_python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip()
        if got != args.python_version:
            raise wheels.BundleError(f"the resolver check runs under Python {got or '?'} ({args.check_python}) but the "
                                     f"host's is {args.python_version}: pass --check-python /path/to/python{args.python_version}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # Stage in a temp folder: --out receives wheels only once pip's resolver has accepted them.
    with tempfile.TemporaryDirectory(prefix="wheelhouse-", dir=out.parent) as tmp:
        stage = Path(tmp)
        built = wheels.fetch(wanted, stage, args.python_version, platforms)
        if built:
            print("built from sdists (pure Python): " + ", ".join(built))
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(stage), str(ROOT)], check=True)
        if args.host_freeze:
            result = wheels.resolver_check(stage, host, f"{PROJECT}[{args.extra}]", args.python_version, platforms,
                                           {c.name for c in plan.conflicts}, left_out=installed(OPTIONAL_HEAVY | skip),
                                           python=args.check_python)
            print("\n".join(wheels.format_check(result)))
            if result.conflicts:
                raise wheels.BundleError("the bundle would replace host packages the plan did not mean to: "
                                         + ", ".join(c.name for c in result.conflicts) + "; nothing written to "
                                         f"{out}. Add them to the host list or --skip their requirers.")
        names = set(wanted) | {PROJECT}
        if args.strip_ui:
            before = sum(f.stat().st_size for f in stage.glob("*.whl"))
            print("\n".join(wheels.strip_ui(stage)))
            after = sum(f.stat().st_size for f in stage.glob("*.whl"))
            print(f"--strip-ui: bundle {before / 2**20:.1f} -> {after / 2**20:.1f} MiB")
        for f in stage.glob("*.whl"):
            f.replace(out / f.name)
    print("\n".join(size_report(out, names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
