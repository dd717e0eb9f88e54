"""Keep the verdicts of GPU tests for the docs' tables, when the run asks for it.

A GPU session is short and a full-shape verdict costs 15-40 s, so the `pytest -m gpu` run that checks a
solution also supplies its row in docs/ instead of judging it a second time in a benchmark. Set
`KERNELFLOW_GPU_VERDICTS` to a folder and each recording test writes `<name>.json` there (the verdict's
`to_dict()`, plus the test's wall time). Unset, nothing is written. Works under xdist: one file per test.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

ENV_VAR = "KERNELFLOW_GPU_VERDICTS"


def record_verdict(name: str, verdict, wall_s: float) -> Path | None:
    """Write `verdict` under the folder named by the environment, if any; returns the file written."""
    folder = os.environ.get(ENV_VAR)
    if not folder:
        return None
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    target = path / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.json"
    target.write_text(json.dumps({**verdict.to_dict(), "verdict_wall_s": wall_s}, indent=1))
    return target
