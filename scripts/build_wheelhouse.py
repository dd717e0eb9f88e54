"""Build an offline wheelhouse of what a GPU host needs beyond its own torch and triton.

    python scripts/build_wheelhouse.py --extra env --python-version 3.12 --platform manylinux2014_x86_64 --out wheelhouse
    # on the air-gapped host:
    pip install --no-index --find-links wheelhouse 'kernelflow[env]' (or --no-deps over wheelhouse/*.whl)

The dependency closure of `kernelflow[<extra>]` is read from the packages installed in the current
environment (so the versions are exactly the ones in constraints.txt that were checked together),
minus torch, triton and the CUDA libraries (the host has its own) and minus optional heavy extras
(gradio: OpenEnv imports it only for its optional web UI; openai must stay, since
openenv.core.rubrics imports it at import time). Each package is then downloaded with
`pip download --no-deps --only-binary=:all:` for the target Python version and platform, and the
kernelflow wheel itself is built into the same folder. `--skip` drops packages the host already
has (e.g. numpy, requests) to make the bundle smaller.

Run it from an environment where `scripts/install.sh` installed kernelflow with all extras.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
# Never bundled: the host brings its own CUDA build of these.
HOST_PROVIDED = {"torch", "triton", "setuptools", "pip", "wheel"}
HOST_PROVIDED_PREFIXES = ("nvidia-", "cuda-")
# Optional heavy extras that nothing in kernelflow needs at run time.
OPTIONAL_HEAVY = {"gradio", "gradio-client"}  # openai stays: openenv.core.rubrics imports it


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(extra: str, skip: set[str]) -> dict[str, str]:
    """name -> installed version for kernelflow[extra] and everything it needs, minus exclusions."""
    wanted: dict[str, str] = {}
    stack = [(Requirement(f"kernelflow[{extra}]"), frozenset())]
    while stack:
        req, _ = stack.pop()
        name = canonical(req.name)
        if name in wanted or name in skip or name in HOST_PROVIDED or name in OPTIONAL_HEAVY:
            continue
        if name.startswith(HOST_PROVIDED_PREFIXES):
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{req.name} is not installed here; run scripts/install.sh first") from None
        if name != "kernelflow":
            wanted[name] = dist.version
        extras = set(req.extras) or {""}
        for raw in dist.requires or []:
            sub = Requirement(raw)
            if sub.marker is not None and not any(sub.marker.evaluate({"extra": e}) for e in extras):
                continue
            stack.append((sub, frozenset()))
    return wanted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--extra", default="env", help="kernelflow extra to bundle (eval, env, train, flows, all)")
    parser.add_argument("--python-version", default="3.12", help="target Python, e.g. 3.12")
    parser.add_argument("--platform", action="append", default=None,
                        help="target platform tag(s); default: manylinux 2014/2_17/2_28 x86_64")
    parser.add_argument("--skip", nargs="*", default=[], help="packages the host already has")
    parser.add_argument("--out", default="wheelhouse")
    parser.add_argument("--dry-run", action="store_true", help="list the packages and exit")
    args = parser.parse_args()

    platforms = args.platform or ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64",
                                  "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux1_x86_64"]
    wanted = closure(args.extra, {canonical(s) for s in args.skip})
    print(f"{len(wanted)} packages for kernelflow[{args.extra}] (torch, triton, CUDA libraries and gradio excluded)")
    for name, version in sorted(wanted.items()):
        print(f"  {name}=={version}")
    if args.dry_run:
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(out),
           "--python-version", args.python_version, "--implementation", "cp"]
    for p in platforms:
        cmd += ["--platform", p]
    cmd += [f"{n}=={v}" for n, v in sorted(wanted.items())]
    subprocess.run(cmd, check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(ROOT)], check=True)
    size = sum(f.stat().st_size for f in out.glob("*.whl"))
    print(f"wheelhouse {out}: {len(list(out.glob('*.whl')))} wheels, {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
