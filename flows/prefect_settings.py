"""The Prefect defaults our entry points set, each only when unset, before Prefect is imported.

- `PREFECT_SERVER_ANALYTICS_ENABLED=false`: no telemetry from the ephemeral server (its heartbeat
  otherwise logs a "database is locked" traceback);
- `PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=60`: start-up allowance for loaded 2-core machines;
- `PREFECT_LOGGING_EXTRA_LOGGERS=kernelflow`: the `kernelflow` loggers forwarded to the Prefect UI.

Prefect reads these when it is first imported, so `apply()` runs at the top of each entry point
(`python -m flows.experiment`, `python -m flows.rejudge`, `python -m flows.compare`) before any
import of Prefect, and only there: importing `flows` or any of its modules leaves os.environ as it
was. This module imports nothing of Prefect.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

DEFAULTS: dict[str, str] = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "60",
    "PREFECT_LOGGING_EXTRA_LOGGERS": "kernelflow",
}


def apply(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set each of `DEFAULTS` that `environ` (default os.environ) lacks; returns the ones it set."""
    env = os.environ if environ is None else environ
    added = {k: v for k, v in DEFAULTS.items() if k not in env}
    env.update(added)
    return added
