"""The experiment pipeline: Hydra configs -> one Prefect flow -> MLflow tracking -> a report.

Entry points: `python -m flows.experiment [overrides]` (flows/experiment.py) and `kernelflow rejudge
RUN` (flows/rejudge.py). This is the only layer that knows Hydra and Prefect; the library layers get
their own dataclasses from `flows.config`.

Importing this package sets three Prefect defaults in os.environ, each only when unset, before any
module here imports Prefect: no telemetry from the ephemeral server (its heartbeat otherwise logs a
"database is locked" traceback), a 60 s server start-up allowance for loaded 2-core machines, and the
`kernelflow` loggers forwarded to the Prefect UI.
"""

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "60")
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "kernelflow")
