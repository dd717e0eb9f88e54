"""`python -m kernelflow.env.server`: the same as `kernelflow serve`, plus `--port-file` for launchers."""

from __future__ import annotations

import argparse
import sys

from kernelflow.env.server.app import serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelflow.env.server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (see --port-file)")
    parser.add_argument("--config", default=None, help="a JSON file of EnvServerConfig fields")
    parser.add_argument("--port-file", default=None, help="write the bound port to this file once listening")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    return serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
