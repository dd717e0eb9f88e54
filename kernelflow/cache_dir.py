"""Where kernelflow keeps what it builds once and reuses: one directory, one environment variable.

`KERNELFLOW_CACHE_DIR` (default `~/.cache/kernelflow`) holds the evaluator's timing calibrations and
GPU lock files (kernelflow/eval/clock/timing.py) and the locally built policies under `tiny/`
(kernelflow/train/tiny.py, sft.py). The train layer used to read `KERNELFLOW_CACHE`; that name is
still honoured when `KERNELFLOW_CACHE_DIR` is unset, with a FutureWarning saying to rename it, and
ignored (also with a warning) when both are set.

This module is the bottom layer of `kernelflow`: it imports only the standard library, and it does
not create the directory (callers do, where they write).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path

CACHE_ENV_VAR = "KERNELFLOW_CACHE_DIR"
DEPRECATED_CACHE_ENV_VAR = "KERNELFLOW_CACHE"  # the train layer's old name, read until it is removed


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """$KERNELFLOW_CACHE_DIR, else the deprecated $KERNELFLOW_CACHE (with a warning), else ~/.cache/kernelflow."""
    env = os.environ if environ is None else environ
    new, old = env.get(CACHE_ENV_VAR), env.get(DEPRECATED_CACHE_ENV_VAR)
    if old and new and old != new:
        warnings.warn(f"{DEPRECATED_CACHE_ENV_VAR}={old} is ignored: {CACHE_ENV_VAR}={new} is set and wins; "
                      f"unset {DEPRECATED_CACHE_ENV_VAR}", FutureWarning, stacklevel=2)
    elif old and not new:
        warnings.warn(f"{DEPRECATED_CACHE_ENV_VAR} is deprecated: set {CACHE_ENV_VAR}={old} instead "
                      f"(one cache variable for the evaluator and the trainer)", FutureWarning, stacklevel=2)
        new = old
    return Path(new) if new else Path.home() / ".cache" / "kernelflow"
